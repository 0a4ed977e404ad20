#!/usr/bin/env bash
# Same-run comparison of ext4 (a loop-mounted image), bindfs over it, and `numaio mount` (a
# volume file on that ext4) for what grows with a directory's or a file's size: listing a
# directory of --files entries (`ls -f` and `ls -l`: wall time and getdents64 calls), the
# mount server's memory (VmRSS/VmHWM after creating the files and after deleting them),
# and stress-ng's xattr and sync-file stressors. A benchmark, not a test: raw output on
# stdout; results in docs/fs.md.
#
# usage: scripts/fs-scale.sh [--files N] [--rounds R] [--stress SECS] [--numaio PATH]
#        [--scratch DIR] [--parts list,mem,stress]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FILES=200000 ROUNDS=3 STRESS=10 NUMAIO="$ROOT/target/release/numaio" SCRATCH="" PARTS=list,mem,stress
while [ $# -gt 0 ]; do
    case "$1" in
        --files) FILES="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --stress) STRESS="$2"; shift 2 ;;
        --numaio) NUMAIO="$2"; shift 2 ;;
        --scratch) SCRATCH="$2"; shift 2 ;;
        --parts) PARTS="$2"; shift 2 ;;
        *) sed -n '2,10p' "$0" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "fs-scale: needs root" >&2; exit 2; }
[ -x "$NUMAIO" ] || { echo "fs-scale: no numaio binary at $NUMAIO" >&2; exit 2; }
SCRATCH="${SCRATCH:-$(mktemp -d /var/tmp/fs-scale.XXXXXX)}"
mkdir -p "$SCRATCH"
EXT4="$SCRATCH/ext4" BINDFS="$SCRATCH/bindfs" NUMA="$SCRATCH/numaio"
mkdir -p "$EXT4" "$BINDFS" "$NUMA"
cleanup() {
    "$NUMAIO" umount "$NUMA" >/dev/null 2>&1 || umount -l "$NUMA" 2>/dev/null
    fusermount -u "$BINDFS" 2>/dev/null || umount -l "$BINDFS" 2>/dev/null
    umount "$EXT4" 2>/dev/null || umount -l "$EXT4" 2>/dev/null
    rm -rf "$SCRATCH"
}
trap cleanup EXIT
truncate -s 8G "$SCRATCH/ext4.img" && mkfs.ext4 -q -F "$SCRATCH/ext4.img" || exit 2
mount -o loop "$SCRATCH/ext4.img" "$EXT4" || exit 2
mkdir -p "$EXT4/under"
bindfs "$EXT4/under" "$BINDFS" || exit 2
"$NUMAIO" mkfs --size 4G --node-of "$EXT4/vol.img=0" "$EXT4/vol.img" >/dev/null || exit 2
"$NUMAIO" mount "$EXT4/vol.img" "$NUMA" >/dev/null || exit 2
SERVER="$(pgrep -n -f "numaio mount -f .*$NUMA")"
echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# numaio $("$NUMAIO" --version 2>/dev/null) $(git -C "$ROOT" rev-parse --short HEAD), server pid $SERVER, files $FILES"
mem() { awk '/VmRSS|VmHWM/{printf "%s %s kB  ", $1, $2}' "/proc/$SERVER/status"; echo; }

# Creates $FILES empty files in $1 with two threads.
create_files() {
    python3 - "$1" "$FILES" <<'EOF'
import os, sys, threading
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
def work(k):
    for i in range(k, n, 2):
        os.close(os.open("%s/f%07d" % (d, i), os.O_CREAT | os.O_WRONLY, 0o644))
ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
[t.start() for t in ts]; [t.join() for t in ts]
EOF
}
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }

if [[ ",$PARTS," == *,mem,* || ",$PARTS," == *,list,* ]]; then
    echo "## server memory before: $(mem)"
    for t in ext4 bindfs numaio; do
        case $t in ext4) d="$EXT4/under/big" ;; bindfs) d="$BINDFS/big2"; mkdir -p "$d" ;; numaio) d="$NUMA/big" ;; esac
        [ "$t" = ext4 ] && mkdir -p "$d"
        s=$(secs create_files "$d")
        echo "## create $FILES files on $t: ${s}s"
    done
    echo "## server memory after creating $FILES files: $(mem)"
fi
if [[ ",$PARTS," == *,list,* ]]; then
    for r in $(seq "$ROUNDS"); do
        for t in ext4 bindfs numaio; do
            case $t in ext4) d="$EXT4/under/big" ;; bindfs) d="$BINDFS/big2" ;; numaio) d="$NUMA/big" ;; esac
            # A change in the directory drops what a mount cached of its listing.
            change() { touch "$d/zz-change" && rm "$d/zz-change"; }
            change
            n=$(strace -f -c -e trace=getdents64 -o "$SCRATCH/st" ls -f "$d" | wc -l)
            calls=$(awk '/getdents64/{print $4}' "$SCRATCH/st")
            change; f=$(secs ls -f "$d")
            again=$(secs ls -f "$d")
            n2=$(strace -f -c -e trace=getdents64 -o "$SCRATCH/st2" ls -f "$d" | wc -l)
            calls2=$(awk '/getdents64/{print $4}' "$SCRATCH/st2")
            change; l=$(secs ls -l "$d")
            echo "list round $r $t: entries $n getdents64 $calls ls-f ${f}s | repeated: ls-f ${again}s getdents64 $calls2 | after a change: ls-l ${l}s"
        done
    done
    echo "## server memory after listing: $(mem)"
fi
if [[ ",$PARTS," == *,mem,* ]]; then
    s=$(secs rm -rf "$NUMA/big")
    echo "## rm -rf of $FILES files on numaio: ${s}s; server memory: $(mem)"
    sync -f "$NUMA"
    echo "## after sync: $(mem)"
    sleep 12
    echo "## 12 s later (the mount trims its heap every 10 s while active): $(mem)"
fi
if [[ ",$PARTS," == *,stress,* ]] && command -v stress-ng >/dev/null; then
    for r in $(seq "$ROUNDS"); do
        for t in ext4 bindfs numaio; do
            case $t in ext4) d="$EXT4/under/st" ;; bindfs) d="$BINDFS/st" ;; numaio) d="$NUMA/st" ;; esac
            mkdir -p "$d"
            for s in xattr sync-file; do
                out=$(cd "$d" && timeout $((STRESS * 6)) stress-ng --$s 1 --temp-path "$d" -t "$STRESS" --metrics-brief 2>&1)
                echo "stress round $r $t $s: $(echo "$out" | awk -v s="$s" '$0 ~ "\\] "s" " && $0 !~ /stressor/ {print $5, $9; exit}') (bogo ops, bogo ops/s real)"
            done
        done
    done
    echo "## server memory after stress-ng: $(mem)"
fi
