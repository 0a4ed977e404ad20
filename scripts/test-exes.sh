#!/usr/bin/env bash
# Runs the test executables that `cargo test --workspace` builds, several at once, each as
# cargo would run it (in its package's directory, with CARGO_MANIFEST_DIR and CARGO_PKG_NAME
# set), every one even after a failure. Cargo runs test executables one after another; most of
# ours wait on FUSE round trips, fsync, child processes or QEMU guests, so one at a time leaves
# cores idle. Each executable's output is printed whole when it ends (never interleaved), with
# its time.
#
#   scripts/test-exes.sh [--jobs N] [--package DIR] [--first NAMES] [-- ARGS...]
#
#   --jobs N       executables running at once (default 2)
#   --package DIR  only the executables of the package in DIR (e.g. lab)
#   --first NAMES  start these targets first, in this order (comma-separated target names,
#                  e.g. fs_crash,bpf): the longest first, so that none starts last alone
#   ARGS           passed to every executable (e.g. --ignored --test-threads=1)
#
# Exits 0 when every executable passed. Doc tests are not executables: run
# `cargo test --workspace --doc` for them.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
jobs=2
only=""
first=""
while [ $# -gt 0 ]; do
    case "$1" in
        --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
        --package)
            [ -f "${2:?--package needs a directory}/Cargo.toml" ] || { echo "test-exes: --package $2: no Cargo.toml there" >&2; exit 2; }
            only="$(realpath "$2")"; shift 2 ;;
        --first)
            [ -n "${2:-}" ] || { echo "test-exes: --first needs target names (e.g. fs_crash,bpf)" >&2; exit 2; }
            first="$2"; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "test-exes: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$jobs" in ''|*[!0-9]*|0) echo "test-exes: --jobs wants a positive number, not $jobs" >&2; exit 2 ;; esac

# exe, source (relative to the package), package directory, package name; the --first targets,
# then cargo's order: packages by name, then library, binaries, tests/*.rs by name.
list="$(cargo test --workspace --no-run --message-format=json-render-diagnostics | python3 -c '
import json, os, sys, tomllib
only = sys.argv[1]
first = [n for n in sys.argv[2].split(",") if n]
order = {"lib": 0, "bin": 1, "test": 2}
found = []
names = {}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    pkg = os.path.dirname(m["manifest_path"])
    if only and pkg != only:
        continue
    if pkg not in names:
        with open(m["manifest_path"], "rb") as f:
            names[pkg] = tomllib.load(f)["package"]["name"]
    kind = m["target"]["kind"][0]
    src = os.path.relpath(m["target"]["src_path"], pkg)
    t = m["target"]["name"]
    rank = first.index(t) if t in first else len(first)
    found.append((rank, names[pkg], order.get(kind, 3), t, m["executable"], src, pkg))
for n in first:
    if not any(f[3] == n for f in found):
        print(f"test-exes: --first {n}: no such test executable (ignored)", file=sys.stderr)
for _, name, _, _, exe, src, pkg in sorted(found):
    print(exe, src, pkg, name, sep="\t")
' "$only" "$first")" || { echo "test-exes: cargo test --workspace --no-run failed"; exit 1; }
[ -n "$list" ] || { echo "test-exes: no test executables${only:+ in $only}"; exit 1; }

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# One executable: its output to a file, printed whole under a lock when it ends.
run_one() {
    local i="$1" exe="$2" src="$3" pkg="$4" name="$5" t0=$SECONDS rc=0
    shift 5
    (cd "$pkg" && CARGO_MANIFEST_DIR="$pkg" CARGO_PKG_NAME="$name" "$exe" "$@") > "$out/$i.log" 2>&1 || rc=$?
    echo "$rc" > "$out/$i.rc"
    {
        flock 9
        echo "     Running $src (${exe#"$PWD"/}) [$name]"
        cat "$out/$i.log"
        echo "test-exes: $name $src: $((SECONDS - t0)) s$([ "$rc" -eq 0 ] || echo ", FAILED (exit $rc)")"
    } 9> "$out/lock"
}

pids=()
i=0
while IFS=$'\t' read -r exe src pkg name; do
    # wait for a free slot: a pool of `jobs` children, refilled as each one ends
    while [ "${#pids[@]}" -ge "$jobs" ]; do
        wait -n "${pids[@]}" 2> /dev/null || true
        live=()
        for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && live+=("$p"); done
        pids=("${live[@]}")
    done
    run_one "$i" "$exe" "$src" "$pkg" "$name" "$@" &
    pids+=($!)
    i=$((i + 1))
done <<< "$list"
wait "${pids[@]}" 2> /dev/null

fail=0
failed=()
for ((k = 0; k < i; k++)); do
    rc="$(cat "$out/$k.rc" 2> /dev/null || echo missing)"
    if [ "$rc" != 0 ]; then
        fail=$((fail + 1))
        failed+=("$(sed -n "$((k + 1))p" <<< "$list" | awk -F'\t' '{print $4, $2}')")
    fi
done
echo "test-exes: $i test executables, $fail failed"
for f in "${failed[@]}"; do echo "  FAILED: $f"; done
[ "$fail" -eq 0 ]
