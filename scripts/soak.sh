#!/usr/bin/env bash
# Long soak of the engine's stress and power-loss tests (the CI runs short versions).
#
#   scripts/soak.sh [HOURS]            default 1 hour
#
# Repeats, until the time is up, with a new seed each round:
#   - tests/stress.rs with NUMAIO_STRESS_SECS=600 (threads against a model under every
#     move-work mode, then random EIO/ENOSPC), plus the fail-the-Nth-I/O loop;
#   - tests/power_loss.rs with 20000 cut points in strict mode (the write-back race's
#     symptoms fail too; NUMAIO_SOAK_STRICT=0 reports them as known bugs instead).
# NUMAIO_SOAK_ROUND_SECS and NUMAIO_SOAK_CUTS change the size of a round; NUMAIO_SOAK_SEED
# the first seed (default: the time).
# Release build (optimised, debug assertions on) so a round does more work. Stops at the first
# failure and prints the command that reproduces it; logs go to target/soak/.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

hours="${1:-1}"
case "$hours" in
    ''|*[!0-9.]*) echo "soak.sh: HOURS must be a number, got '$hours'" >&2; exit 2 ;;
esac
logdir=target/soak
mkdir -p "$logdir"

export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
cargo test --release -p numaio-engine --test stress --test power_loss --no-run || exit 1
# The clock starts after the build; at least one round runs.
end=$(( $(date +%s) + $(awk -v h="$hours" 'BEGIN { printf "%d", h * 3600 }') ))

round_secs="${NUMAIO_SOAK_ROUND_SECS:-600}"
cuts="${NUMAIO_SOAK_CUTS:-20000}"
strict="${NUMAIO_SOAK_STRICT:-1}"
round=0
seed="${NUMAIO_SOAK_SEED:-$(date +%s)}"
while [ "$round" -eq 0 ] || [ "$(date +%s)" -lt "$end" ]; do
    round=$((round + 1))
    s=$((seed + round * 100003))
    log="$logdir/round-$round.log"
    echo "[soak] round $round, seed $s (log $log)"
    if ! NUMAIO_STRESS_SECS=$round_secs NUMAIO_STRESS_SEED=$s \
        cargo test --release -p numaio-engine --test stress -- --nocapture --test-threads=1 \
        >"$log" 2>&1; then
        echo "[soak] stress FAILED in round $round; reproduce with:"
        echo "  NUMAIO_STRESS_SECS=$round_secs NUMAIO_STRESS_SEED=$s cargo test --release -p numaio-engine --test stress -- --nocapture"
        tail -30 "$log"
        exit 1
    fi
    if ! NUMAIO_POWER_CUTS=$cuts NUMAIO_POWER_SEED=$s NUMAIO_POWER_STRICT=$strict \
        cargo test --release -p numaio-engine --test power_loss -- --nocapture \
        >>"$log" 2>&1; then
        echo "[soak] power-loss FAILED in round $round; the failing seed is in $log:"
        grep -E "seed [0-9]+|reproduce" "$log" | tail -5
        exit 1
    fi
    grep -oE "(stress|power-loss|fail-nth): .*" "$log" | sed "s/^/[soak]   /"
done
echo "[soak] $round rounds passed in $hours h"
