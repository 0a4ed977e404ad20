#!/usr/bin/env bash
# Real programs on numaio-fs against ext4 and bindfs, in one run: tar extract, git clone and
# gc, SQLite (WAL and rollback journal), many files in one directory (create, `ls -f`,
# stat), stress-ng's metadata stressors, and dbench where it is installed. Every program's
# data is checked after it ran (diff -r of the extracted tree, git fsck, PRAGMA
# integrity_check and the row count, the file count); a failed check fails the run, so
# `--quick` is a correctness run of every program. A benchmark, not a test: the table goes
# to stdout, raw logs to the scratch directory; numbers belong in docs/fs.md.
#
# usage: scripts/fs-programs.sh [options]
#   --targets LIST     comma list of ext4, bindfs, numaio-classic, numaio-uring, and
#                      numaio-classic-wb, numaio-uring-wb (mounted -o writeback_cache)
#                      (default: the first four; io_uring needs enable_uring, see --fuse-uring)
#   --rounds N         rounds, targets in alternating order (default 3); median and min-max
#   --quick            small sizes, 1 round, 1 s per stressor: every program runs and is checked
#   --files N          files for the one-directory rows (default 200000)
#   --rows N           SQLite rows, in transactions of 1,000 (default 200000)
#   --stress SECS      seconds per stress-ng stressor and for dbench (default 10)
#   --numaio PATH      the numaio binary (default target/release/numaio)
#   --fuse-uring       set /sys/module/fuse/parameters/enable_uring to Y for the run
#   --json FILE        also write the results as JSON
#   --keep             leave the scratch directory
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
say() { printf '[fs-programs] %s\n' "$*" >&2; }
die() { printf '[fs-programs] ERROR: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '10,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

TARGETS="ext4,bindfs,numaio-classic,numaio-uring" ROUNDS=3 QUICK=0 FILES=200000 ROWS=200000
STRESS=10 NUMAIO="$ROOT/target/release/numaio" URING=0 JSON="" KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --targets) TARGETS="${2:-}"; shift 2 ;;
        --rounds) ROUNDS="${2:-}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --files) FILES="${2:-}"; shift 2 ;;
        --rows) ROWS="${2:-}"; shift 2 ;;
        --stress) STRESS="${2:-}"; shift 2 ;;
        --numaio) NUMAIO="${2:-}"; shift 2 ;;
        --fuse-uring) URING=1; shift ;;
        --json) JSON="${2:-}"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage ;;
        *) say "unknown option $1"; usage ;;
    esac
done
if [ $QUICK -eq 1 ]; then ROUNDS=1 FILES=2000 ROWS=5000 STRESS=1; fi
for n in "$ROUNDS" "$FILES" "$ROWS" "$STRESS"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "--rounds, --files, --rows and --stress take whole numbers > 0 (got '$n')"
done
for t in ${TARGETS//,/ }; do
    case "$t" in ext4|bindfs|numaio-classic|numaio-uring|numaio-classic-wb|numaio-uring-wb) ;; *) die "unknown target '$t'" ;; esac
done
[ "$(id -u)" -eq 0 ] || die "run as root: the targets are mounted"
[ -x "$NUMAIO" ] || die "no numaio binary at $NUMAIO (cargo build --release)"
for tool in tar git sqlite3 stress-ng python3; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install $tool)"
done
[[ ",$TARGETS," == *,bindfs,* ]] && ! command -v bindfs >/dev/null && die "bindfs is missing (apt-get install bindfs)"

SCRATCH="$(mktemp -d /var/tmp/fs-programs.XXXXXX)"
LOGS="$SCRATCH/logs"
mkdir -p "$LOGS"
URING_PARAM=/sys/module/fuse/parameters/enable_uring
uring_before=""
mounted=()
cleanup() {
    local i m
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        m="${mounted[$i]}"
        mountpoint -q "$m" || continue
        case "$m" in
            */bindfs) fusermount -u "$m" 2>/dev/null || umount -l "$m" ;;
            */numaio-*) "$NUMAIO" umount "$m" 2>/dev/null || umount -l "$m" ;;
            *) umount "$m" 2>/dev/null || umount -l "$m" ;;
        esac
    done
    [ -n "$uring_before" ] && echo "$uring_before" > "$URING_PARAM"
    if [ "$KEEP" -eq 0 ]; then rm -rf "$SCRATCH"; else say "kept $SCRATCH"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ $URING -eq 1 ]; then
    [ -w "$URING_PARAM" ] || die "$URING_PARAM is missing: this kernel has no FUSE over io_uring"
    uring_before="$(cat "$URING_PARAM")"
    echo Y > "$URING_PARAM" || die "cannot enable FUSE over io_uring"
fi

# ext4 on a loop image: the disk under every target (numaio's volume is a file on it).
EXT4="$SCRATCH/ext4"
mkdir -p "$EXT4"
truncate -s 16G "$SCRATCH/ext4.img" && mkfs.ext4 -q -F "$SCRATCH/ext4.img" || die "cannot make the ext4 image"
mount -o loop "$SCRATCH/ext4.img" "$EXT4" || die "cannot loop-mount the ext4 image"
mounted+=("$EXT4")

dir_of() { case "$1" in ext4) echo "$EXT4/direct" ;; *) echo "$SCRATCH/$1" ;; esac; }
mount_target() {
    local t="$1" d
    d="$(dir_of "$t")"
    mkdir -p "$d"
    case "$t" in
        ext4) ;;
        bindfs)
            mkdir -p "$EXT4/under-bindfs"
            bindfs "$EXT4/under-bindfs" "$d" || die "bindfs failed"
            mounted+=("$d") ;;
        numaio-*)
            local img="$EXT4/$t-vol0.img" mode=classic opts=rw
            [[ "$t" == numaio-uring* ]] && mode=io-uring
            [[ "$t" == *-wb ]] && opts=writeback_cache
            if [ ! -e "$img" ]; then
                "$NUMAIO" mkfs --size 6G --node-of "$img=0" "$img" > "$LOGS/$t-mkfs.log" 2>&1 \
                    || die "numaio mkfs failed: $(tail -3 "$LOGS/$t-mkfs.log")"
            fi
            "$NUMAIO" mount --fuse-mode "$mode" -o "$opts" "$img" "$d" >> "$LOGS/$t-mount.log" 2>&1 \
                || die "numaio mount --fuse-mode $mode -o $opts failed: $(tail -3 "$LOGS/$t-mount.log")"
            mounted+=("$d") ;;
    esac
}
# A row starts from a fresh mount (nothing cached by the server) and an empty directory.
unmount_target() {
    local d
    d="$(dir_of "$1")"
    case "$1" in
        bindfs) fusermount -u "$d" ;;
        numaio-*) "$NUMAIO" umount "$d" >> "$LOGS/$1-mount.log" 2>&1 ;;
    esac
}

# Inputs, made once outside the targets.
INPUT="$SCRATCH/input"
mkdir -p "$INPUT"
say "preparing inputs"
if [ $QUICK -eq 1 ]; then
    tar -C / -cf "$INPUT/tree.tar" usr/share/doc/bash usr/share/doc/git 2>/dev/null
else
    py="$(python3 -c 'import os, email; print(os.path.dirname(os.path.dirname(email.__file__)))')"
    tar -C / -cf "$INPUT/tree.tar" usr/share/doc "${py#/}" 2>/dev/null
fi
mkdir -p "$INPUT/ref" && tar -C "$INPUT/ref" -xf "$INPUT/tree.tar" || die "cannot extract the reference tree"
ENTRIES="$(tar -tf "$INPUT/tree.tar" | wc -l)"
git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 || die "$ROOT is not a git repository (the clone row clones it)"
python3 - "$ROWS" "$INPUT/rows.sql" <<'EOF'
import sys
rows, out = int(sys.argv[1]), sys.argv[2]
with open(out, "w") as f:
    f.write("CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);\n")
    for b in range(0, rows, 1000):
        f.write("BEGIN;\n")
        for i in range(b, min(b + 1000, rows)):
            f.write("INSERT INTO t(k, v) VALUES (%d, '%s');\n" % (i * 7919 % rows, "x" * (20 + i % 80)))
        f.write("COMMIT;\n")
EOF
STRESSORS=(dir dentry rename seek utime chown fcntl)
ROWS_ALL=(tar git-clone git-gc sqlite-wal sqlite-rollback create ls-f stat)
for s in "${STRESSORS[@]}"; do ROWS_ALL+=("stress-$s"); done
command -v dbench >/dev/null && ROWS_ALL+=(dbench)
declare -A UNIT
for r in tar git-clone git-gc sqlite-wal sqlite-rollback create ls-f stat; do UNIT[$r]=s; done
for s in "${STRESSORS[@]}"; do UNIT[stress-$s]="ops/s"; done
UNIT[dbench]="MB/s"

secs() { python3 -c 'import sys; print("%.3f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }
now() { date +%s.%N; }
# A failed data check fails the run (rows run in a subshell: the list is a file).
check() { # ROW TARGET WHAT
    say "DATA CHECK FAILED: $1 on $2: $3"
    echo "$1 on $2: $3" >> "$SCRATCH/failures"
}

# Runs one row on target T in its directory D; prints the number.
run_row() {
    local row="$1" t="$2" d="$3" t0 t1 out
    case "$row" in
        tar)
            mkdir -p "$d/tar"; t0=$(now)
            tar -C "$d/tar" -xf "$INPUT/tree.tar" || check tar "$t" "tar exited $?"
            sync -f "$d/tar"; t1=$(now)
            diff -r --no-dereference "$INPUT/ref" "$d/tar" > "$LOGS/$t-tar-diff.log" 2>&1 \
                || check tar "$t" "diff -r differs (see $LOGS/$t-tar-diff.log)"
            secs "$t0" "$t1" ;;
        git-clone)
            t0=$(now)
            git clone -q --no-hardlinks "$ROOT" "$d/clone" > "$LOGS/$t-clone.log" 2>&1 || check git-clone "$t" "git clone failed"
            sync -f "$d/clone"; t1=$(now)
            git -C "$d/clone" fsck --full > "$LOGS/$t-fsck.log" 2>&1 || check git-clone "$t" "git fsck failed"
            secs "$t0" "$t1" ;;
        git-gc)
            t0=$(now)
            git -C "$d/clone" gc -q --aggressive > "$LOGS/$t-gc.log" 2>&1 || check git-gc "$t" "git gc failed"
            sync -f "$d/clone"; t1=$(now)
            git -C "$d/clone" fsck --full >> "$LOGS/$t-fsck.log" 2>&1 || check git-gc "$t" "git fsck after gc failed"
            secs "$t0" "$t1" ;;
        sqlite-wal|sqlite-rollback)
            local mode=WAL db="$d/$row.db"
            [ "$row" = sqlite-rollback ] && mode=DELETE
            t0=$(now)
            { echo "PRAGMA journal_mode=$mode;"; cat "$INPUT/rows.sql"; } | sqlite3 "$db" > /dev/null 2>"$LOGS/$t-$row.log" \
                || check "$row" "$t" "sqlite3 failed: $(tail -1 "$LOGS/$t-$row.log")"
            t1=$(now)
            out="$(sqlite3 "$db" 'PRAGMA integrity_check; SELECT count(*) FROM t;' 2>&1 | tr '\n' ' ')"
            [ "$out" = "ok $ROWS " ] || check "$row" "$t" "integrity_check/count: $out"
            secs "$t0" "$t1" ;;
        create)
            mkdir -p "$d/many"; t0=$(now)
            (cd "$d/many" && seq -f 'f%.0f' 1 "$FILES" | xargs touch) || check create "$t" "touch failed"
            sync -f "$d/many"; t1=$(now)
            secs "$t0" "$t1" ;;
        ls-f)
            t0=$(now); out="$(ls -f "$d/many" | wc -l)"; t1=$(now)
            [ "$out" -eq $((FILES + 2)) ] || check ls-f "$t" "ls -f listed $out entries, not $((FILES + 2))"
            secs "$t0" "$t1" ;;
        stat)
            t0=$(now); out="$(cd "$d/many" && find . -type f -print0 | xargs -0 stat -c %s | wc -l)"; t1=$(now)
            [ "$out" -eq "$FILES" ] || check stat "$t" "stat saw $out files, not $FILES"
            secs "$t0" "$t1" ;;
        stress-*)
            local s="${row#stress-}"
            mkdir -p "$d/sng-$s"
            stress-ng --"$s" 1 --temp-path "$d/sng-$s" -t "$STRESS" --metrics-brief > "$LOGS/$t-$row.log" 2>&1 \
                || check "$row" "$t" "stress-ng --$s exited non-zero (see $LOGS/$t-$row.log)"
            # metrics-brief: "stressor bogo-ops real-time usr sys bogo-ops/s(real) ..."
            awk -v s="$s" '$0 ~ ("] +" s " ") { for (i = 1; i <= NF; i++) if ($i == s) { print $(i + 5); exit } }' "$LOGS/$t-$row.log" ;;
        dbench)
            mkdir -p "$d/dbench"
            dbench -D "$d/dbench" -t "$STRESS" 4 > "$LOGS/$t-dbench.log" 2>&1 || check dbench "$t" "dbench failed"
            awk '/Throughput/ { print $2 }' "$LOGS/$t-dbench.log" | tail -1 ;;
    esac
}

declare -A R   # R[target:row] = space-separated values, one per round
ts=(${TARGETS//,/ })
for ((round = 1; round <= ROUNDS; round++)); do
    order=("${ts[@]}")
    if [ $((round % 2)) -eq 0 ]; then
        order=(); for ((i = ${#ts[@]} - 1; i >= 0; i--)); do order+=("${ts[$i]}"); done
    fi
    say "round $round of $ROUNDS: ${order[*]}"
    for t in "${order[@]}"; do
        d="$(dir_of "$t")"
        mount_target "$t"
        rm -rf "${d:?}"/* 2>/dev/null
        for row in "${ROWS_ALL[@]}"; do
            v="$(run_row "$row" "$t" "$d")"
            [ -n "$v" ] || v="error"
            R[$t:$row]="${R[$t:$row]:-} $v"
            say "$t: $row ${v} ${UNIT[$row]}"
        done
        rm -rf "${d:?}"/* 2>/dev/null
        unmount_target "$t"
    done
done

# Median, min-max, and numaio's speed against ext4 and bindfs (> 1: numaio is faster).
python3 - "$JSON" "$TARGETS" "$ENTRIES" "$FILES" "$ROWS" "$STRESS" "$(uname -r)" "$(nproc)" <<EOF
import json, statistics, sys
out, targets = sys.argv[1], sys.argv[2].split(",")
entries, files, rows, stress, kernel, cpus = sys.argv[3:9]
raw = {$(for k in "${!R[@]}"; do printf '"%s": "%s", ' "$k" "${R[$k]}"; done)}
unit = {$(for k in "${!UNIT[@]}"; do printf '"%s": "%s", ' "$k" "${UNIT[$k]}"; done)}
order = [$(for r in "${ROWS_ALL[@]}"; do printf '"%s", ' "$r"; done)]
def vals(t, r):
    v = []
    for x in raw.get(t + ":" + r, "").split():
        try: v.append(float(x))
        except ValueError: pass
    return v
def med(t, r):
    v = vals(t, r)
    return statistics.median(v) if v else None
print(f"fs-programs: {cpus} CPUs, kernel {kernel}; tar of {entries} entries, {files} files in one directory, "
      f"{rows} SQLite rows, {stress} s per stressor; medians (s: lower is better)")
head = f"{'row':18} {'unit':6}" + "".join(f"{t:>16}" for t in targets)
cmp = [(n, p) for n in targets if n.startswith("numaio") for p in ("ext4", "bindfs") if p in targets]
head += "".join(f"{n.replace('numaio-', '') + '/' + p:>16}" for n, p in cmp)
print(head)
doc = {"cpus": int(cpus), "kernel": kernel, "entries": int(entries), "files": int(files), "rows": int(rows), "rows_table": {}}
for r in order:
    line = f"{r:18} {unit[r]:6}"
    for t in targets:
        m = med(t, r)
        line += f"{('%.2f' % m) if m is not None else 'error':>16}"
    for n, p in cmp:
        a, b = med(n, r), med(p, r)
        if a and b:
            x = b / a if unit[r] == "s" else a / b
            line += f"{'%.2fx' % x:>16}"
        else:
            line += f"{'-':>16}"
    print(line)
    doc["rows_table"][r] = {"unit": unit[r], **{t: {"median": med(t, r), "values": vals(t, r)} for t in targets}}
print("ranges (min-max):")
for r in order:
    print(f"{r:18} " + "".join(f"{(('%.2f-%.2f' % (min(vals(t, r)), max(vals(t, r)))) if vals(t, r) else '-'):>16}" for t in targets))
if out:
    json.dump(doc, open(out, "w"), indent=1)
EOF
if [ -s "$SCRATCH/failures" ]; then
    say "data checks failed: $(tr '\n' ';' < "$SCRATCH/failures"); logs in $LOGS"
    KEEP=1
    exit 1
fi
say "every program's data checked: ok"
