#!/usr/bin/env bash
# FUSE transport cost, classic /dev/fuse against FUSE over io_uring, in the same run on the
# same volume: per mode, `numaio mount --fuse-mode MODE` over two volume files, then with fio
# (psync, O_DIRECT so every 4 KiB request is one FUSE round trip, never the page cache):
#   rtt     4 KiB random reads, one job: mean latency = round-trip cost per request
#   read    4 KiB random reads, --jobs jobs: request rate
#   write   4 KiB random writes, --jobs jobs: request rate
# The modes alternate for --rounds rounds (load from other work hits both alike); each
# measure reports the median of the rounds and their range (min-max). Prints a table with io_uring/classic ratios and writes JSON. A benchmark, not a test: it
# exits non-zero only when a run could not be made. Results and method: docs/fs.md
# ("FUSE transport").
#
# usage: scripts/fuse-rtt.sh [options]
#   --numaio PATH    the numaio binary (default target/release/numaio)
#   --runtime SECS   seconds per measurement (default 5)
#   --jobs N         parallel jobs for the rates (default: the number of CPUs)
#   --rounds N       rounds of both modes (default 3)
#   --depths LIST    io_uring ring entries per queue to compare, e.g. 1,2,4,8 (each depth
#                    is one more io_uring mount per round, through -o uring_depth=N;
#                    default: the server's default depth only)
#   --json FILE      where to write the results (default: SCRATCH/fuse-rtt.json)
#   --keep           leave the scratch directory in place
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

say() { printf '[fuse-rtt] %s\n' "$*" >&2; }
die() { printf '[fuse-rtt] ERROR: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '13,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

NUMAIO="$ROOT/target/release/numaio" RUNTIME=5 JOBS="$(nproc)" ROUNDS=3 JSON="" KEEP=0 DEPTHS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --numaio) NUMAIO="${2:-}"; shift 2 ;;
        --runtime) RUNTIME="${2:-}"; shift 2 ;;
        --jobs) JOBS="${2:-}"; shift 2 ;;
        --rounds) ROUNDS="${2:-}"; shift 2 ;;
        --depths) DEPTHS="${2:-}"; shift 2 ;;
        --json) JSON="${2:-}"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage ;;
        *) printf '[fuse-rtt] ERROR: unknown argument %q\n' "$1" >&2; usage ;;
    esac
done
[[ "$RUNTIME" =~ ^[1-9][0-9]*$ ]] || die "--runtime must be a positive number of seconds (got '$RUNTIME')"
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer (got '$JOBS')"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer (got '$ROUNDS')"
[ -z "$DEPTHS" ] || [[ "$DEPTHS" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] \
    || die "--depths must be a comma list of ring depths 1-64 like 1,2,4,8 (got '$DEPTHS')"
# Mount variants: classic, then io_uring at each depth ("io-uring" alone: the default depth).
VARIANTS=(classic)
if [ -z "$DEPTHS" ]; then VARIANTS+=(io-uring); else
    IFS=, read -r -a dl <<< "$DEPTHS"
    for d in "${dl[@]}"; do
        [ "$d" -le 64 ] || die "--depths: $d is more than 64 ring entries"
        VARIANTS+=("io-uring@$d")
    done
fi
[ "$(id -u)" -eq 0 ] || die "run as root: it mounts, and turns on FUSE over io_uring"
command -v fio >/dev/null || die "fio not found (scripts/setup.sh installs it)"
command -v python3 >/dev/null || die "python3 not found (reads fio's JSON)"
[ -x "$NUMAIO" ] || die "$NUMAIO is not an executable: cargo build --release -p numaio, or pass --numaio PATH"
SWITCH=/sys/module/fuse/parameters/enable_uring
[ -e "$SWITCH" ] || die "this kernel has no FUSE over io_uring ($SWITCH missing; Linux 6.14+ with CONFIG_FUSE_IO_URING)"

SCRATCH="$(mktemp -d /var/tmp/fuse-rtt.XXXXXX)" || die "cannot create a scratch directory"
JSON="${JSON:-$SCRATCH/fuse-rtt.json}"
MNT="$SCRATCH/mnt"
SAVED="$(cat "$SWITCH")"
cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && "$NUMAIO" umount "$MNT" >/dev/null 2>&1
    echo "$SAVED" > "$SWITCH" 2>/dev/null
    [ "$KEEP" = 1 ] || rm -rf "$SCRATCH"
}
trap cleanup EXIT
mkdir -p "$MNT"
"$NUMAIO" mkfs --size 1G --node-of "$SCRATCH/d0=0" --node-of "$SCRATCH/d1=0" \
    "$SCRATCH/d0" "$SCRATCH/d1" >/dev/null || die "mkfs of the volume in $SCRATCH failed"

# fio JSON -> "iops mean_latency_us" of the given direction.
fio_num() {
    python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"][0][sys.argv[2]]
print("%.0f %.2f" % (j["iops"], j["clat_ns"]["mean"]/1000.0))' "$1" "$2"
}

run_fio() { # name rw jobs -> prints "iops lat_us"
    local out="$SCRATCH/$1.json"
    fio --name="$1" --filename="$MNT/data" --size=64m --rw="$2" --bs=4k --direct=1 \
        --ioengine=psync --numjobs="$3" --group_reporting --time_based --runtime="$RUNTIME" \
        --output-format=json --output="$out" >/dev/null 2>"$SCRATCH/$1.err" \
        || die "fio $1 failed: $(tail -3 "$SCRATCH/$1.err")"
    case "$2" in *read*) fio_num "$out" read ;; *) fio_num "$out" write ;; esac
}

declare -A R
for round in $(seq "$ROUNDS"); do
for mode in "${VARIANTS[@]}"; do
    fm="${mode%@*}" depth=""
    [ "$fm" != "$mode" ] && depth="${mode#*@}"
    [ "$fm" = io-uring ] && echo Y > "$SWITCH"
    opts=()
    [ -n "$depth" ] && opts=(-o "uring_depth=$depth")
    out="$("$NUMAIO" mount --json --fuse-mode "$fm" "${opts[@]}" "$SCRATCH/d0" "$SCRATCH/d1" "$MNT")" \
        || die "numaio mount --fuse-mode $fm failed (ring depth '${depth:-default}')"
    got="$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["fuse_mode"])')"
    say "round $round, $mode: mounted, fuse_mode=$got"
    dd if=/dev/zero of="$MNT/data" bs=1M count=64 conv=fsync status=none || die "writing the data file failed"
    read -r _ lat <<< "$(run_fio "rtt-$mode" randread 1)"
    read -r rd _ <<< "$(run_fio "read-$mode" randread "$JOBS")"
    read -r wr _ <<< "$(run_fio "write-$mode" randwrite "$JOBS")"
    say "round $round, $mode: rtt ${lat} us, read ${rd}/s, write ${wr}/s"
    R[$mode.rtt]="${R[$mode.rtt]:-} $lat"
    R[$mode.read]="${R[$mode.read]:-} $rd"
    R[$mode.write]="${R[$mode.write]:-} $wr"
    R[$mode.got]=$got
    "$NUMAIO" umount "$MNT" >/dev/null || die "numaio umount $MNT failed"
done
done

# Per measure and mode: the median of the rounds and their range; ratios of the medians.
# Each variant is passed as "NAME|GOT|RTTS|READS|WRITES".
args=()
for v in "${VARIANTS[@]}"; do
    args+=("$v|${R[$v.got]}|${R[$v.rtt]}|${R[$v.read]}|${R[$v.write]}")
done
python3 - "$JSON" "$JOBS" "$RUNTIME" "$ROUNDS" "${args[@]}" <<'PYEOF'
import json, statistics, sys
out, jobs, runtime, rounds = sys.argv[1:5]
variants = []
for a in sys.argv[5:]:
    name, got, *cols = a.split("|")
    variants.append((name, got, [[float(x) for x in c.split()] for c in cols]))
names = [("rtt_us", "round trip, 1 job (us/request)", True),
         ("read_iops", "random read, %s jobs (req/s)" % jobs, False),
         ("write_iops", "random write, %s jobs (req/s)" % jobs, False)]
res = {"schema_version": 3, "runtime_s": int(runtime), "jobs": int(jobs), "rounds": int(rounds)}
cname, cgot, cvals = variants[0]
res["classic"] = {"fuse_mode": cgot}
for name, got, uvals in variants[1:]:
    key_u = "io_uring" if name == "io-uring" else "io_uring_depth_" + name.split("@")[1]
    label_u = "io_uring" if name == "io-uring" else "io_uring, depth " + name.split("@")[1]
    print("%-34s %24s %24s %8s" % ("measure (4 KiB, O_DIRECT, psync)", "classic median (min-max)",
                                   label_u + " median (min-max)", "ratio"))
    res[key_u] = {"fuse_mode": got}
    for i, (key, label, lower_better) in enumerate(names):
        c, u = cvals[i], uvals[i]
        mc, mu = statistics.median(c), statistics.median(u)
        ratio = mc / mu if lower_better else mu / mc
        cell = lambda m, v: "%.1f (%.1f-%.1f)" % (m, min(v), max(v))
        print("%-34s %24s %24s %7.2fx" % (label, cell(mc, c), cell(mu, u), ratio))
        res["classic"][key] = {"median": mc, "min": min(c), "max": max(c), "rounds": c}
        res[key_u][key] = {"median": mu, "min": min(u), "max": max(u), "rounds": u}
        res[key_u][key + "_ratio"] = ratio
json.dump(res, open(out, "w"), indent=1)
PYEOF
say "results: $JSON"
