#!/usr/bin/env bash
# Builds every cargo-fuzz target in fuzz/ and runs each for SECONDS_PER_TARGET (default 10),
# starting from the seed corpus in fuzz/corpus/<target>/. Fails if any target crashes,
# panics, times out on one input or runs out of memory; the input is left in
# fuzz/artifacts/<target>/ (replay it with fuzz/target/<triple>/release/<target> FILE).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]
#
# Environment:
#   FUZZ_TARGETS="cpulist size"  run only these targets
#   FUZZ_SANITIZER=address       build with AddressSanitizer (default none: the targets are
#                                safe Rust, and ASan halves the speed and slows the build)
#   FUZZ_KEEP_GOING=1            libFuzzer fork mode: keep fuzzing after a crash, timeout or
#                                OOM (for long runs), report them all at the end
#   FUZZ_REQUIRED=1              fail instead of skipping when nightly or cargo-fuzz is missing
#   FUZZ_LOG_DIR=DIR             keep each target's libFuzzer log there (default: a temp dir)
#   FUZZ_SEED=N                  libFuzzer's -seed (default: random; test.sh fixes it in CI so
#                                that the gate replays the same mutations and new finds come
#                                from the documented longer runs)
#   FUZZ_RUNS=N                  stop each target after N inputs (libFuzzer's -runs); with
#                                FUZZ_SEED the run is then the same every time, and the
#                                seconds only bound it
#   FUZZ_BUILD_ONLY=1            build the targets and stop (scripts/test.sh builds them
#                                ahead, in the background)
#   FUZZ_JOBS=N                  run N targets at once (default 1); each libFuzzer process
#                                uses one core, so on an otherwise idle machine N = its
#                                number of cores gives the same runs in less time
set -uo pipefail
cd "$(dirname "$0")/../fuzz"
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

secs="${1:-10}"
case "$secs" in '' | *[!0-9]* | 0)
    echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] (a whole number of seconds above 0)" >&2
    exit 2 ;;
esac

skip() {
    if [ "${FUZZ_REQUIRED:-0}" = 1 ]; then echo "fuzz: $1" >&2; exit 1; fi
    echo "SKIPPED: fuzz: $1" >&2
    exit 0
}
cargo +nightly --version >/dev/null 2>&1 ||
    skip "no nightly toolchain (install it: rustup toolchain install nightly)"
cargo +nightly fuzz --version >/dev/null 2>&1 ||
    skip "cargo-fuzz is not installed (install it: cargo install cargo-fuzz --locked)"

sanitizer="${FUZZ_SANITIZER:-none}"
jobs="${FUZZ_JOBS:-1}"
case "$jobs" in '' | *[!0-9]* | 0)
    echo "fuzz: FUZZ_JOBS must be a whole number above 0 (got '$jobs')" >&2
    exit 2 ;;
esac
targets="${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}"
triple="$(rustc +nightly -vV | sed -n 's/^host: //p')"
# One target directory per sanitizer, so switching does not rebuild everything.
tdir="target/$sanitizer"
bindir="$tdir/$triple/release"
logs="${FUZZ_LOG_DIR:-$(mktemp -d)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$logs"

t0=$SECONDS
build() { cargo +nightly fuzz build -s "$sanitizer" --target-dir "$tdir" "$@"; }
if [ -n "${FUZZ_TARGETS:-}" ]; then
    for t in $targets; do build "$t" || { echo "fuzz: build of $t failed" >&2; exit 1; }; done
else
    build || { echo "fuzz: build failed" >&2; exit 1; }
fi
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && { echo "fuzz: built in $((SECONDS - t0)) s"; exit 0; }
echo "fuzz: built in $((SECONDS - t0)) s; running each target for $secs s${FUZZ_RUNS:+ or $FUZZ_RUNS inputs}, $jobs at once (logs in $logs)"

# One target's run; its result (ok or FAIL) goes to $work/<target>.result and its table row
# (and, on failure, the first lines that say why) to $work/<target>.row, written whole last, so
# that the rows print in target order whatever order the runs end in.
run_target() {
    local t="$1"
    rm -rf "artifacts/$t"
    mkdir -p "$work/$t" "artifacts/$t"
    local args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix="artifacts/$t/")
    [ -n "${FUZZ_SEED:-}" ] && args+=(-seed="$FUZZ_SEED")
    [ -n "${FUZZ_RUNS:-}" ] && args+=(-runs="$FUZZ_RUNS")
    [ "${FUZZ_KEEP_GOING:-0}" = 1 ] &&
        args+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
    # New inputs go to the scratch directory (first); the seeds are only read.
    local started=$SECONDS
    "$bindir/$t" "${args[@]}" "$work/$t" "corpus/$t" >"$logs/$t.log" 2>&1
    local rc=$?
    local took=$((SECONDS - started > 0 ? SECONDS - started : 1))
    # Plain mode ends with "#N DONE cov: C ft: F ..."; fork mode prints "#N: cov: C ft: F ...".
    local last execs cov ft crashes result=ok
    last="$(grep -E '^#[0-9]+:?[[:space:]]+(DONE|cov:|pulse|NEW|REDUCE|INITED)' "$logs/$t.log" | tail -1)"
    execs="$(grep -m1 'stat::number_of_executed_units' "$logs/$t.log" | awk '{print $2}')"
    [ -n "$execs" ] || execs="$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")"
    cov="$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$last")"
    ft="$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$last")"
    crashes="$(find "artifacts/$t" -type f | wc -l)"
    if [ $rc -ne 0 ] || { [ "${FUZZ_KEEP_GOING:-0}" = 1 ] && [ "$crashes" -gt 0 ]; }; then
        result=FAIL
    fi
    {
        printf '%-16s %-6s %12s %9s %7s %7s\n' "$t" "$result" "${execs:-?}" \
            "$(( ${execs:-0} / took ))" "${cov:-?}" "${ft:-?}"
        if [ "$result" = FAIL ]; then
            grep -m3 -E 'panicked at|^SUMMARY|ERROR: libFuzzer' "$logs/$t.log" | sed 's/^/    /'
            find "artifacts/$t" -type f | head -5 | sed 's/^/    input: fuzz\//'
        fi
    } > "$work/$t.row.tmp"
    echo "$result" > "$work/$t.result"
    mv "$work/$t.row.tmp" "$work/$t.row"
}

fail=0
printf '%-16s %-6s %12s %9s %7s %7s\n' target result execs exec/s cov ft
order=($targets)
shown=0
# Prints the finished rows that are next in target order.
show_rows() {
    while [ $shown -lt ${#order[@]} ] && [ -f "$work/${order[$shown]}.row" ]; do
        cat "$work/${order[$shown]}.row"
        [ "$(cat "$work/${order[$shown]}.result")" = ok ] || fail=1
        shown=$((shown + 1))
    done
}
for t in "${order[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; show_rows; done
    run_target "$t" &
done
wait
show_rows
echo "fuzz: $((SECONDS - t0)) s in all"
[ $fail -eq 0 ] || { echo "fuzz: FAILED (inputs under fuzz/artifacts/)" >&2; exit 1; }
echo "fuzz: no crashes"
