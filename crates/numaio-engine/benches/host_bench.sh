#!/usr/bin/env bash
# Host benchmarks of the engine against its peers, each pair in the same run.
# Usage: [REPS=3] host_bench.sh DIR [SECS]; summarize with benches/summarize.py   (needs ~4 GiB free in DIR and fio for the miss path)
# Prints one line per run: LABEL <json from numaio bench --json or fio>.
set -euo pipefail
DIR=${1:?usage: host_bench.sh DIR [SECS]}
T=${2:-3}
N=${NUMAIO:-target/release/numaio}
REPS=${REPS:-3}
HOT=$DIR/hot-1g
COLD=$DIR/cold-2g
run() { local label=$1; shift; echo "$label $("$N" bench --json --duration "$T" "$@")"; }

for rep in $(seq 1 "$REPS"); do
# Hit path: 4 KiB random reads from a fully cached 1 GiB file.
for th in 1 2; do
  run "r$rep.hit.kernel.pread.t$th" --target kernel --workload randread --bs 4K --threads $th --size 1G --file "$HOT"
  run "r$rep.hit.engine.pread.t$th" --target engine --workload randread --bs 4K --threads $th --size 1G --file "$HOT"
  run "r$rep.hit.engine.get.t$th" --target engine --api get --workload randread --bs 4K --threads $th --size 1G --file "$HOT"
done
run "r$rep.hit.engine.get_touch.t1" --target engine --api get --touch --workload randread --bs 4K --threads 1 --size 1G --file "$HOT"
# 1 MiB reads from the cache vs a memcpy loop over the same bytes.
for th in 1 2; do
  run "r$rep.big.memcpy.t$th" --target memcpy --workload randread --bs 1M --threads $th --size 1G --file "$HOT"
  run "r$rep.big.engine.pread.t$th" --target engine --workload randread --bs 1M --threads $th --size 1G --file "$HOT"
  run "r$rep.big.kernel.pread.t$th" --target kernel --workload randread --bs 1M --threads $th --size 1G --file "$HOT"
done
# Lock contention: every hit reaches split-lru (no gating), LRU_FACTOR 1 vs 8, 1 vs 2 threads.
for f in 1 8; do for th in 1 2; do
  run "r$rep.lru.f$f.t$th" --target engine --policy split-lru --lru-factor $f --no-hit-gating --workload randread --bs 4K --threads $th --size 64M --file "$HOT"
done; done
# Index layout: per-bucket locks vs 64 sharded RwLock<HashMap>s.
for ix in buckets sharded:64; do for th in 1 2; do
  run "r$rep.index.$ix.t$th" --target engine --api get --index $ix --workload randread --bs 4K --threads $th --size 1G --file "$HOT"
done; done
# Miss path: a 2 GiB file through a 256 MiB cache, O_DIRECT, vs fio in the same run.
run "r$rep.miss.engine.randread4k.qd32" --target engine --workload randread --bs 4K --threads 32 --size 2G --cache 64M --warm false --file "$COLD"
if command -v fio >/dev/null; then
  echo "r$rep.miss.fio.randread4k.qd32 $(fio --name=r --filename="$COLD" --rw=randread --bs=4k --size=2G --ioengine=io_uring --direct=1 --iodepth=32 --runtime="$T" --time_based --output-format=json | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(json.dumps({"ops_per_s": j["iops"], "bytes_per_s": j["bw_bytes"]}))')"
fi
run "r$rep.miss.engine.seqread1m" --target engine --workload seqread --bs 1M --threads 1 --size 2G --cache 64M --warm false --file "$COLD"
run "r$rep.miss.engine_b64k.seqread1m" --target engine --block-size 64K --workload seqread --bs 1M --threads 1 --size 2G --cache 64M --warm false --file "$COLD"
run "r$rep.miss.engine_ra.seqread1m" --target engine --readahead --workload seqread --bs 1M --threads 1 --size 2G --cache 64M --warm false --file "$COLD"
if command -v fio >/dev/null; then
  echo "r$rep.miss.fio.seqread1m $(fio --name=s --filename="$COLD" --rw=read --bs=1M --size=2G --ioengine=io_uring --direct=1 --iodepth=1 --runtime="$T" --time_based --output-format=json | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(json.dumps({"ops_per_s": j["iops"], "bytes_per_s": j["bw_bytes"]}))')"
fi
# Writes through a cache smaller than the data (write-back, coalescing) vs the page cache.
run "r$rep.write.engine.seqwrite1m" --target engine --workload seqwrite --bs 1M --threads 1 --size 1G --cache 256M --overwrite --file "$DIR/w-1g"
run "r$rep.write.kernel.seqwrite1m" --target kernel --workload seqwrite --bs 1M --threads 1 --size 1G --overwrite --file "$DIR/w-1g"
run "r$rep.write.engine.randwrite4k.t2" --target engine --workload randwrite --bs 4K --threads 2 --size 1G --cache 256M --overwrite --file "$DIR/w-1g"
run "r$rep.write.kernel.randwrite4k.t2" --target kernel --workload randwrite --bs 4K --threads 2 --size 1G --overwrite --file "$DIR/w-1g"
done
