#!/usr/bin/env bash
# The engine as an embedder gets it: packages every library crate (`cargo package`), checks
# every packaged library against the others' packages, builds numaio-engine's packaged tests
# against the packages, then
# builds and runs a small program in a new crate outside the workspace that depends on the
# unpacked packages only: opens a file, writes, reads back, closes, and checks the bytes.
# Exit 0 when all of that worked.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
say() { printf '[package-check] %s\n' "$*"; }

target="${CARGO_TARGET_DIR:-$PWD/target}"
# Every library crate packages and its package builds against the others' packages; the
# binaries (numaio, numaio-lab) are not published. Not `cargo package`'s own verification:
# it builds against a temporary registry, and cargo takes registry crates as immutable, so
# in a reused target directory it links a build of an earlier run's package of the same
# version. The packages unpacked below are path dependencies, rebuilt from what they hold.
libs=(numaio-testkit numaio-sys numaio-numa numaio-procfs numaio-bpf numaio-engine numaio-proc numaio-pagecache numaio-model numaio-cli-support numaio-fs numaio-fuse)
say "cargo package ${libs[*]}"
cargo package --quiet --allow-dirty --no-verify "${libs[@]/#/-p}"
version="$(cargo pkgid -p numaio-engine | sed 's/.*[#@]//')"
sys_version="$(cargo pkgid -p numaio-sys | sed 's/.*[#@]//')"
kit_version="$(cargo pkgid -p numaio-testkit | sed 's/.*[#@]//')"
numa_version="$(cargo pkgid -p numaio-numa | sed 's/.*[#@]//')"
pkg="$target/package"

# Outside the workspace (a package under it would be taken for a member), at the same path on
# every run of this checkout: the builds below use the workspace's target directory, where
# crates.io dependencies already built with the same features are reused, and a fixed path
# keeps the packaged crates' own artifacts from piling up there run after run.
work="/var/tmp/numaio-package-check.$(printf '%s' "$PWD" | cksum | cut -d' ' -f1)"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
# Every library as its package, against the others' packages: the .crate files themselves
# are unpacked, so nothing of the workspace can leak in.
patches=()
deps=""
for l in "${libs[@]}"; do
    v="$(cargo pkgid -p "$l" | sed 's/.*[#@]//')"
    [ -f "$pkg/$l-$v.crate" ] || { echo "[package-check] ERROR: $pkg/$l-$v.crate was not made" >&2; exit 1; }
    tar -xzf "$pkg/$l-$v.crate" -C "$work"
    patches+=(--config "patch.crates-io.$l.path=\"$work/$l-$v\"")
    deps+="$l = { path = \"../$l-$v\" }"$'\n'
done
mkdir -p "$work/all/src"
printf '[package]\nname = "all-packages"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n[dependencies]\n%s\n[workspace]\n' "$deps" > "$work/all/Cargo.toml"
: > "$work/all/src/lib.rs"
# `cargo check`: whether each package compiles against the others is the question; the
# packages the engine needs are built for real just below.
say "checking every packaged library against the others' packages"
CARGO_TARGET_DIR="$target" cargo check --quiet --manifest-path "$work/all/Cargo.toml" "${patches[@]}"
# The engine's packaged tests build against the other packages.
say "building numaio-engine's packaged tests"
CARGO_TARGET_DIR="$target" cargo test --quiet --no-run --manifest-path "$work/numaio-engine-$version/Cargo.toml" \
    --config "patch.crates-io.numaio-sys.path=\"$work/numaio-sys-$sys_version\"" \
    --config "patch.crates-io.numaio-testkit.path=\"$work/numaio-testkit-$kit_version\"" \
    --config "patch.crates-io.numaio-numa.path=\"$work/numaio-numa-$numa_version\""
mkdir -p "$work/user/src"
cat > "$work/user/Cargo.toml" <<TOML
[package]
name = "engine-user"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
numaio-engine = { path = "../numaio-engine-$version", default-features = false }

[patch.crates-io]
numaio-sys = { path = "../numaio-sys-$sys_version" }
numaio-numa = { path = "../numaio-numa-$numa_version" }

[workspace]
TOML
cat > "$work/user/src/main.rs" <<'RS'
use numaio_engine::{Engine, OpenOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).expect("a scratch directory");
    let path = std::path::Path::new(&dir).join("data");
    let engine = Engine::builder().with_cache_bytes(8 << 20).build()?;
    let f = engine.open(&path, OpenOptions::create_rw())?;
    let data: Vec<u8> = (0..3 * 4096 + 17).map(|i| (i % 251) as u8).collect();
    f.pwrite(&data, 4096)?;
    f.fsync()?;
    let mut back = vec![0u8; data.len()];
    f.pread(&mut back, 4096)?;
    assert_eq!(back, data, "read back through the engine");
    drop(f);
    engine.close()?;
    let on_disk = std::fs::read(&path)?;
    assert_eq!(&on_disk[4096..], &data[..], "on disk after close");
    println!("engine-user: {} bytes written, read back and on disk", data.len());
    Ok(())
}
RS
say "building and running a crate that depends on the packages only"
CARGO_TARGET_DIR="$target" cargo run --quiet --manifest-path "$work/user/Cargo.toml" -- "$work"
say "ok"
