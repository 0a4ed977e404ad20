#!/usr/bin/env bash
# Same-run comparison of three file systems on the same disk: ext4 (a loop-mounted image
# file), bindfs over that ext4 (the pass-through FUSE peer), and `numaio mount` over volume
# files. Measures, with fio, each for --runtime seconds: sequential 1 MiB write and read,
# 4 KiB random read of cached data, 4 KiB random write with fsync every 64 writes, file
# create/stat/unlink rates, and the three Filebench-like personalities (bench/fio/).
# Prints a table with ratios against bindfs and writes JSON. A benchmark, not a test: it
# exits non-zero only when a run could not be made. Results: docs/fs-conformance.md.
#
# usage: scripts/fs-bench.sh [options]
#   --targets LIST      comma list of ext4,bindfs,numaio,numaio-classic,numaio-uring,base,
#                       base-classic,base-uring (default: ext4,bindfs,numaio; numaio mounts
#                       with --fuse-mode auto, numaio-classic and numaio-uring force a FUSE
#                       transport, so both run against bindfs in one run; base*: the same
#                       with a second numaio binary, --numaio-base, e.g. a build of main; with
#                       both, a second table shows each numaio* target against its base*)
#   --numaio-base PATH  the numaio binary of the base targets
#   --measures LIST     comma list of seq,rand-read,rand-write,meta,personalities (default: all)
#   --rounds N          run every target N times, alternating, every other round in reverse
#                       order (default 1); the table shows each measure's median and
#                       min-max over the rounds
#   --scratch DIR       work directory (created; default: a new one under /var/tmp)
#   --runtime SECS      seconds per timed measurement (default 5)
#   --size SIZE         data file size (default 256m)
#   --meta-files N      files for the create/stat/unlink rates (default 5000)
#   --numaio PATH       the numaio binary (default target/release/numaio)
#   --fuse-uring        set /sys/module/fuse/parameters/enable_uring to Y for the run
#                       (restored after), so FUSE mounts that ask for it use io_uring
#   --json FILE         where to write the results (default SCRATCH/../fs-bench.json)
#   --keep              leave the scratch directory in place
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FIO="$ROOT/bench/fio"

say() { printf '[fs-bench] %s\n' "$*" >&2; }
die() { printf '[fs-bench] ERROR: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '10,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

TARGETS="ext4,bindfs,numaio" SCRATCH="" RUNTIME=5 SIZE=256m META_FILES=5000
NUMAIO="$ROOT/target/release/numaio" URING=0 JSON="" KEEP=0 NUMAIO_BASE="" ROUNDS=1
GROUPS_RUN="seq,rand-read,rand-write,meta,personalities"
while [ $# -gt 0 ]; do
    case "$1" in
        --targets) TARGETS="${2:-}"; shift 2 ;;
        --scratch) SCRATCH="${2:-}"; shift 2 ;;
        --runtime) RUNTIME="${2:-}"; shift 2 ;;
        --size) SIZE="${2:-}"; shift 2 ;;
        --meta-files) META_FILES="${2:-}"; shift 2 ;;
        --numaio) NUMAIO="${2:-}"; shift 2 ;;
        --numaio-base) NUMAIO_BASE="${2:-}"; shift 2 ;;
        --measures) GROUPS_RUN="${2:-}"; shift 2 ;;
        --rounds) ROUNDS="${2:-}"; shift 2 ;;
        --fuse-uring) URING=1; shift ;;
        --json) JSON="${2:-}"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage ;;
        *) printf '[fs-bench] ERROR: unknown argument %q\n' "$1" >&2; usage ;;
    esac
done
IFS=, read -r -a target_list <<< "$TARGETS"
for t in "${target_list[@]}"; do
    case "$t" in ext4|bindfs|numaio|numaio-classic|numaio-uring|base|base-classic|base-uring) ;;
        *) die "unknown target '$t' in --targets (ext4,bindfs,numaio,numaio-classic,numaio-uring,base,base-classic,base-uring)" ;; esac
done
IFS=, read -r -a group_list <<< "$GROUPS_RUN"
for g in "${group_list[@]}"; do
    case "$g" in seq|rand-read|rand-write|meta|personalities) ;;
        *) die "unknown measure group '$g' in --measures (seq,rand-read,rand-write,meta,personalities)" ;; esac
done
runs() { [[ ",$GROUPS_RUN," == *",$1,"* ]]; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer (got '$ROUNDS')"
[[ "$RUNTIME" =~ ^[1-9][0-9]*$ ]] || die "--runtime must be a positive number of seconds (got '$RUNTIME')"
[[ "$META_FILES" =~ ^[1-9][0-9]*$ ]] || die "--meta-files must be a positive integer (got '$META_FILES')"
[[ "$SIZE" =~ ^[1-9][0-9]*[kmgKMG]$ ]] || die "--size must be a size like 256m (got '$SIZE')"
[ "$(id -u)" -eq 0 ] || die "run as root: the peers are mounted"
command -v fio >/dev/null || die "fio not found (scripts/setup.sh installs it)"
for t in "${target_list[@]}"; do
    case "$t" in
        bindfs) command -v bindfs >/dev/null || die "bindfs not found (scripts/setup.sh installs it)" ;;
        numaio|numaio-classic|numaio-uring) [ -x "$NUMAIO" ] || die "$NUMAIO is not an executable: cargo build --release -p numaio, or pass --numaio PATH" ;;
        base|base-classic|base-uring) [ -n "$NUMAIO_BASE" ] && [ -x "$NUMAIO_BASE" ] || die "target $t needs --numaio-base PATH, an executable numaio (got '$NUMAIO_BASE')" ;;
    esac
done

if [ -z "$SCRATCH" ]; then
    SCRATCH="$(mktemp -d /var/tmp/numaio-fs-bench.XXXXXX)" || die "cannot create a scratch directory under /var/tmp"
else
    mkdir -p "$SCRATCH" || die "cannot create scratch directory $SCRATCH"
    [ -z "$(ls -A "$SCRATCH")" ] || die "scratch directory $SCRATCH is not empty: give an empty or new one"
fi
SCRATCH="$(cd "$SCRATCH" && pwd)"
[ -n "$JSON" ] || JSON="$(dirname "$SCRATCH")/fs-bench-$(date +%Y%m%dT%H%M%S).json"
LOGS="$SCRATCH/logs"
export META_FILES
mkdir -p "$LOGS"

URING_PARAM=/sys/module/fuse/parameters/enable_uring
uring_before=""
mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        local m="${mounted[$i]}"
        mountpoint -q "$m" || continue
        case "$m" in
            */bindfs) fusermount -u "$m" 2>/dev/null || umount -l "$m" ;;
            */numaio|*/numaio-classic|*/numaio-uring) "$NUMAIO" umount "$m" 2>/dev/null || umount -l "$m" ;;
            */base|*/base-classic|*/base-uring) "$NUMAIO_BASE" umount "$m" 2>/dev/null || umount -l "$m" ;;
            *) umount "$m" 2>/dev/null || umount -l "$m" ;;
        esac
    done
    [ -n "$uring_before" ] && echo "$uring_before" > "$URING_PARAM"
    if [ "$KEEP" -eq 0 ]; then rm -rf "$SCRATCH"; else say "kept $SCRATCH"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ $URING -eq 1 ]; then
    [ -w "$URING_PARAM" ] || die "$URING_PARAM is missing or not writable: this kernel has no FUSE over io_uring"
    uring_before="$(cat "$URING_PARAM")"
    echo Y > "$URING_PARAM" || die "cannot write Y to $URING_PARAM"
fi
fuse_mode="classic"
[ -r "$URING_PARAM" ] && [ "$(cat "$URING_PARAM")" = Y ] && fuse_mode="io_uring enabled in the kernel"

# ext4 on a loop-mounted image: the disk every peer sits on.
EXT4="$SCRATCH/ext4"
mkdir -p "$EXT4"
# Sparse; room for the peers' files plus each numaio target's 2 GiB volume image, which its
# runs fill (four such targets on a 4 GiB image ran out of space).
vols=0
for t in ${TARGETS//,/ }; do case "$t" in numaio*|base*) vols=$((vols + 1)) ;; esac; done
truncate -s $((4 + 2 * vols))G "$SCRATCH/ext4.img" && mkfs.ext4 -q -F "$SCRATCH/ext4.img" || die "cannot make $SCRATCH/ext4.img"
mount -o loop "$SCRATCH/ext4.img" "$EXT4" || die "cannot loop-mount $SCRATCH/ext4.img on $EXT4"
mounted+=("$EXT4")

# The directory each target's runs use.
dir_of() {
    case "$1" in
        ext4) echo "$EXT4/direct" ;;
        bindfs) echo "$SCRATCH/bindfs" ;;
        numaio|numaio-classic|numaio-uring) echo "$SCRATCH/$1" ;;
        base|base-classic|base-uring) echo "$SCRATCH/$1" ;;
    esac
}
setup_target() {
    local d
    d="$(dir_of "$1")"
    mkdir -p "$d"
    case "$1" in
        bindfs)
            mkdir -p "$EXT4/under-bindfs"
            bindfs "$EXT4/under-bindfs" "$d" || die "bindfs $EXT4/under-bindfs $d failed"
            mounted+=("$d") ;;
        numaio|numaio-classic|numaio-uring|base|base-classic|base-uring)
            # The volume is a file on the same ext4, so the disk under all three is the same.
            local bin="$NUMAIO" img="$EXT4/$1-vol0.img" mode=()
            [[ "$1" == base* ]] && bin="$NUMAIO_BASE"
            [[ "$1" == *-classic ]] && mode=(--fuse-mode classic)
            [[ "$1" == *-uring ]] && mode=(--fuse-mode io-uring)
            "$bin" mkfs --size 2G --node-of "$img=0" "$img" > "$LOGS/$1-mkfs.log" 2>&1 \
                || die "$bin mkfs --size 2G --node-of $img=0 $img failed: $(tail -3 "$LOGS/$1-mkfs.log")"
            "$bin" mount "${mode[@]}" "$img" "$d" > "$LOGS/$1-mount.log" 2>&1 \
                || die "$bin mount ${mode[*]} $img $d failed: $(tail -3 "$LOGS/$1-mount.log")"
            mountpoint -q "$d" || die "$bin mount returned but $d is not a mount point"
            mounted+=("$d") ;;
    esac
}

# fio JSON -> one number. KIND: bw (MiB/s, read+write), iops (read+write), ops (total ios /
# longest job runtime, for the personalities), lat (mean completion latency in µs).
fio_metric() { # JSON KIND
    python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
jobs, kind = d["jobs"], sys.argv[2]
if any(j.get("error", 0) for j in jobs):
    print("error"); sys.exit(0)
if kind == "bw":
    print("%.1f" % (sum(j["read"]["bw_bytes"] + j["write"]["bw_bytes"] for j in jobs) / 2**20))
elif kind == "iops":
    print("%.0f" % sum(j["read"]["iops"] + j["write"]["iops"] for j in jobs))
elif kind == "ops":
    ios = sum(j["read"]["total_ios"] + j["write"]["total_ios"] for j in jobs)
    ms = max(j["job_runtime"] for j in jobs) or 1
    print("%.0f" % (ios * 1000.0 / ms))
elif kind == "lat":
    lats = [j[k]["clat_ns"]["mean"] for j in jobs for k in ("read", "write") if j[k]["total_ios"]]
    print("%.1f" % (sum(lats) / len(lats) / 1000.0) if lats else "error")
EOF
}

declare -A R   # R[target:measure] = value
MEASURES=(seq-write seq-read rand-read-cached rand-read-lat rand-write-fsync64 create stat unlink varmail webserver fileserver)
declare -A UNIT=([seq-write]="MiB/s" [seq-read]="MiB/s" [rand-read-cached]="IOPS" [rand-read-lat]="µs/op"
    [rand-write-fsync64]="IOPS" [create]="files/s" [stat]="files/s" [unlink]="files/s"
    [varmail]="ops/s" [webserver]="ops/s" [fileserver]="ops/s")

runfio() { # TARGET NAME [fio args...]: runs fio, output JSON in LOGS/TARGET-NAME.json
    local t="$1" n="$2"; shift 2
    fio --output-format=json --output="$LOGS/$t-$n.json" "$@" > "$LOGS/$t-$n.log" 2>&1 \
        || say "fio $n on $t exited non-zero (see $LOGS/$t-$n.log)"
}

bench_target() {
    local t="$1" d
    d="$(dir_of "$t")"
    local common=(--directory="$d" --ioengine=psync --size="$SIZE" --filename=data)
    if runs seq || runs rand-read || runs rand-write; then
    say "$t: sequential 1 MiB write (end_fsync)"
    runfio "$t" seq-write "${common[@]}" --name=seq-write --rw=write --bs=1m --end_fsync=1
    runs seq && R[$t:seq-write]="$(fio_metric "$LOGS/$t-seq-write.json" bw)"
    fi
    if runs seq; then
    say "$t: sequential 1 MiB read, cold (every page cache dropped at start)"
    # fio's invalidate drops only the file's own cache; a pass-through FUSE file system
    # (bindfs) keeps a second copy in the lower file system's cache, which invalidate leaves,
    # so the read would measure that copy. Drop every clean page-cache page instead.
    sync
    echo 1 > /proc/sys/vm/drop_caches || say "cannot drop the page cache: seq-read is not cold"
    runfio "$t" seq-read "${common[@]}" --name=seq-read --rw=read --bs=1m --invalidate=1
    R[$t:seq-read]="$(fio_metric "$LOGS/$t-seq-read.json" bw)"
    fi
    if runs rand-read; then
    say "$t: 4 KiB random read of cached data (${RUNTIME}s)"
    runfio "$t" warm "${common[@]}" --name=warm --rw=read --bs=1m --invalidate=0
    runfio "$t" rand-read "${common[@]}" --name=rand-read --rw=randread --bs=4k --invalidate=0 \
        --time_based --runtime="$RUNTIME"
    R[$t:rand-read-cached]="$(fio_metric "$LOGS/$t-rand-read.json" iops)"
    R[$t:rand-read-lat]="$(fio_metric "$LOGS/$t-rand-read.json" lat)"
    fi
    if runs rand-write; then
    say "$t: 4 KiB random write, fsync every 64 (${RUNTIME}s)"
    runfio "$t" rand-write "${common[@]}" --name=rand-write --rw=randwrite --bs=4k --fsync=64 \
        --time_based --runtime="$RUNTIME"
    R[$t:rand-write-fsync64]="$(fio_metric "$LOGS/$t-rand-write.json" iops)"
    fi
    rm -f "$d/data"
    if runs meta; then
    say "$t: create/stat/unlink of $META_FILES files"
    mkdir -p "$d/meta"
    runfio "$t" metadata --directory="$d/meta" "$FIO/metadata.fio"
    local m
    for m in create stat unlink; do
        R[$t:$m]="$(python3 -c 'import json,sys
j=[j for j in json.load(open(sys.argv[1]))["jobs"] if j["jobname"]==sys.argv[2]]
print("error" if not j or j[0]["error"] else "%.0f" % j[0]["read"]["iops"])' "$LOGS/$t-metadata.json" "$m" 2>/dev/null || echo error)"
    done
    rm -rf "$d/meta"
    fi
    runs personalities || return 0
    local p
    for p in varmail webserver fileserver; do
        say "$t: $p personality"
        mkdir -p "$d/$p"
        runfio "$t" "$p" --directory="$d/$p" "$FIO/$p.fio"
        R[$t:$p]="$(fio_metric "$LOGS/$t-$p.json" ops)"
        rm -rf "${d:?}/$p"
    done
}

declare -A RR  # RR[target:measure] = the rounds' values, space-separated
for t in "${target_list[@]}"; do setup_target "$t"; done
for ((round = 1; round <= ROUNDS; round++)); do
    [ "$ROUNDS" -gt 1 ] && say "round $round of $ROUNDS (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    # Every other round in reverse order, so a drift in the host's load (or in the ext4
    # under all targets) does not always favour the targets listed first.
    order=("${target_list[@]}")
    if ((round % 2 == 0)); then
        order=()
        for ((i = ${#target_list[@]} - 1; i >= 0; i--)); do order+=("${target_list[$i]}"); done
    fi
    for t in "${order[@]}"; do
        R=()
        bench_target "$t"
        for m in "${MEASURES[@]}"; do
            [ -n "${R[$t:$m]:-}" ] && RR[$t:$m]="${RR[$t:$m]:-} ${R[$t:$m]}"
        done
    done
done
# R becomes the median over the rounds, RANGE the min-max.
declare -A RANGE
R=()
for key in "${!RR[@]}"; do
    read -r med lo hi < <(python3 -c 'import sys, statistics
v = [float(x) for x in sys.argv[1:] if x != "error"]
print("error - -" if not v else "%s %s %s" % tuple(("%.1f" % x).rstrip("0").rstrip(".") for x in (statistics.median(v), min(v), max(v))))' ${RR[$key]})
    R[$key]="$med"
    RANGE[$key]="$lo-$hi"
done

# The table: each target's value and its ratio to bindfs (higher is better, except latency).
ratio() { # VALUE BASE
    python3 -c 'import sys
try: print("%.2fx" % (float(sys.argv[1]) / float(sys.argv[2])))
except Exception: print("-")' "$1" "$2"
}
has_bindfs=0
for t in "${target_list[@]}"; do [ "$t" = bindfs ] && has_bindfs=1; done
echo
echo "fs-bench: $(nproc) CPUs, kernel $(uname -r), FUSE: $fuse_mode, runtime ${RUNTIME}s, size $SIZE, rounds $ROUNDS (median; min-max below when more than one), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-20s %-8s' measure unit
for t in "${target_list[@]}"; do printf ' %14s' "$t"; [ $has_bindfs -eq 1 ] && [ "$t" != bindfs ] && printf ' %9s' "vs bindfs"; done
echo
for m in "${MEASURES[@]}"; do
    printf '%-20s %-8s' "$m" "${UNIT[$m]}"
    for t in "${target_list[@]}"; do
        if [ -z "${RR[$t:$m]+set}" ]; then printf ' %14s' "-"; else printf ' %14s' "${R[$t:$m]:-error}"; fi
        if [ $has_bindfs -eq 1 ] && [ "$t" != bindfs ]; then printf ' %9s' "$(ratio "${R[$t:$m]:-}" "${R[bindfs:$m]:-}")"; fi
    done
    echo
done
if [ "$ROUNDS" -gt 1 ]; then
    for m in "${MEASURES[@]}"; do
        printf '%-20s %-8s' "$m" "range"
        for t in "${target_list[@]}"; do
            printf ' %14s' "${RANGE[$t:$m]:--}"
            [ $has_bindfs -eq 1 ] && [ "$t" != bindfs ] && printf ' %9s' ""
        done
        echo
    done
fi
echo "(rand-read-lat is fio's mean completion latency per 4 KiB cached read: the round trip per request; lower is better)"

# Before/after: each numaio* target against the base* target of the same transport.
pairs=()
for t in "${target_list[@]}"; do
    case "$t" in numaio|numaio-classic|numaio-uring)
        b="base${t#numaio}"
        for u in "${target_list[@]}"; do [ "$u" = "$b" ] && pairs+=("$t:$b"); done ;;
    esac
done
if [ ${#pairs[@]} -gt 0 ]; then
    echo
    echo "numaio against base ($NUMAIO vs $NUMAIO_BASE), same run; ratio > 1: faster than base (for rand-read-lat: slower)"
    printf '%-20s %-8s' measure unit
    for p in "${pairs[@]}"; do printf ' %14s %14s %9s' "${p#*:}" "${p%%:*}" "vs base"; done
    echo
    for m in "${MEASURES[@]}"; do
        printf '%-20s %-8s' "$m" "${UNIT[$m]}"
        for p in "${pairs[@]}"; do
            t="${p%%:*}" b="${p#*:}"
            if [ -z "${RR[$t:$m]+set}" ]; then printf ' %14s %14s %9s' - - -; continue; fi
            printf ' %14s %14s %9s' "${R[$b:$m]:-error}" "${R[$t:$m]:-error}" "$(ratio "${R[$t:$m]:-}" "${R[$b:$m]:-}")"
        done
        echo
    done
fi

{
    printf '{"host":{"cpus":%s,"kernel":"%s","fuse":"%s"},"runtime_s":%s,"size":"%s","meta_files":%s,"units":{' \
        "$(nproc)" "$(uname -r)" "$fuse_mode" "$RUNTIME" "$SIZE" "$META_FILES"
    sep=""
    for m in "${MEASURES[@]}"; do printf '%s"%s":"%s"' "$sep" "$m" "${UNIT[$m]}"; sep=","; done
    printf '},"results":{'
    sep=""
    for t in "${target_list[@]}"; do
        printf '%s"%s":{' "$sep" "$t"; sep=","
        s2=""
        for m in "${MEASURES[@]}"; do
            v="${R[$t:$m]:-error}"
            [[ "$v" =~ ^[0-9.]+$ ]] || v=null
            printf '%s"%s":%s' "$s2" "$m" "$v"; s2=","
        done
        printf '}'
    done
    printf '},"rounds":{'
    sep=""
    for t in "${target_list[@]}"; do
        printf '%s"%s":{' "$sep" "$t"; sep=","
        s2=""
        for m in "${MEASURES[@]}"; do
            printf '%s"%s":[%s]' "$s2" "$m" "$(echo ${RR[$t:$m]:-} | sed 's/error/null/g; s/ /,/g')"; s2=","
        done
        printf '}'
    done
    printf '}}\n'
} > "$JSON" || die "cannot write $JSON"
say "JSON: $JSON"
