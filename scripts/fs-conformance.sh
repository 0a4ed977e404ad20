#!/usr/bin/env bash
# External conformance suites against one file system: pjdfstest (on numaio twice: with the
# kernel's permission checks and with the server's own), fsx (plain, mmap and O_DIRECT
# variants, several seeds), fio verify=crc32c across a remount, the three Filebench-like
# personalities (bench/fio/), and stress-ng's file-system stressors (each for a fixed time,
# none may fail). Results: docs/fs-conformance.md.
#
# usage: scripts/fs-conformance.sh --target numaio|bindfs|ext4|tmpfs [options]
#   --scratch DIR        work directory (created; default: a new one under /var/tmp)
#   --steps LIST         comma list of pjdfstest,fsx,fio-verify,personalities,stress-ng
#                        (default: all)
#   --fsx-ops N          operations per fsx run (default 20000; the documented run: 1000000)
#   --fsx-seeds LIST     comma list of seeds (default 1,2,3)
#   --fsx-variants LIST  comma list of plain,mmap,odirect,falloc (default plain,mmap,odirect)
#   --fsx-jobs N         fsx runs at once (default 2)
#   --fsx-chunk N        most ops per fsx process for variants with mmap reads (default 50000)
#   --verify-size SIZE   fio verify size per job (default 64m)
#   --stress-secs N      seconds per stress-ng stressor (default 10)
#   --stress-jobs N      stress-ng stressors run at once, each in its own directory (default 1)
#   --stressors LIST     comma list of stress-ng stressors (default: the file-system set in STRESSORS)
#   --backing ext4|tmpfs the file system under bindfs (default tmpfs)
#   --numaio PATH        the numaio binary (default target/release/numaio)
#   --mount-opts OPTS    numaio mount -o for every step (sets NUMAIO_MOUNT_OPTS), e.g.
#                        allow_other,default_permissions,writeback_cache
#   --json FILE          also write the summary as JSON (schema in docs/fs-conformance.md)
#   --keep               leave the scratch directory (and logs) in place
# Environment: NUMAIO_MOUNT_OPTS (default allow_other,default_permissions) for numaio mount -o;
# NUMAIO_SERVER_CHECK_OPTS (default allow_other,nodefault_permissions) for the second pjdfstest
# run on numaio, where the server checks permissions instead of the kernel;
# BINDFS_OPTS (default attr_timeout=0,entry_timeout=0) added to bindfs -o.
# Runs as root (pjdfstest switches users; mounts). Exit 0 when every step passed, 1 when a
# step failed, 2 on a usage or setup error.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CONF="$ROOT/scripts/conformance"
[ -x "$HOME/.cargo/bin/fsx" ] && export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '[conformance] %s\n' "$*"; }
die() { printf '[conformance] ERROR: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '8,32p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

TARGET="" SCRATCH="" STEPS="pjdfstest,fsx,fio-verify,personalities,stress-ng"
# stress-ng's stressors that exercise a file system's metadata, data, locking and sync paths.
STRESSORS="hdd,dir,dentry,rename,link,symlink,lockf,flock,fcntl,fallocate,mmap,sync-file,seek,xattr,io,chown,utime,iomix"
STRESS_SECS=10 STRESS_JOBS=1
FSX_OPS=20000 FSX_SEEDS="1,2,3" FSX_VARIANTS="plain,mmap,odirect" FSX_JOBS=2 FSX_CHUNK=50000
VERIFY_SIZE=64m BACKING=tmpfs NUMAIO="$ROOT/target/release/numaio" JSON="" KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --target) TARGET="${2:-}"; shift 2 ;;
        --scratch) SCRATCH="${2:-}"; shift 2 ;;
        --steps) STEPS="${2:-}"; shift 2 ;;
        --fsx-ops) FSX_OPS="${2:-}"; shift 2 ;;
        --fsx-seeds) FSX_SEEDS="${2:-}"; shift 2 ;;
        --fsx-variants) FSX_VARIANTS="${2:-}"; shift 2 ;;
        --fsx-jobs) FSX_JOBS="${2:-}"; shift 2 ;;
        --fsx-chunk) FSX_CHUNK="${2:-}"; shift 2 ;;
        --verify-size) VERIFY_SIZE="${2:-}"; shift 2 ;;
        --stress-secs) STRESS_SECS="${2:-}"; shift 2 ;;
        --stress-jobs) STRESS_JOBS="${2:-}"; shift 2 ;;
        --stressors) STRESSORS="${2:-}"; shift 2 ;;
        --backing) BACKING="${2:-}"; shift 2 ;;
        --numaio) NUMAIO="${2:-}"; shift 2 ;;
        --mount-opts) NUMAIO_MOUNT_OPTS="${2:-}"; shift 2 ;;
        --json) JSON="${2:-}"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage ;;
        *) printf '[conformance] ERROR: unknown argument %q\n' "$1" >&2; usage ;;
    esac
done
case "$TARGET" in numaio|bindfs|ext4|tmpfs) ;; *) printf '[conformance] ERROR: --target must be numaio, bindfs, ext4 or tmpfs (got %q)\n' "$TARGET" >&2; usage ;; esac
case "$BACKING" in ext4|tmpfs) ;; *) die "--backing must be ext4 or tmpfs (got '$BACKING')" ;; esac
[[ "$FSX_OPS" =~ ^[1-9][0-9]*$ ]] || die "--fsx-ops must be a positive integer (got '$FSX_OPS')"
[[ "$FSX_CHUNK" =~ ^[1-9][0-9]*$ ]] || die "--fsx-chunk must be a positive integer (got '$FSX_CHUNK')"
[[ "$FSX_JOBS" =~ ^[1-9][0-9]*$ ]] || die "--fsx-jobs must be a positive integer (got '$FSX_JOBS')"
[[ "$FSX_SEEDS" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--fsx-seeds must be a comma list of integers (got '$FSX_SEEDS')"
[[ "$STRESS_SECS" =~ ^[1-9][0-9]*$ ]] || die "--stress-secs must be a positive integer (got '$STRESS_SECS')"
[[ "$STRESS_JOBS" =~ ^[1-9][0-9]*$ ]] || die "--stress-jobs must be a positive integer (got '$STRESS_JOBS')"
[[ "$STRESSORS" =~ ^[a-z0-9-]+(,[a-z0-9-]+)*$ ]] || die "--stressors must be a comma list of stress-ng stressor names (got '$STRESSORS')"
[[ "$VERIFY_SIZE" =~ ^[1-9][0-9]*[kmgKMG]?$ ]] || die "--verify-size must be a size like 64m (got '$VERIFY_SIZE')"
IFS=, read -r -a step_list <<< "$STEPS"
for s in "${step_list[@]}"; do
    case "$s" in pjdfstest|fsx|fio-verify|personalities|stress-ng) ;; *) die "unknown step '$s' in --steps (pjdfstest,fsx,fio-verify,personalities,stress-ng)" ;; esac
done
IFS=, read -r -a variant_list <<< "$FSX_VARIANTS"
for v in "${variant_list[@]}"; do
    [ -f "$CONF/fsx-$v.toml" ] || die "unknown fsx variant '$v' (plain,mmap,odirect,falloc)"
done
IFS=, read -r -a seed_list <<< "$FSX_SEEDS"
[ "$(id -u)" -eq 0 ] || die "run as root: pjdfstest switches users and the targets are mounted"
need() { command -v "$1" >/dev/null || die "$1 not found: $2 (scripts/setup.sh installs it)"; }
need fio "apt-get install fio"
need pjdfstest "cargo install pjdfstest --locked"
need fsx "cargo install fsx --locked"
need cc "apt-get install gcc"
case ",$STEPS," in *,stress-ng,*) need stress-ng "apt-get install stress-ng" ;; esac
case "$TARGET" in
    bindfs) need bindfs "apt-get install bindfs"; need fusermount "apt-get install fuse" ;;
    numaio) [ -x "$NUMAIO" ] || die "$NUMAIO is not an executable: cargo build --release -p numaio-cli, or pass --numaio PATH" ;;
esac

if [ -z "$SCRATCH" ]; then
    SCRATCH="$(mktemp -d /var/tmp/fsc.XXXXXX)" || die "cannot create a scratch directory under /var/tmp"
else
    mkdir -p "$SCRATCH" || die "cannot create scratch directory $SCRATCH"
    [ -z "$(ls -A "$SCRATCH")" ] || die "scratch directory $SCRATCH is not empty: give an empty or new one"
fi
SCRATCH="$(cd "$SCRATCH" && pwd)"
# pjdfstest's unprivileged users must reach the mount point (mktemp -d makes it 0700).
chmod 755 "$SCRATCH" || die "cannot chmod 755 $SCRATCH"
MNT="$SCRATCH/m" LOGS="$SCRATCH/logs"
mkdir -p "$MNT" "$LOGS" "$SCRATCH/bin" "$SCRATCH/secondary"

# Everything this script mounts, unmounted in reverse order on exit.
mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        local m="${mounted[$i]}"
        mountpoint -q "$m" || continue
        case "$TARGET:$m" in
            bindfs:"$MNT") fusermount -u "$m" 2>/dev/null || umount -l "$m" ;;
            numaio:"$MNT") "$NUMAIO" umount "$m" 2>/dev/null || umount -l "$m" ;;
            *) umount "$m" 2>/dev/null || umount -l "$m" ;;
        esac
    done
    if [ "$KEEP" -eq 0 ]; then rm -rf "$SCRATCH"; else say "kept $SCRATCH (logs in $LOGS)"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_ext4_image() { # IMAGE MOUNTPOINT
    [ -f "$1" ] || { truncate -s 2G "$1" && mkfs.ext4 -q -F "$1"; } || die "cannot make ext4 image $1"
    mount -o loop "$1" "$2" || die "cannot loop-mount $1 on $2"
    mounted+=("$2")
}
mount_tmpfs() { mount -t tmpfs -o "size=$2" conformance "$1" || die "cannot mount tmpfs on $1"; mounted+=("$1"); }

# numaio mount options: every user may enter (pjdfstest's dummy users) and the kernel checks
# permissions, as for bindfs. pjdfstest runs a second time with the server's own checks.
NUMAIO_MOUNT_OPTS="${NUMAIO_MOUNT_OPTS:-allow_other,default_permissions}"
NUMAIO_SERVER_CHECK_OPTS="${NUMAIO_SERVER_CHECK_OPTS:-allow_other,nodefault_permissions}"
mount_opts="$NUMAIO_MOUNT_OPTS"
mount_target() {
    case "$TARGET" in
        ext4) mount_ext4_image "$SCRATCH/ext4.img" "$MNT" ;;
        tmpfs)
            if ! mountpoint -q "$MNT"; then mount_tmpfs "$MNT" 2g; fi ;;
        bindfs)
            local back="$SCRATCH/backing"
            if ! mountpoint -q "$back"; then
                mkdir -p "$back"
                if [ "$BACKING" = ext4 ]; then mount_ext4_image "$SCRATCH/backing.img" "$back"; else mount_tmpfs "$back" 2g; fi
            fi
            bindfs -o "allow_other,default_permissions,${BINDFS_OPTS:-attr_timeout=0,entry_timeout=0}" --create-as-user "$back" "$MNT" || die "bindfs $back $MNT failed"
            mounted+=("$MNT") ;;
        numaio)
            if [ ! -f "$SCRATCH/vol0.img" ]; then
                "$NUMAIO" mkfs --size 2G --node-of "$SCRATCH/vol0.img=0" "$SCRATCH/vol0.img" >"$LOGS/mkfs.log" 2>&1 \
                    || die "numaio mkfs --size 2G --node-of $SCRATCH/vol0.img=0 $SCRATCH/vol0.img failed: $(tail -3 "$LOGS/mkfs.log")"
            fi
            "$NUMAIO" mount -o "$mount_opts" "$SCRATCH/vol0.img" "$MNT" >>"$LOGS/mount.log" 2>&1 \
                || die "numaio mount -o $mount_opts $SCRATCH/vol0.img $MNT failed: $(tail -3 "$LOGS/mount.log")"
            mountpoint -q "$MNT" || die "numaio mount returned but $MNT is not a mount point"
            mounted+=("$MNT") ;;
    esac
}
# A remount drops every cache the target has: data must come back from its store.
remount_target() {
    case "$TARGET" in
        tmpfs) sync ;; # tmpfs has no store below its cache: nothing to drop
        ext4) umount "$MNT" && mount -o loop "$SCRATCH/ext4.img" "$MNT" ;;
        bindfs) fusermount -u "$MNT" && mount_target ;;
        numaio) "$NUMAIO" umount "$MNT" >>"$LOGS/mount.log" 2>&1 && mount_target ;;
    esac
}

mount_target
mount_tmpfs "$SCRATCH/secondary" 64m
chmod 755 "$MNT"
say "target $TARGET mounted on $MNT (scratch $SCRATCH)"

names=() results=() details=() secs=()
record() { names+=("$1"); results+=("$2"); details+=("$3"); secs+=("$4"); say "$1: $2 ($3, ${4}s)"; }
strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }

run_pjdfstest() { # STEP-NAME
    local step="$1" t0=$SECONDS cfg="$SCRATCH/pjdfstest.toml" expect="$CONF/pjdfstest-expected-$TARGET.txt"
    # Remount tests (EROFS) remount the test file system read-only with mount(8); -i keeps
    # mount(8) from calling the mount.fuse helper, which cannot remount a FUSE mount.
    printf '#!/bin/sh\nexec /usr/bin/mount -i "$@"\n' > "$SCRATCH/bin/mount"
    chmod 755 "$SCRATCH/bin/mount"
    local failures="[]"
    if [ -f "$expect" ]; then
        failures="[$(grep -v '^\s*#' "$expect" | awk 'NF {printf "%s\"%s\"", sep, $1; sep=", "}')]"
    fi
    sed -e "s/^expected_failures = .*/expected_failures = $failures/" "$CONF/pjdfstest.toml" > "$cfg"
    sed -e 's/^allow_remount = .*/allow_remount = true/' "$cfg" > "$cfg.remount"
    mkdir -p "$MNT/p"
    chmod 755 "$MNT/p"
    # Two passes: the read-only remount (EROFS) tests alone first, because a remount to
    # read-only fails with EBUSY once earlier tests have left a file open for writing in the
    # runner; then everything else, where those tests are skipped (allow_remount = false).
    local rc=0 pass log summaries=()
    for pass in erofs all; do
        log="$LOGS/$step-$pass.log"
        if [ $pass = erofs ]; then
            PATH="$SCRATCH/bin:$PATH" NO_COLOR=1 timeout 600 pjdfstest -c "$cfg.remount" -p "$MNT/p" \
                -s "$SCRATCH/secondary" erofs > "$log" 2>&1 || rc=1
        else
            NO_COLOR=1 timeout 1800 pjdfstest -c "$cfg" -p "$MNT/p" -s "$SCRATCH/secondary" \
                > "$log" 2>&1 || rc=1
        fi
        local line
        line="$(strip_ansi < "$log" | grep '^Summary:' | tail -1 | sed 's/^Summary: //')"
        [ -n "$line" ] || { line="no summary line, see $log"; rc=1; }
        summaries+=("$pass: $line")
    done
    # Counts over both passes: the EROFS tests skipped in the second pass ran in the first.
    local summary
    summary="$(cat "$LOGS/$step-erofs.log" "$LOGS/$step-all.log" 2>/dev/null | strip_ansi | awk '
        / ok$/ {ok++} / FAILED$/ {f++} /PASSED UNEXPECTEDLY$/ {f++} /failed as expected$/ {xf++}
        /^[a-z_:]+ +skipped$/ {sk[$1]++}
        / ok$/ || / FAILED$/ {ran[$1]=1}
        END {s=0; for (t in sk) if (!(t in ran)) s++;
             printf "%d passed, %d failed, %d expected failures, %d skipped", ok, f, xf, s}')"
    if [ $rc -eq 0 ]; then record "$step" PASS "$summary" $((SECONDS - t0))
    else
        cat "$LOGS/$step-erofs.log" "$LOGS/$step-all.log" 2>/dev/null | strip_ansi \
            | grep -E 'FAILED$|PASSED UNEXPECTEDLY$' | sed 's/^/    /' >&2
        record "$step" FAIL "$summary" $((SECONDS - t0))
    fi
    rm -rf "$MNT/p"
}

# numaio: pjdfstest once more on a mount whose permission checks are the server's own
# (no default_permissions), then back to the usual options for the other steps.
run_pjdfstest_server_checks() {
    mount_opts="$NUMAIO_SERVER_CHECK_OPTS"
    # The writeback cache needs the kernel's permission checks: no server-checks mount.
    if [[ ",$NUMAIO_MOUNT_OPTS," == *,writeback_cache,* ]]; then
        say "pjdfstest-server: skipped (writeback_cache needs default_permissions)"
        mount_opts="$NUMAIO_MOUNT_OPTS"; return
    fi
    if ! remount_target; then
        record pjdfstest-server FAIL "remount with -o $mount_opts failed, see $LOGS/mount.log" 0
        mount_opts="$NUMAIO_MOUNT_OPTS"; return
    fi
    chmod 755 "$MNT"
    run_pjdfstest pjdfstest-server
    mount_opts="$NUMAIO_MOUNT_OPTS"
    remount_target || die "remount of $MNT with -o $mount_opts failed: $(tail -3 "$LOGS/mount.log")"
}

run_fsx() {
    local t0=$SECONDS shim="$SCRATCH/odirect-shim.so"
    cc -shared -fPIC -O2 -o "$shim" "$CONF/odirect-shim.c" -ldl || die "cannot build $CONF/odirect-shim.c"
    mkdir -p "$MNT/fsx" "$LOGS/fsx"
    local runs=() pids=() fail=0 total_ops=0 v s
    # fsx 0.3.2 never unmaps the mapping of a map read, so a long run with mmap reads piles up
    # mappings (each truncate then walks them all, and vm.max_map_count ends the run with
    # ENOMEM after ~65k): variants with map reads run as consecutive fsx runs of at most
    # FSX_CHUNK ops, each on a fresh file with its own seed (SEED*100000 + chunk number).
    run_one() { # VARIANT SEED
        local file="$MNT/fsx/$1-$2" art="$LOGS/fsx/$1-$2" left="$FSX_OPS" chunk=0 n seed
        local cfg="$CONF/fsx-$1.toml" per="$FSX_OPS"
        mkdir -p "$art"
        : > "$art/fsx.log"
        if grep -Eq '^mapread = [1-9]' "$cfg" && [ "$per" -gt "$FSX_CHUNK" ]; then per="$FSX_CHUNK"; fi
        while [ "$left" -gt 0 ]; do
            n=$((left < per ? left : per))
            seed="$2"
            [ "$per" -lt "$FSX_OPS" ] && seed=$(($2 * 100000 + chunk))
            rm -f "$file"
            echo "== fsx -N $n -S $seed $cfg" >> "$art/fsx.log"
            if [ "$1" = odirect ]; then
                LD_PRELOAD="$shim" FSX_ODIRECT_PATH="$file" NO_COLOR=1 fsx -N "$n" -S "$seed" -f "$cfg" -P "$art" "$file"
            else
                NO_COLOR=1 fsx -N "$n" -S "$seed" -f "$cfg" -P "$art" "$file"
            fi >> "$art/fsx.log" 2>&1 || return 1
            grep -q 'All operations completed A-OK' <(tail -2 "$art/fsx.log") || return 1
            left=$((left - n)); chunk=$((chunk + 1))
        done
    }
    for v in "${variant_list[@]}"; do for s in "${seed_list[@]}"; do runs+=("$v:$s"); done; done
    local i=0 r
    while [ $i -lt ${#runs[@]} ] || [ ${#pids[@]} -gt 0 ]; do
        while [ $i -lt ${#runs[@]} ] && [ ${#pids[@]} -lt "$FSX_JOBS" ]; do
            r="${runs[$i]}"
            run_one "${r%%:*}" "${r##*:}" &
            pids+=("$!:$r")
            i=$((i + 1))
        done
        wait -n 2>/dev/null || true
        local still=() p
        for p in "${pids[@]}"; do
            if kill -0 "${p%%:*}" 2>/dev/null; then still+=("$p"); continue; fi
            wait "${p%%:*}"; local rc=$? name="${p#*:}"
            name="${name/:/-}"
            if [ $rc -eq 0 ]; then
                total_ops=$((total_ops + FSX_OPS))
            else
                fail=$((fail + 1))
                printf '    fsx %s (seed %s) FAILED, exit %s; last lines of %s:\n' "${name%-*}" "${name##*-}" "$rc" "$LOGS/fsx/$name/fsx.log" >&2
                tail -5 "$LOGS/fsx/$name/fsx.log" | sed 's/^/      /' >&2
            fi
        done
        pids=("${still[@]+"${still[@]}"}")
    done
    local detail="${#runs[@]} runs ($FSX_VARIANTS x seeds $FSX_SEEDS), $FSX_OPS ops each, $total_ops ops passed, $fail runs failed"
    if [ $fail -eq 0 ]; then record fsx PASS "$detail" $((SECONDS - t0)); else record fsx FAIL "$detail" $((SECONDS - t0)); fi
    rm -rf "${MNT:?}/fsx"
}

fio_errors() { # JSON: prints the total of the jobs' error codes, or "bad" if unreadable
    python3 -c 'import json,sys
try: print(sum(j.get("error",0) for j in json.load(open(sys.argv[1]))["jobs"]))
except Exception: print("bad")' "$1"
}

run_fio_verify() {
    local t0=$SECONDS dir="$MNT/fio-verify" job="$ROOT/bench/fio/verify.fio"
    mkdir -p "$dir"
    # fio keeps its verify state files in its working directory: the logs.
    (cd "$LOGS" && VERIFY_SIZE="$VERIFY_SIZE" fio --directory="$dir" --do_verify=0 --output-format=json \
        --output="$LOGS/fio-verify-write.json" "$job" > "$LOGS/fio-verify-write.log" 2>&1)
    local wrc=$? werr
    werr="$(fio_errors "$LOGS/fio-verify-write.json")"
    if [ $wrc -ne 0 ] || [ "$werr" != 0 ]; then
        record fio-verify FAIL "write phase: exit $wrc, job errors $werr, see $LOGS/fio-verify-write.log" $((SECONDS - t0))
        rm -rf "$dir"; return
    fi
    if ! remount_target; then
        record fio-verify FAIL "remount of $MNT between write and verify failed" $((SECONDS - t0)); return
    fi
    (cd "$LOGS" && VERIFY_SIZE="$VERIFY_SIZE" fio --directory="$dir" --verify_only=1 --output-format=json \
        --output="$LOGS/fio-verify-read.json" "$job" > "$LOGS/fio-verify-read.log" 2>&1)
    local vrc=$? verr
    verr="$(fio_errors "$LOGS/fio-verify-read.json")"
    local detail="6 jobs x $VERIFY_SIZE (seq 1M, rand 4K, O_DIRECT rand 64K), crc32c, verified after remount"
    [ "$TARGET" = tmpfs ] && detail="${detail/after remount/without remount (tmpfs)}"
    if [ $vrc -eq 0 ] && [ "$verr" = 0 ]; then record fio-verify PASS "$detail: 0 errors" $((SECONDS - t0))
    else
        grep -h -E 'verify:|bad|error' "$LOGS/fio-verify-read.log" | head -5 | sed 's/^/    /' >&2
        record fio-verify FAIL "$detail: exit $vrc, job errors $verr, see $LOGS/fio-verify-read.log" $((SECONDS - t0))
    fi
    rm -rf "$dir"
}

run_personalities() {
    local t0=$SECONDS p fail=0 done_list=""
    for p in varmail webserver fileserver; do
        mkdir -p "$MNT/$p"
        timeout 900 fio --directory="$MNT/$p" --output-format=json --output="$LOGS/$p.json" \
            "$ROOT/bench/fio/$p.fio" > "$LOGS/$p.log" 2>&1
        local rc=$? errs
        errs="$(fio_errors "$LOGS/$p.json")"
        if [ $rc -eq 0 ] && [ "$errs" = 0 ]; then done_list="$done_list $p:ok"
        else
            fail=$((fail + 1)); done_list="$done_list $p:FAIL(exit $rc, errors $errs)"
            tail -5 "$LOGS/$p.log" | sed "s/^/    $p: /" >&2
        fi
        rm -rf "${MNT:?}/$p"
    done
    if [ $fail -eq 0 ]; then record personalities PASS "${done_list# }" $((SECONDS - t0))
    else record personalities FAIL "${done_list# }" $((SECONDS - t0)); fi
}

# Each stressor for STRESS_SECS seconds, one instance, in its own directory on the target,
# STRESS_JOBS stressors at a time (default 1: each alone); a stressor passes when stress-ng
# exits 0 (exit 2: a stressor failed, 3: out of resources, 4: not implemented — all count as
# failures here, since ext4 runs every one). The detail lists each stressor's bogo ops/s, the
# figure stress-ng reports for comparisons (comparable only between runs with the same
# --stress-jobs).
run_stressng() {
    local t0=$SECONDS st fail=0 out=() list
    IFS=, read -r -a list <<< "$STRESSORS"
    mkdir -p "$LOGS/stress-ng"
    stress_one() { # STRESSOR: its exit status goes to LOGS/stress-ng/STRESSOR.rc
        local st="$1" dir="$MNT/stress-$1" log="$LOGS/stress-ng/$1.log" yaml="$LOGS/stress-ng/$1.yaml"
        mkdir -p "$dir"
        timeout $((STRESS_SECS * 6 + 60)) stress-ng --"$st" 1 --timeout "${STRESS_SECS}s" --temp-path "$dir" \
            --metrics-brief --yaml "$yaml" > "$log" 2>&1
        echo $? > "$LOGS/stress-ng/$st.rc"
        rm -rf "$dir"
    }
    for st in "${list[@]}"; do
        rm -f "$LOGS/stress-ng/$st.rc"
        while [ "$(jobs -rp | wc -l)" -ge "$STRESS_JOBS" ]; do wait -n; done
        stress_one "$st" &
    done
    wait
    for st in "${list[@]}"; do
        local log="$LOGS/stress-ng/$st.log" yaml="$LOGS/stress-ng/$st.yaml" rc rate
        rc="$(cat "$LOGS/stress-ng/$st.rc" 2>/dev/null)"
        rate="$(awk -v n="$st" '$1 == "-" && $2 == "stressor:" {cur = $3} cur == n && $1 == "bogo-ops-per-second-real-time:" {printf "%.1f", $2; exit}' "$yaml" 2>/dev/null)"
        if [ "$rc" = 0 ]; then out+=("$st:${rate:-?}")
        else
            fail=$((fail + 1)); out+=("$st:FAIL(exit ${rc:-?})")
            grep -E 'fail|error|FAIL' "$log" | head -5 | sed "s/^/    $st: /" >&2
        fi
    done
    local detail="${#list[@]} stressors x ${STRESS_SECS}s, $STRESS_JOBS at a time (bogo ops/s): ${out[*]}"
    if [ $fail -eq 0 ]; then record stress-ng PASS "$detail" $((SECONDS - t0))
    else record stress-ng FAIL "$detail" $((SECONDS - t0)); fi
}

for s in "${step_list[@]}"; do
    case "$s" in
        stress-ng) run_stressng ;;
        pjdfstest)
            run_pjdfstest pjdfstest
            [ "$TARGET" = numaio ] && run_pjdfstest_server_checks ;;
        fsx) run_fsx ;;
        fio-verify) run_fio_verify ;;
        personalities) run_personalities ;;
    esac
done

echo
echo "== conformance summary: target $TARGET$([ "$TARGET" = bindfs ] && echo " over $BACKING") ($(uname -r))"
status=0
for i in "${!names[@]}"; do
    printf '%-16s %-5s %5ss  %s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}" "${details[$i]}"
    [ "${results[$i]}" = PASS ] || status=1
done
if [ -n "$JSON" ]; then
    {
        printf '{"target":"%s","backing":"%s","kernel":"%s","fsx_ops":%s,"fsx_seeds":[%s],"passed":%s,"steps":[' \
            "$TARGET" "$([ "$TARGET" = bindfs ] && echo "$BACKING")" "$(uname -r)" "$FSX_OPS" "$FSX_SEEDS" \
            "$([ $status -eq 0 ] && echo true || echo false)"
        for i in "${!names[@]}"; do
            [ "$i" -gt 0 ] && printf ','
            printf '{"step":"%s","result":"%s","seconds":%s,"detail":"%s"}' "${names[$i]}" "${results[$i]}" \
                "${secs[$i]}" "$(printf '%s' "${details[$i]}" | sed 's/\\/\\\\/g; s/"/\\"/g')"
        done
        printf ']}\n'
    } > "$JSON" || die "cannot write $JSON"
fi
if [ $status -eq 0 ]; then echo "ALL PASSED"; else echo "SOME STEPS FAILED"; fi
exit $status
