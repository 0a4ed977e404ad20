#!/usr/bin/env bash
# Real programs on numaio-fs against ext4 and bindfs, in one run: tar extract, git clone and
# gc, SQLite (WAL and rollback journal), many files in one directory (create, `ls -f`,
# stat), stress-ng's metadata stressors, dbench, PostgreSQL (pgbench) and a C build (zlib's
# configure and make). Every program's data is checked after it ran (diff -r of the extracted
# tree, git fsck, PRAGMA integrity_check and the row count, the file count, pgbench's row
# counts and balances, also after a kill -9 of the server, zlib's own tests); a failed check
# fails the run, so `--quick` is a correctness run of every program. A benchmark, not a test:
# the table goes to stdout, raw logs to the scratch directory; numbers belong in docs/fs.md.
#
# usage: scripts/fs-programs.sh [options]
#   --targets LIST     comma list of ext4, bindfs, numaio-classic, numaio-uring, and
#                      numaio-classic-wb, numaio-uring-wb (mounted -o writeback_cache)
#                      (default: the first four; io_uring needs enable_uring, see --fuse-uring)
#   --rounds N         rounds, targets in alternating order (default 3, 1 with --quick);
#                      median and min-max
#   --quick            small sizes, 1 s per stressor: every program runs and is checked
#   --only ROWS        comma list of rows to run (and the rows they need: git-gc runs after
#                      git-clone, pgbench after pgbench-init, ls-f and stat after create)
#   --numaio-opts LIST more -o options for every numaio target (e.g. noseek_holes)
#   --ci               correctness only, for CI: quick sizes, numaio-classic, numaio-uring and
#                      numaio-uring-wb, no install (setup.sh's job); a program that cannot run
#                      is SKIPPED (and a failure where $CI or NUMAIO_REQUIRE is set)
#   --files N          files for the one-directory rows (default 200000)
#   --rows N           SQLite rows, in transactions of 1,000 (default 200000)
#   --stress SECS      seconds per stress-ng stressor, for dbench and pgbench (default 10)
#   --pg-scale N       pgbench scale factor, 100,000 accounts each (default 20)
#   --numaio PATH      the numaio binary (default target/release/numaio)
#   --fuse-uring       set /sys/module/fuse/parameters/enable_uring to Y for the run
#   --no-install       do not apt-get install missing programs (rows that need them are skipped)
#   --setup            only install the programs and fetch the C build's source, then exit
#   --json FILE        also write the results as JSON
#   --keep             leave the scratch directory
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
say() { printf '[fs-programs] %s\n' "$*" >&2; }
die() { printf '[fs-programs] ERROR: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '11,33p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

TARGETS="" ROUNDS=3 QUICK=0 CI_MODE=0 FILES=200000 ROWS=200000 STRESS=10 PG_SCALE=20
ONLY="" NUMAIO_OPTS="" ROUNDS_GIVEN=0
NUMAIO="$ROOT/target/release/numaio" URING=0 INSTALL=1 SETUP_ONLY=0 JSON="" KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --targets) TARGETS="${2:-}"; shift 2 ;;
        --rounds) ROUNDS="${2:-}"; ROUNDS_GIVEN=1; shift 2 ;;
        --only) ONLY="${2:-}"; shift 2 ;;
        --numaio-opts) NUMAIO_OPTS="${2:-}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --ci) CI_MODE=1; shift ;;
        --files) FILES="${2:-}"; shift 2 ;;
        --rows) ROWS="${2:-}"; shift 2 ;;
        --stress) STRESS="${2:-}"; shift 2 ;;
        --pg-scale) PG_SCALE="${2:-}"; shift 2 ;;
        --numaio) NUMAIO="${2:-}"; shift 2 ;;
        --fuse-uring) URING=1; shift ;;
        --no-install) INSTALL=0; shift ;;
        --setup) SETUP_ONLY=1; shift ;;
        --json) JSON="${2:-}"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage ;;
        *) say "unknown option $1"; usage ;;
    esac
done
if [ $CI_MODE -eq 1 ]; then
    # The three mounts whose code paths differ: the classic transport, the io_uring transport
    # (its ring threads answer metadata themselves), and the writeback cache (the kernel sends
    # writes, times and sizes differently).
    QUICK=1 INSTALL=0
    [ -n "$TARGETS" ] || TARGETS="numaio-classic,numaio-uring,numaio-uring-wb"
fi
[ -n "$TARGETS" ] || TARGETS="ext4,bindfs,numaio-classic,numaio-uring"
if [ $QUICK -eq 1 ]; then
    [ $ROUNDS_GIVEN -eq 1 ] || ROUNDS=1
    FILES=2000 ROWS=5000 STRESS=1 PG_SCALE=1; fi
# zlib: both libraries and the test programs, then both libraries' tests
GC_OPTS=(--aggressive) ZLIB_CONFIGURE=() ZLIB_MAKE=() ZLIB_TEST=test ZLIB_OKS=2 ZLIB_CFLAGS="-O3"
if [ $CI_MODE -eq 1 ]; then
    # The same programs, less of each: a plain gc (a repack all the same), the static library
    # and its test only, unoptimised (the same files written, a third of the compiler's
    # time), and the stressors at once (below).
    GC_OPTS=() ZLIB_CONFIGURE=(--static) ZLIB_MAKE=(static) ZLIB_TEST=teststatic ZLIB_OKS=1 ZLIB_CFLAGS="-O0"
fi
for n in "$ROUNDS" "$FILES" "$ROWS" "$STRESS" "$PG_SCALE"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "--rounds, --files, --rows, --stress and --pg-scale take whole numbers > 0 (got '$n')"
done
for t in ${TARGETS//,/ }; do
    case "$t" in ext4|bindfs|numaio-classic|numaio-uring|numaio-classic-wb|numaio-uring-wb) ;; *) die "unknown target '$t'" ;; esac
done
[ "$(id -u)" -eq 0 ] || die "run as root: the targets are mounted, and programs are installed"

# A program a row needs and cannot have here: the row is skipped visibly (SKIPPED, also to
# $NUMAIO_SKIP_LOG). Under CI ($CI, or NUMAIO_REQUIRE naming it or `all`), setup should have
# provided it, so the skip fails the run.
SKIP_FAILS=0
required() {
    [ -n "${CI:-}" ] && return 0
    local r
    for r in ${NUMAIO_REQUIRE//,/ }; do [ "$r" = all ] || [ "$r" = "$1" ] && return 0; done
    return 1
}
skip() { # WHAT WHY
    local line="SKIPPED: fs-programs $1: $2"
    printf '%s\n' "$line" >&2
    [ -n "${NUMAIO_SKIP_LOG:-}" ] && printf '%s\n' "$line" >> "$NUMAIO_SKIP_LOG"
    if required "$1"; then say "$1 is required on this machine (\$CI or NUMAIO_REQUIRE)"; SKIP_FAILS=1; fi
}

# What the rows run, and the Debian package that brings each program. PostgreSQL's own
# binaries (initdb, pg_ctl) are not on PATH in Debian: they are found under
# /usr/lib/postgresql/VERSION/bin.
pg_bindir() {
    local b
    for b in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
        [ -x "$b/initdb" ] && [ -x "$b/pg_ctl" ] && [ -x "$b/pgbench" ] && [ -x "$b/psql" ] && { echo "$b"; return 0; }
    done
    b="$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")"
    [ -x "$b/pg_ctl" ] && [ -x "$b/pgbench" ] && [ -x "$b/psql" ] && { echo "$b"; return 0; }
    return 1
}
have() { # PACKAGE: whether what the rows need from it is here
    case "$1" in
        postgresql) pg_bindir >/dev/null && getent passwd postgres >/dev/null ;;
        *) command -v "$1" >/dev/null ;;
    esac
}
# The C build: zlib's source (zlib-ng, the project the speed issue built, is not in Debian),
# fetched once with `apt-get source` through a private apt state (its own deb-src list and
# package lists), so the host's apt configuration is not touched; kept in the lab cache.
SRC_CACHE="${NUMAIO_LAB_CACHE:-$ROOT/lab/cache}/src"
zlib_tarball() {
    local f
    for f in "$SRC_CACHE"/zlib_*.orig.tar.*; do [ -f "$f" ] && { echo "$f"; return; }; done
}
fetch_zlib() {
    [ -n "$(zlib_tarball)" ] && return 0
    local codename apt
    # shellcheck source=/dev/null
    codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
    [ -n "$codename" ] || { say "no VERSION_CODENAME in /etc/os-release: cannot fetch zlib's source"; return 1; }
    apt="$SRC_CACHE/apt"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d"
    chmod 755 "$SRC_CACHE"  # apt's _apt user may write here
    echo "deb-src http://deb.debian.org/debian $codename main" > "$apt/sources.list"
    local aptopts=(-o "Dir::Etc::sourcelist=$apt/sources.list" -o "Dir::Etc::sourceparts=$apt/sources.list.d"
                -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -q)
    say "fetching zlib's source (apt-get source, deb-src $codename)"
    apt-get "${aptopts[@]}" update > "$apt/update.log" 2>&1 || { say "apt-get update of deb-src failed: $(tail -2 "$apt/update.log")"; return 1; }
    (cd "$SRC_CACHE" && apt-get "${aptopts[@]}" source --download-only zlib > "$apt/source.log" 2>&1) \
        || { say "apt-get source zlib failed: $(tail -2 "$apt/source.log")"; return 1; }
    rm -f "$SRC_CACHE"/zlib_*.dsc "$SRC_CACHE"/zlib_*.debian.tar.* "$SRC_CACHE"/zlib_*.asc
    rm -rf "$apt/lists" "$apt/cache"  # the source list is 20 MB; the tarball is what is kept
    [ -n "$(zlib_tarball)" ]
}
install_missing() {
    local pkgs=() p
    for p in sqlite3 stress-ng dbench postgresql gcc make; do have "$p" || pkgs+=("$p"); done
    [[ ",$TARGETS," == *,bindfs,* ]] && ! have bindfs && pkgs+=(bindfs)
    if [ ${#pkgs[@]} -gt 0 ]; then
        command -v apt-get >/dev/null || { say "no apt-get: cannot install ${pkgs[*]}"; return 0; }
        # Installing postgresql would otherwise create (and, with an init system, start) a
        # cluster "main" that nothing here uses; the rows make their own.
        if [[ " ${pkgs[*]} " == *" postgresql "* ]] && [ ! -e /etc/postgresql-common/createcluster.d/numaio-no-main.conf ]; then
            mkdir -p /etc/postgresql-common/createcluster.d
            echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/numaio-no-main.conf
        fi
        say "installing: ${pkgs[*]}"
        { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}"; }; } \
            > /var/tmp/fs-programs-apt.log 2>&1 || say "apt-get install failed (see /var/tmp/fs-programs-apt.log)"
    fi
    fetch_zlib || say "zlib's source could not be fetched: the compile row will be skipped"
}
if [ $INSTALL -eq 1 ] || [ $SETUP_ONLY -eq 1 ]; then install_missing; fi
if [ $SETUP_ONLY -eq 1 ]; then
    missing=()
    for p in sqlite3 stress-ng dbench postgresql gcc make; do have "$p" || missing+=("$p"); done
    [ -n "$(zlib_tarball)" ] || missing+=("zlib source")
    [ ${#missing[@]} -eq 0 ] || die "still missing after setup: ${missing[*]}"
    say "programs and zlib's source present"
    exit 0
fi

[ -x "$NUMAIO" ] || die "no numaio binary at $NUMAIO (cargo build --release)"
for tool in tar git python3; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install $tool)"
done
[[ ",$TARGETS," == *,bindfs,* ]] && ! have bindfs && die "bindfs is missing (apt-get install bindfs)"
URING_PARAM=/sys/module/fuse/parameters/enable_uring
if [[ ",$TARGETS," == *,numaio-uring* ]]; then
    if [ $CI_MODE -eq 1 ] && [ -w "$URING_PARAM" ]; then
        URING=1
    elif [ $CI_MODE -eq 1 ]; then
        # Without the kernel's FUSE over io_uring a uring mount falls back: not what it tests.
        skip io_uring "the numaio-uring targets need FUSE over io_uring ($URING_PARAM: kernel 6.14+)"
        kept=()
        for t in ${TARGETS//,/ }; do [[ "$t" == numaio-uring* ]] || kept+=("$t"); done
        TARGETS="$(IFS=,; echo "${kept[*]}")"
    fi
fi
[ -n "$TARGETS" ] || die "no target left to run"
SCRATCH="$(mktemp -d /var/tmp/fs-programs.XXXXXX)"
# PostgreSQL runs as the user postgres, whose data directory is under the targets' mount points
chmod 755 "$SCRATCH"
LOGS="$SCRATCH/logs"
mkdir -p "$LOGS"
uring_before=""
mounted=()
PGSOCK=""
# The data directory of a PostgreSQL server the pgbench rows started (a file: rows run in a
# subshell). The server is stopped before anything is unmounted.
PG_RUNNING="$SCRATCH/pg-running"
pg_stop_running() {
    local data
    [ -s "$PG_RUNNING" ] || return 0
    data="$(cat "$PG_RUNNING")"
    (cd / && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$data" -m immediate -w -t 60 stop) > /dev/null 2>&1
    rm -f "$PG_RUNNING"
}
cleanup() {
    local i m
    pg_stop_running
    [ -n "$PGSOCK" ] && rm -rf "$PGSOCK"
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
{ truncate -s 16G "$SCRATCH/ext4.img" && mkfs.ext4 -q -F "$SCRATCH/ext4.img"; } || die "cannot make the ext4 image"
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
            [ -z "$NUMAIO_OPTS" ] || opts="$opts,$NUMAIO_OPTS"
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
{ mkdir -p "$INPUT/ref" && tar -C "$INPUT/ref" -xf "$INPUT/tree.tar"; } || die "cannot extract the reference tree"
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
ROWS_ALL=(tar git-clone git-gc)
if have dbench; then ROWS_ALL+=(dbench); else skip dbench "dbench is not installed (apt-get install dbench)"; fi
if have sqlite3; then ROWS_ALL+=(sqlite-wal sqlite-rollback); else skip sqlite3 "sqlite3 is not installed (apt-get install sqlite3)"; fi
PGBIN=""
if have postgresql; then
    PGBIN="$(pg_bindir)"
    ROWS_ALL+=(pgbench-init pgbench)
    # The server listens on a Unix socket only, in a directory of its own
    PGSOCK="$(mktemp -d /tmp/fs-programs-pg.XXXXXX)"
    chown postgres: "$PGSOCK"
    install -d -o postgres -g postgres "$LOGS/pg"
else
    skip postgresql "PostgreSQL (initdb, pg_ctl, pgbench, psql) and the user postgres are missing (apt-get install postgresql)"
fi
ZLIB_TAR="$(zlib_tarball)"
if ! have gcc || ! have make; then
    skip gcc "the compile row needs gcc and make (apt-get install gcc make)"
elif [ -z "$ZLIB_TAR" ]; then
    skip zlib-source "the compile row needs zlib's source in $SRC_CACHE (scripts/fs-programs.sh --setup fetches it)"
else
    ROWS_ALL+=(compile)
fi
ROWS_ALL+=(create ls-f stat)
if have stress-ng; then
    for s in "${STRESSORS[@]}"; do ROWS_ALL+=("stress-$s"); done
else
    skip stress-ng "stress-ng is not installed (apt-get install stress-ng)"
fi
if [ -n "$ONLY" ]; then
    # The rows asked for, in the table's order, with the rows whose files they use.
    want=",$ONLY,"
    for r in ${ONLY//,/ }; do
        case " tar git-clone git-gc dbench sqlite-wal sqlite-rollback pgbench-init pgbench compile create ls-f stat ${STRESSORS[*]/#/stress-} " in
            *" $r "*) ;; *) die "--only: unknown row '$r'" ;;
        esac
    done
    [[ "$want" == *,git-gc,* ]] && want+="git-clone,"
    [[ "$want" == *,pgbench,* ]] && want+="pgbench-init,"
    [[ "$want" == *,ls-f,* || "$want" == *,stat,* ]] && want+="create,"
    kept=()
    for r in "${ROWS_ALL[@]}"; do [[ "$want" == *,"$r",* ]] && kept+=("$r"); done
    [ ${#kept[@]} -gt 0 ] || die "--only $ONLY: none of these rows can run here (see SKIPPED above)"
    ROWS_ALL=("${kept[@]}")
fi
declare -A UNIT
for r in tar git-clone git-gc sqlite-wal sqlite-rollback pgbench-init compile create ls-f stat; do UNIT[$r]=s; done
for s in "${STRESSORS[@]}"; do UNIT[stress-$s]="ops/s"; done
UNIT[dbench]="MB/s"
UNIT[pgbench]="TPS"

secs() { python3 -c 'import sys; print("%.3f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }
now() { date +%s.%N; }
# A failed data check fails the run (rows run in a subshell: the list is a file).
check() { # ROW TARGET WHAT
    say "DATA CHECK FAILED: $1 on $2: $3"
    echo "$1 on $2: $3" >> "$SCRATCH/failures"
}

# PostgreSQL: the server runs as postgres (initdb refuses root), from / (root's working
# directory may be closed to it); it listens on $PGSOCK only, no TCP.
pg() { (cd / && runuser -u postgres -- "$@"); }
pglog() { echo "$LOGS/pg/$1.round$round.log"; }
pg_start() { # TARGET DATA
    echo "$2" > "$PG_RUNNING"
    pg "$PGBIN/pg_ctl" -D "$2" -l "$(pglog "$1")" -w -t 300 -o "-c listen_addresses='' -k $PGSOCK" start > /dev/null 2>&1
}
pg_sql() { "$PGBIN/psql" -X -At -v ON_ERROR_STOP=1 -h "$PGSOCK" -U postgres -d postgres -c "$1" 2>&1; }
# The TPC-B tables hold 100,000 accounts per scale, and the balances agree: each transaction
# adds one delta to an account, a teller and a branch, and logs it as one history row, so the
# three sums equal the sum of the history (every balance was 0 after -i). HISTORY is the
# number of history rows expected, exactly or at least.
pg_check() { # ROW TARGET HISTORY exact|at-least
    local out acc hist sa sb st sd
    out="$(pg_sql 'SELECT (SELECT count(*) FROM pgbench_accounts), (SELECT count(*) FROM pgbench_history),
        (SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts), (SELECT coalesce(sum(bbalance), 0) FROM pgbench_branches),
        (SELECT coalesce(sum(tbalance), 0) FROM pgbench_tellers), (SELECT coalesce(sum(delta), 0) FROM pgbench_history)')"
    IFS='|' read -r acc hist sa sb st sd <<< "$out"
    [ "$acc" = "$((100000 * PG_SCALE))" ] || { check "$1" "$2" "pgbench_accounts has '$acc' rows, not $((100000 * PG_SCALE)) ($out)"; return; }
    if [ "$4" = exact ]; then
        [ "$hist" = "$3" ] || check "$1" "$2" "pgbench_history has $hist rows, pgbench reported $3 transactions"
    else
        { [[ "$hist" =~ ^[0-9]+$ ]] && [ "$hist" -ge "$3" ]; } || check "$1" "$2" "pgbench_history has $hist rows, fewer than the $3 transactions pgbench saw committed"
    fi
    { [ "$sa" = "$sd" ] && [ "$sb" = "$sd" ] && [ "$st" = "$sd" ]; } \
        || check "$1" "$2" "balances disagree: accounts $sa, branches $sb, tellers $st, history $sd"
}

# Runs one row on target T in its directory D; prints the number.
run_row() {
    local row="$1" t="$2" d="$3" t0 t1 out
    case "$row" in
        tar)
            mkdir -p "$d/tar"; t0=$(now)
            tar -C "$d/tar" -xf "$INPUT/tree.tar" || check tar "$t" "tar exited $?"
            sync -f "$d/tar"; t1=$(now)
            diff -r --no-dereference "$INPUT/ref" "$d/tar" > "$LOGS/$t-tar-diff.r$round.log" 2>&1 \
                || check tar "$t" "diff -r differs (see $LOGS/$t-tar-diff.r$round.log)"
            secs "$t0" "$t1" ;;
        git-clone)
            t0=$(now)
            git clone -q --no-hardlinks "$ROOT" "$d/clone" > "$LOGS/$t-clone.r$round.log" 2>&1 || check git-clone "$t" "git clone failed"
            sync -f "$d/clone"; t1=$(now)
            git -C "$d/clone" fsck --full > "$LOGS/$t-fsck.r$round.log" 2>&1 || check git-clone "$t" "git fsck failed"
            secs "$t0" "$t1" ;;
        git-gc)
            t0=$(now)
            git -C "$d/clone" gc -q "${GC_OPTS[@]}" > "$LOGS/$t-gc.r$round.log" 2>&1 || check git-gc "$t" "git gc failed"
            sync -f "$d/clone"; t1=$(now)
            git -C "$d/clone" fsck --full >> "$LOGS/$t-fsck.r$round.log" 2>&1 || check git-gc "$t" "git fsck after gc failed"
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
            t0=$(now)
            # shellcheck disable=SC2012  # ls -f is the program measured
            out="$(ls -f "$d/many" | wc -l)"
            t1=$(now)
            [ "$out" -eq $((FILES + 2)) ] || check ls-f "$t" "ls -f listed $out entries, not $((FILES + 2))"
            secs "$t0" "$t1" ;;
        stat)
            t0=$(now); out="$(cd "$d/many" && find . -type f -print0 | xargs -0 stat -c %s | wc -l)"; t1=$(now)
            [ "$out" -eq "$FILES" ] || check stat "$t" "stat saw $out files, not $FILES"
            secs "$t0" "$t1" ;;
        stress-*)
            local s="${row#stress-}"
            local log="$LOGS/$t-$row.r$round.log" what=("--$s" 1)
            if [ $CI_MODE -eq 1 ]; then
                # All stressors in one run of 2 s, each in its own directory (stress-ng makes one
                # per instance under --temp-path); the first stressor row runs it, each row reads
                # its stressor's line.
                log="$LOGS/$t-stress-all.r$round.log" what=()
                local x
                for x in "${STRESSORS[@]}"; do what+=("--$x" 1); done
            fi
            if [ ! -e "$log" ]; then
                mkdir -p "$d/sng-$s"
                stress-ng "${what[@]}" --temp-path "$d/sng-$s" -t "$((CI_MODE == 1 ? 2 : STRESS))" --metrics-brief > "$log" 2>&1 \
                    || check "$row" "$t" "stress-ng ${what[*]} exited non-zero (see $log)"
            fi
            # metrics-brief: "stressor bogo-ops real-time usr sys bogo-ops/s(real) ..."
            awk -v s="$s" '$0 ~ ("] +" s " ") { for (i = 1; i <= NF; i++) if ($i == s) { print $(i + 5); exit } }' "$log" ;;
        dbench)
            # 4 clients replaying Debian's NetBench load file (client.txt)
            local load=/usr/share/dbench/client.txt lopt=()
            [ -r "$load" ] && lopt=(-c "$load")
            local log="$LOGS/$t-dbench.r$round.log" bad
            mkdir -p "$d/dbench"
            # At least 3 s: dbench warms up first and measures nothing in 1 s
            dbench "${lopt[@]}" -D "$d/dbench" -t "$((STRESS < 3 ? 3 : STRESS))" 4 > "$log" 2>&1 \
                || check dbench "$t" "dbench exited non-zero (see $log)"
            # dbench reports an operation whose result differs from the load file's and goes on.
            # Its start barrier is a SysV semaphore: without one (semget failed) the clients
            # start unsynchronised, which says nothing of the file system.
            bad="$(grep -iE 'failed|error' "$log" | grep -v 'failed to create barrier semaphore' | head -n1)"
            [ -z "$bad" ] || check dbench "$t" "dbench reported failed operations: '$bad' (see $log)"
            out="$(awk '/Throughput/ { print $2 }' "$log" | tail -1)"
            awk -v x="$out" 'BEGIN { exit !(x > 0) }' || check dbench "$t" "dbench measured no throughput ('$out')"
            echo "$out" ;;
        pgbench-init)
            # A throwaway cluster whose data directory is on the target (page checksums on, so
            # a page that reads back other than written is an error), then `pgbench -i`.
            local data="$d/pg/data"
            install -d -o postgres -g postgres -m 700 "$d/pg"
            pg "$PGBIN/initdb" -D "$data" -A trust -U postgres --data-checksums -E UTF8 --locale=C \
                --no-instructions > "$LOGS/$t-initdb.r$round.log" 2>&1 \
                || { check pgbench-init "$t" "initdb failed (see $LOGS/$t-initdb.r$round.log)"; return; }
            pg_start "$t" "$data" \
                || { rm -f "$PG_RUNNING"; check pgbench-init "$t" "the server did not start (see $(pglog "$t"))"; return; }
            t0=$(now)
            "$PGBIN/pgbench" -i -s "$PG_SCALE" -h "$PGSOCK" -U postgres postgres > "$LOGS/$t-pgbench-init.r$round.log" 2>&1 \
                || check pgbench-init "$t" "pgbench -i failed (see $LOGS/$t-pgbench-init.r$round.log)"
            t1=$(now)
            pg_check pgbench-init "$t" 0 exact
            secs "$t0" "$t1" ;;
        pgbench)
            [ -s "$PG_RUNNING" ] || { check pgbench "$t" "no server: pgbench-init failed"; return; }
            local data n tps n2 pm kids=() p i
            data="$(cat "$PG_RUNNING")"
            "$PGBIN/pgbench" -c 4 -j 2 -T "$STRESS" -h "$PGSOCK" -U postgres postgres > "$LOGS/$t-pgbench.r$round.log" 2>&1 \
                || check pgbench "$t" "pgbench exited non-zero (see $LOGS/$t-pgbench.r$round.log)"
            tps="$(awk '/^tps = / { print $3; exit }' "$LOGS/$t-pgbench.r$round.log")"
            n="$(awk '/actually processed:/ { print $NF; exit }' "$LOGS/$t-pgbench.r$round.log")"
            n="${n%%/*}"
            # pgbench empties pgbench_history before the run, so it holds one row per transaction
            pg_check pgbench "$t" "${n:-0}" exact
            # The server killed (kill -9, its backends with it) while clients commit, and
            # started again: it must recover from its WAL on the target, and keep every
            # transaction pgbench saw committed. -n: pgbench_history is not emptied first.
            "$PGBIN/pgbench" -n -c 4 -j 2 -T 60 -h "$PGSOCK" -U postgres postgres > "$LOGS/$t-pgbench-kill.r$round.log" 2>&1 &
            p=$!
            sleep "$((QUICK == 1 ? 1 : 2))"
            pm="$(head -1 "$data/postmaster.pid" 2>/dev/null)"
            if [[ "$pm" =~ ^[0-9]+$ ]]; then
                mapfile -t kids < <(pgrep -P "$pm")
                kill -9 "$pm" "${kids[@]}"
                # Until every process is gone: a new postmaster refuses to start while a
                # backend of the old one is still attached to its shared memory.
                for ((i = 0; i < 300; i++)); do
                    kill -0 "$pm" "${kids[@]}" 2>/dev/null || break
                    sleep 0.1
                done
            else
                check pgbench "$t" "no postmaster.pid to kill"
            fi
            wait "$p"
            n2="$(awk '/actually processed:/ { print $NF; exit }' "$LOGS/$t-pgbench-kill.r$round.log")"
            n2="${n2%%/*}"
            if pg_start "$t" "$data"; then
                sed -n '/database system was interrupted/,$p' "$(pglog "$t")" | grep -q 'automatic recovery in progress' \
                    || check pgbench "$t" "the restarted server did not recover from a crash (see $(pglog "$t"))"
                pg_check pgbench "$t" "$(( ${n:-0} + ${n2:-0} ))" at-least
                if [ -x "$PGBIN/pg_amcheck" ]; then
                    "$PGBIN/pg_amcheck" -h "$PGSOCK" -U postgres --install-missing --heapallindexed postgres \
                        > "$LOGS/$t-amcheck.r$round.log" 2>&1 || check pgbench "$t" "pg_amcheck after the crash failed (see $LOGS/$t-amcheck.r$round.log)"
                fi
            else
                check pgbench "$t" "the server did not start again after kill -9 (see $(pglog "$t"))"
            fi
            pg "$PGBIN/pg_ctl" -D "$data" -m fast -w -t 120 stop > /dev/null 2>&1 \
                || check pgbench "$t" "pg_ctl stop failed"
            rm -f "$PG_RUNNING"
            echo "$tps" ;;
        compile)
            # zlib's ./configure and make -j2 in a tree extracted onto the target; its own
            # tests (make test: the built static and shared libraries compress and inflate)
            # check what the compiler and linker wrote.
            local src
            { mkdir -p "$d/cc" && tar -C "$d/cc" -xf "$ZLIB_TAR"; } || { check compile "$t" "cannot extract $ZLIB_TAR"; return; }
            src="$(find "$d/cc" -mindepth 1 -maxdepth 1 -type d | head -1)"
            t0=$(now)
            (cd "$src" && CFLAGS="$ZLIB_CFLAGS" ./configure "${ZLIB_CONFIGURE[@]}" && make -j2 "${ZLIB_MAKE[@]}") > "$LOGS/$t-compile.r$round.log" 2>&1 \
                || check compile "$t" "configure or make failed (see $LOGS/$t-compile.r$round.log)"
            sync -f "$src"; t1=$(now)
            (cd "$src" && make "$ZLIB_TEST") > "$LOGS/$t-compile-test.r$round.log" 2>&1 \
                || check compile "$t" "make $ZLIB_TEST failed (see $LOGS/$t-compile-test.r$round.log)"
            [ "$(grep -c 'test OK' "$LOGS/$t-compile-test.r$round.log")" -ge "$ZLIB_OKS" ] \
                || check compile "$t" "make test did not report its tests OK (see $LOGS/$t-compile-test.r$round.log)"
            secs "$t0" "$t1" ;;
    esac
}

declare -A R   # R[target:row] = space-separated values, one per round
IFS=, read -r -a ts <<< "$TARGETS"
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
        pg_stop_running
        rm -rf "${d:?}"/* 2>/dev/null
        unmount_target "$t"
    done
done

# Median, min-max, and numaio's speed against ext4 and bindfs (> 1: numaio is faster).
python3 - "$JSON" "$TARGETS" "$ENTRIES" "$FILES" "$ROWS" "$STRESS" "$(uname -r)" "$(nproc)" "$PG_SCALE" <<EOF
import json, statistics, sys
out, targets = sys.argv[1], sys.argv[2].split(",")
entries, files, rows, stress, kernel, cpus, pg_scale = sys.argv[3:10]
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
      f"{rows} SQLite rows, {stress} s per stressor, dbench and pgbench run, pgbench scale {pg_scale}; "
      f"medians (s: lower is better)")
# Columns as wide as the longest target or comparison name
w = max([16] + [len(t) + 2 for t in targets])
head = f"{'row':18} {'unit':6}" + "".join(f"{t:>{w}}" for t in targets)
cmp = [(n, p) for n in targets if n.startswith("numaio") for p in ("ext4", "bindfs") if p in targets]
w = max([w] + [len(n) - len("numaio-") + len(p) + 3 for n, p in cmp])
head = f"{'row':18} {'unit':6}" + "".join(f"{t:>{w}}" for t in targets)
head += "".join(f"{n.replace('numaio-', '') + '/' + p:>{w}}" for n, p in cmp)
print(head)
doc = {"cpus": int(cpus), "kernel": kernel, "entries": int(entries), "files": int(files), "rows": int(rows),
       "pg_scale": int(pg_scale), "rows_table": {}}
for r in order:
    line = f"{r:18} {unit[r]:6}"
    for t in targets:
        m = med(t, r)
        line += f"{('%.2f' % m) if m is not None else 'error':>{w}}"
    for n, p in cmp:
        a, b = med(n, r), med(p, r)
        if a and b:
            x = b / a if unit[r] == "s" else a / b
            line += f"{'%.2fx' % x:>{w}}"
        else:
            line += f"{'-':>{w}}"
    print(line)
    doc["rows_table"][r] = {"unit": unit[r], **{t: {"median": med(t, r), "values": vals(t, r)} for t in targets}}
print("ranges (min-max):")
rng = {(t, r): ("%.2f-%.2f" % (min(vals(t, r)), max(vals(t, r)))) if vals(t, r) else "-" for t in targets for r in order}
wr = max([w] + [len(x) + 2 for x in rng.values()])
print(f"{'row':18} {'unit':6}" + "".join(f"{t:>{wr}}" for t in targets))
for r in order:
    print(f"{r:18} {unit[r]:6}" + "".join(f"{rng[(t, r)]:>{wr}}" for t in targets))
if out:
    json.dump(doc, open(out, "w"), indent=1)
EOF
if [ $SKIP_FAILS -eq 1 ]; then
    say "programs this machine must have were missing (SKIPPED above)"
    exit 1
fi
if [ -s "$SCRATCH/failures" ]; then
    say "data checks failed: $(tr '\n' ';' < "$SCRATCH/failures"); logs in $LOGS"
    KEEP=1
    exit 1
fi
say "every program's data checked: ok"
