#!/bin/sh
# What the eBPF collector costs a program that reads cached data: fio, psync 4 KiB random
# reads of a file held in the page cache, 1 and 2 threads, without and with the collector
# attached (a `numaio ps --source ebpf` that keeps it attached for the run), each pair in
# alternating order, N rounds. Prints every pair's IOPS and ratio and, per thread count, the
# median ratio. The goal: with the collector ≥ 0.95× without. fio's jobs are threads (`--thread`).
#
#   scripts/bpf-overhead.sh [--secs S] [--rounds N] [--threads LIST] [--size MIB]
#                           [--dir DIR | --file PATH] [--numaio PATH] [--attach-timeout S]
#
#   --secs S            seconds per fio run (default 10)
#   --rounds N          pairs per thread count (default 3)
#   --threads LIST      comma list of fio job counts (default 1,2)
#   --size MIB          the file's size (default 256)
#   --dir DIR           where the file is made (default /var/tmp); removed afterwards
#   --file PATH         read this existing file instead (read only, never written)
#   --numaio PATH       the numaio binary (default target/release/numaio, else numaio)
#   --attach-timeout S  how long the collector may take to attach (default 60)
#
# Needs root, fio, and a kernel that lets root load BPF tracing programs. Where the collector
# cannot attach it prints `SKIPPED: bpf-overhead: <why>` and exits 3; bad arguments exit 2.
# POSIX sh, awk and fio only, so the same script runs in a lab guest (busybox).
set -eu
secs=10 rounds=3 threads=1,2 size=256 dir=/var/tmp file="" numaio="" attach_timeout=60
die() { echo "bpf-overhead: $*" >&2; exit 2; }
num() {
    case "$2" in '' | *[!0-9]* | ??????????*) die "$1 wants a positive whole number below 10^9, not '$2'" ;; esac
    [ "$2" -gt 0 ] || die "$1 wants a positive number"
}
while [ $# -gt 0 ]; do
    case "$1" in
        --secs) num "$1" "${2:-}"; secs="$2"; shift 2 ;;
        --rounds) num "$1" "${2:-}"; rounds="$2"; shift 2 ;;
        --threads) threads="${2:-}"; shift 2 ;;
        --size) num "$1" "${2:-}"; size="$2"; shift 2 ;;
        --dir) dir="${2:-}"; shift 2 ;;
        --file) file="${2:-}"; shift 2 ;;
        --numaio) numaio="${2:-}"; shift 2 ;;
        --attach-timeout) num "$1" "${2:-}"; attach_timeout="$2"; shift 2 ;;
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
for t in $(echo "$threads" | tr ',' ' '); do num --threads "$t"; done
[ -n "$file" ] || [ -d "$dir" ] || die "--dir $dir: not a directory"
if [ -z "$numaio" ]; then
    here="$(dirname "$0")/.."
    if [ -x "$here/target/release/numaio" ]; then numaio="$here/target/release/numaio"; else numaio=numaio; fi
fi
command -v fio > /dev/null || { echo "SKIPPED: bpf-overhead: fio is not installed (apt-get install fio)" >&2; exit 3; }
command -v "$numaio" > /dev/null || die "--numaio $numaio: not found (cargo build --release)"

work="$(mktemp -d "${TMPDIR:-/tmp}/bpf-overhead.XXXXXX")"
ps_pid="" made=""
cleanup() {
    [ -z "$ps_pid" ] || kill "$ps_pid" 2> /dev/null || true
    [ -z "$made" ] || rm -f "$made"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "$file" ]; then
    file="$dir/bpf-overhead.$$.data"
    [ ! -e "$file" ] || die "$file exists already (not ours: left alone)"
    made="$file"
    dd if=/dev/urandom of="$file" bs=1M count="$size" 2> /dev/null
else
    [ -f "$file" ] && [ -r "$file" ] || die "--file $file: not a readable regular file"
    size=$(($(wc -c < "$file") >> 20))
fi
# read twice: the second pass finds every page cached
cat "$file" > /dev/null
cat "$file" > /dev/null

# Starts `numaio ps --source ebpf` and waits for its first line: it prints only after the
# collector attached and took its first sample, and exits with the reason when it cannot.
attach() {
    : > "$work/ps.out"
    "$numaio" ps --source ebpf --watch 5 --json $$ > "$work/ps.out" 2> "$work/ps.err" &
    ps_pid=$!
    waited=0
    while [ ! -s "$work/ps.out" ]; do
        if ! kill -0 "$ps_pid" 2> /dev/null; then
            ps_pid=""
            echo "SKIPPED: bpf-overhead: the collector did not attach: $(head -c 400 "$work/ps.err" | tr '\n' ' ')" >&2
            exit 3
        fi
        [ "$waited" -lt $((attach_timeout * 10)) ] || { echo "bpf-overhead: the collector took over ${attach_timeout} s to attach (--attach-timeout)" >&2; exit 1; }
        sleep 0.1
        waited=$((waited + 1))
    done
}
detach() {
    kill "$ps_pid"
    wait "$ps_pid" 2> /dev/null || true
    ps_pid=""
}

# read IOPS of one fio run (terse v3: field 8)
iops() {
    fio --name=cached --filename="$file" --readonly --rw=randread --bs=4k --ioengine=psync \
        --thread --numjobs="$1" --time_based --runtime="$secs" --group_reporting --invalidate=0 \
        --output-format=terse --terse-version=3 | awk -F';' 'NF > 8 { print $8; exit }'
}

# once before the table: a collector that cannot attach skips here, and its first load is
# not timed
attach
detach
printf '%-8s %-6s %14s %14s %8s\n' threads round without_iops with_iops ratio
: > "$work/pairs"
for t in $(echo "$threads" | tr ',' ' '); do
    r=1
    while [ "$r" -le "$rounds" ]; do
        # alternate which runs first, so a drift over time does not favour one side
        if [ $((r % 2)) -eq 1 ]; then
            without="$(iops "$t")"; attach; with="$(iops "$t")"; detach
        else
            attach; with="$(iops "$t")"; detach; without="$(iops "$t")"
        fi
        [ -n "$without" ] && [ -n "$with" ] || {
            echo "bpf-overhead: fio printed no IOPS (threads $t, round $r)" >&2
            exit 1
        }
        ratio="$(awk -v a="$with" -v b="$without" 'BEGIN { printf "%.3f", (b > 0) ? a / b : 0 }')"
        printf '%-8s %-6s %14s %14s %8s\n' "$t" "$r" "$without" "$with" "$ratio"
        echo "$t $ratio" >> "$work/pairs"
        r=$((r + 1))
    done
done
echo
for t in $(echo "$threads" | tr ',' ' '); do
    awk -v t="$t" '$1 == t { print $2 }' "$work/pairs" | sort -n | awk -v t="$t" '
        { v[NR] = $1 }
        END {
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "threads %s: median ratio with/without %.3f over %d rounds (goal >= 0.95): %s\n", t, m, NR, (m >= 0.95) ? "met" : "NOT met"
        }'
done
echo "(fio psync 4 KiB random reads of a ${size} MiB cached file, $file, ${secs} s per run; kernel $(uname -r))"
