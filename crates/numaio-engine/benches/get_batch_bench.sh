#!/bin/bash
# Zero-copy gets one at a time against get_batch (the batch's index lines fetched together)
# and against quick_cache, in one run: each round runs all of them back to back on a fully
# cached file on tmpfs, so a loaded host slows them alike.
# Usage: get_batch_bench.sh NUMAIO [ROUNDS] [SECS] > out.txt   (summary: hit_summarize.py)
set -u
A=$1; R=${2:-5}; D=${3:-2}
F=${HIT_BENCH_FILE:-/dev/shm/numaio-hitbench.dat}
common=(--file "$F" --size 256M --allow-device --duration "$D" --json --bs 4K)
source "$(dirname "$0")/bench_lib.sh"
run() { local label=$1; shift; bench_run "$label" "$A" "$@"; }
for r in $(seq 1 "$R"); do
  echo "# round $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  for t in 1 2; do
    run "r$r get4k-t$t after" --target engine --api get --threads "$t"
    run "r$r get4k-t$t batch8" --target engine --api get-batch --batch 8 --threads "$t"
    run "r$r get4k-t$t batch32" --target engine --api get-batch --batch 32 --threads "$t"
    run "r$r get4k-t$t quick" --target quick-cache --threads "$t"
  done
done
