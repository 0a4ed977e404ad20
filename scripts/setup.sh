#!/usr/bin/env bash
# Sets up a Debian machine for numaio: apt packages the demo and the lab need, a Rust
# toolchain check, and the lab's two guest kernels (Debian 12's 6.1 cloud kernel and
# Debian's 7.3 from trixie-backports, extracted into the git-ignored lab/cache/kernel/). Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo: run as root or install sudo"
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# NUMAIO_SETUP_PARTS: which parts to set up, a comma list (default all three):
#   base     apt packages and the Rust toolchain check
#   tools    tools built with `cargo install` (cargo-fuzz; with NUMAIO_CONFORMANCE=1 also
#            pjdfstest and fsx): minutes of compiling on a fresh machine
#   programs the real programs of scripts/fs-programs.sh (apt: dbench, PostgreSQL, ...; zlib's
#            source)
#   kernels  the lab's guest kernels (downloads)
# scripts/test.sh sets up `base` and `tools` first, the others in the background while it
# compiles.
parts="${NUMAIO_SETUP_PARTS:-base,tools,programs,kernels}"
want() { [[ ",$parts," == *",$1,"* ]]; }
IFS=, read -ra _parts <<< "$parts"
for p in "${_parts[@]}"; do
    case "$p" in base | tools | programs | kernels) ;; *) die "NUMAIO_SETUP_PARTS: unknown part '$p' (known: base, tools, programs, kernels)" ;; esac
done
apt_updated=0

if want base; then

# qemu: the lab's VM; busybox-static: guest userland; numactl: guest + host tool;
# e2fsprogs: mkfs.ext4 -d for lab disks; dmsetup: ext4 over dm-linear baseline in the lab; cpio; fio/vmtouch: comparison peers;
# util-linux: fincore, setpriv; binutils: strip (smaller initramfs); apt/dpkg: kernel fetch;
# xz-utils: the 7.3 kernel's .ko.xz modules; bindfs: the pass-through FUSE peer of scripts/fs-conformance.sh and fs-bench.sh; gcc: builds
# the conformance suite's O_DIRECT shim for fsx; stress-ng: the conformance suite's file-system stressors;
# sqlite3: a real program whose crash safety the mount tests check; acl: setfacl for the ACL tests;
# prometheus: promtool, which checks the daemon's metrics (crates/numaio-proc/tests/fleet.rs).
# tmux: drives `numaio top`'s live view in its screenshot test.
# clang, llvm (llvm-strip), libbpf-dev (bpf_helpers.h): compile the eBPF collector's programs.
PKGS=(qemu-system-x86 busybox-static numactl e2fsprogs dmsetup cpio fio vmtouch util-linux binutils libc-bin ca-certificates bindfs gcc xz-utils stress-ng sqlite3 acl prometheus tmux clang llvm libbpf-dev)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing: ${missing[*]}"
    $SUDO apt-get update -qq
    apt_updated=1
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # The prometheus package also starts a Prometheus server under systemd: only promtool is wanted.
    if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
        $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
else
    say "apt packages present"
fi

# Rust toolchain (stable, with rustfmt and clippy)
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
    die "no Rust toolchain: install stable Rust with rustup (https://rustup.rs: curl --proto '=https' -sSf https://sh.rustup.rs | sh -s -- -y), then run this again"
fi
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then
        say "adding rustfmt and clippy"
        rustup component add rustfmt clippy
    else
        die "cargo fmt / cargo clippy missing: install the rustfmt and clippy components"
    fi
fi
say "rust: $(cargo --version)"

fi # base

if want tools; then
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

# File-system conformance suites (scripts/fs-conformance.sh): pinned versions, installed only
# when missing or different, and only when asked (NUMAIO_CONFORMANCE=1): the test suite does not
# run them, and building them costs minutes on a fresh machine.
if [ "${NUMAIO_CONFORMANCE:-0}" = 1 ]; then
for tool in pjdfstest:0.2.2 fsx:0.3.2; do
    name="${tool%%:*}" version="${tool##*:}"
    if [ "$(PATH="$HOME/.cargo/bin:$PATH" "$name" --version 2>/dev/null)" != "$name $version" ]; then
        say "installing $name $version"
        cargo install "$name" --version "$version" --locked --quiet || die "cargo install $name --version $version --locked failed"
    fi
done
# pjdfstest switches to two unprivileged users: nobody (Debian's) and a system user `tests`.
if ! getent passwd tests >/dev/null; then
    say "adding system user tests (pjdfstest)"
    $SUDO useradd --system --user-group --no-create-home --shell /usr/sbin/nologin tests
fi
fi

# Fuzzing (scripts/fuzz.sh) needs a nightly toolchain and cargo-fuzz.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
        say "installing cargo-fuzz"
        cargo install cargo-fuzz --locked --quiet || say "warning: cargo install cargo-fuzz failed; scripts/fuzz.sh will say so"
    fi
else
    say "note: no nightly toolchain; the fuzz and AddressSanitizer steps need one (rustup toolchain install nightly)"
fi

fi # tools

if want programs; then
# The real programs of scripts/fs-programs.sh (its --ci mode is a test step): dbench,
# PostgreSQL (initdb, pg_ctl, pgbench; installed without a "main" cluster), sqlite3,
# stress-ng, gcc and make, and zlib's source for its C build (apt-get source through a private
# apt state in lab/cache/src). A failure here is not fatal: that run says SKIPPED, and fails
# in CI.
$SUDO bash scripts/fs-programs.sh --setup || say "warning: scripts/fs-programs.sh --setup failed; its rows will be skipped"
fi # programs

if want kernels; then
# Guest kernel: the package linux-image-cloud-amd64 depends on, extracted once.
CACHE="${NUMAIO_LAB_CACHE:-lab/cache}"
meta=linux-image-cloud-amd64
kpkg() { apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}'; }
pkg="$(kpkg)"
if [ -z "$pkg" ] && [ "$apt_updated" -eq 0 ]; then
    $SUDO apt-get update -qq
    pkg="$(kpkg)"
fi
[ -n "$pkg" ] || die "apt-cache cannot resolve $meta (is this Debian amd64 with main enabled?)"
dest="$CACHE/kernel/$pkg"
if ls "$dest"/boot/vmlinuz-* >/dev/null 2>&1; then
    say "guest kernel present: $(ls "$dest"/boot/vmlinuz-*)"
else
    say "fetching guest kernel $pkg"
    mkdir -p "$CACHE/debs" "$CACHE/kernel"
    chmod 755 "$CACHE" "$CACHE/debs"  # apt's _apt user may write here
    download() { (cd "$CACHE/debs" && apt-get download -q "$pkg" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true); }
    download
    deb="$(ls "$CACHE/debs/${pkg}"_*.deb 2>/dev/null | head -1)"
    if [ -z "$deb" ] && [ "$apt_updated" -eq 0 ]; then
        say "download failed; refreshing apt lists and retrying"
        $SUDO apt-get update -qq
        pkg="$(kpkg)"
        dest="$CACHE/kernel/$pkg"
        download
        deb="$(ls "$CACHE/debs/${pkg}"_*.deb 2>/dev/null | head -1)"
    fi
    [ -n "$deb" ] || die "apt-get download $pkg produced no .deb in $CACHE/debs"
    tmp="$CACHE/kernel/$pkg.$$.tmp"
    rm -rf "$tmp"
    dpkg-deb -x "$deb" "$tmp"
    mv "$tmp" "$dest"
    rm -f "$deb"
    say "guest kernel: $(ls "$dest"/boot/vmlinuz-*)"
fi

# The second guest kernel: Debian's 7.3 cloud kernel from trixie-backports, fetched through a
# private apt state in the lab cache (own sources list, package lists and apt cache), so the
# host's apt configuration is never touched. Its files are split over three packages:
# linux-binary-V (usr/lib/modules/V/vmlinuz), linux-modules-V, linux-base-V (config); all
# three are extracted into one tree, $CACHE/kernel/linux-image-V/. Skip with NUMAIO_LAB_KERNEL73=0.
if [ "${NUMAIO_LAB_KERNEL73:-1}" != 0 ]; then
    if ls "$CACHE"/kernel/linux-image-7.3.*/usr/lib/modules/7.3.*/vmlinuz >/dev/null 2>&1; then
        say "guest kernel 7.3 present: $(ls "$CACHE"/kernel/linux-image-7.3.*/usr/lib/modules/7.3.*/vmlinuz)"
    else
        mkdir -p "$CACHE/apt-trixie-backports"
        # apt takes relative Dir:: paths as relative to /etc/apt
        apt73="$(cd "$CACHE/apt-trixie-backports" && pwd)"
        mkdir -p "$apt73/lists/partial" "$apt73/cache/archives/partial" "$apt73/sources.list.d" "$CACHE/debs" "$CACHE/kernel"
        chmod 755 "$CACHE" "$CACHE/debs"
        echo "deb http://deb.debian.org/debian trixie-backports main" > "$apt73/sources.list"
        aptopts=(-o "Dir::Etc::sourcelist=$apt73/sources.list" -o "Dir::Etc::sourceparts=$apt73/sources.list.d" \
                 -o "Dir::State::Lists=$apt73/lists" -o "Dir::Cache=$apt73/cache" -q)
        say "fetching guest kernel 7.3 (trixie-backports)"
        apt-get "${aptopts[@]}" update >/dev/null || die "apt-get update of trixie-backports (private lists in $apt73) failed"
        ver="$(apt-cache "${aptopts[@]}" depends "$meta" | awk '/Depends: linux-image-[0-9]/ {sub("linux-image-", "", $2); print $2; exit}')"
        case "$ver" in
            7.3.*) ;;
            "") die "trixie-backports' $meta names no linux-image-<version>" ;;
            *) die "trixie-backports now carries kernel $ver, not 7.3: update the lab (GuestKernel::Debian73)" ;;
        esac
        pkgs=("linux-binary-$ver" "linux-modules-$ver" "linux-base-$ver")
        (cd "$CACHE/debs" && apt-get "${aptopts[@]}" download "${pkgs[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
        tmp="$CACHE/kernel/linux-image-$ver.$$.tmp"
        rm -rf "$tmp"
        mkdir -p "$tmp"
        for p in "${pkgs[@]}"; do
            deb="$(ls "$CACHE/debs/${p}"_*.deb 2>/dev/null | head -1)"
            [ -n "$deb" ] || die "apt-get download $p produced no .deb in $CACHE/debs"
            dpkg-deb -x "$deb" "$tmp"
            rm -f "$deb"
        done
        mv "$tmp" "$CACHE/kernel/linux-image-$ver"
        say "guest kernel 7.3: $CACHE/kernel/linux-image-$ver/usr/lib/modules/$ver/vmlinuz"
    fi
fi
fi # kernels
if [ -e /dev/kvm ]; then
    say "note: the lab uses TCG by default (NUMAIO_LAB_ACCEL=kvm tries KVM first)"
fi
say "done"
