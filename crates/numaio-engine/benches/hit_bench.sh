#!/bin/bash
# The hit path against its limits, before and after a change, in one run: each round runs
# the old binary, the new one and the peers (memcpy, kernel pread, quick_cache, foyer) back
# to back on a fully cached file on tmpfs, so a loaded host slows all of them alike.
# Usage: hit_bench.sh OLD_NUMAIO NEW_NUMAIO [ROUNDS] [SECS] > out.txt
# Summary: benches/hit_summarize.py out.txt
set -u
B=$1; A=$2; R=${3:-5}; D=${4:-2}
F=${HIT_BENCH_FILE:-/dev/shm/numaio-hitbench.dat}
common=(--file "$F" --size 256M --allow-device --duration "$D" --json)
source "$(dirname "$0")/bench_lib.sh"

for r in $(seq 1 "$R"); do
  echo "# round $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  for t in 1 2; do
    bench_run "r$r pread4k-t$t before" "$B" --target engine --bs 4K --threads "$t"
    bench_run "r$r pread4k-t$t after" "$A" --target engine --bs 4K --threads "$t"
    bench_run "r$r pread4k-t$t memcpy" "$A" --target memcpy --bs 4K --threads "$t"
    bench_run "r$r pread4k-t$t kernel" "$A" --target kernel --bs 4K --threads "$t"
  done
  bench_run "r$r get4k-t1 before" "$B" --target engine --api get --bs 4K --threads 1
  bench_run "r$r get4k-t1 after" "$A" --target engine --api get --bs 4K --threads 1
  bench_run "r$r get4k-t1 quick" "$A" --target quick-cache --bs 4K --threads 1
  bench_run "r$r get4k-t1 foyer" "$A" --target foyer --bs 4K --threads 1
  bench_run "r$r get4k-t2 before" "$B" --target engine --api get --bs 4K --threads 2
  bench_run "r$r get4k-t2 after" "$A" --target engine --api get --bs 4K --threads 2
  bench_run "r$r get4k-t2 quick" "$A" --target quick-cache --bs 4K --threads 2
  bench_run "r$r pread1m-t1 before" "$B" --target engine --bs 1M --threads 1
  bench_run "r$r pread1m-t1 after" "$A" --target engine --bs 1M --threads 1
  bench_run "r$r pread1m-t1 memcpy" "$A" --target memcpy --bs 1M --threads 1
  bench_run "r$r pread1m-t1 kernel" "$A" --target kernel --bs 1M --threads 1
done
