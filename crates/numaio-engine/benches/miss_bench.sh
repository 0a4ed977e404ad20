#!/usr/bin/env bash
# The miss path against fio, interleaved: each repetition runs every engine/fio pair back to
# back on the same cold 2 GiB file (O_DIRECT, so neither side is served by the page cache).
# Usage: [REPS=5] [SECS=3] miss_bench.sh FILE   (FILE: at least 2 GiB, on a real device)
# Prints one line per run: LABEL OPS_PER_S BYTES_PER_S.
set -euo pipefail
F=${1:?usage: miss_bench.sh FILE}
T=${SECS:-3}
N=${NUMAIO:-target/release/numaio}
REPS=${REPS:-5}
eng() {
  local label=$1; shift
  echo "$label $("$N" bench --json --target engine --file "$F" --size 2G --cache 64M --warm false --duration "$T" "$@" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["ops_per_s"]), round(j["bytes_per_s"]), j["hits"], j["misses"])')"
}
fio_run() {
  local label=$1; shift
  echo "$label $(fio --name=m --filename="$F" --size=2G --ioengine=io_uring --direct=1 --runtime="$T" --time_based --output-format=json "$@" |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(round(j["iops"]), round(j["bw_bytes"]))')"
}
for rep in $(seq 1 "$REPS"); do
  fio_run "r$rep.fio.randread4k.qd32" --rw=randread --bs=4k --iodepth=32
  eng "r$rep.engine_async.randread4k.qd32" --workload randread --bs 4K --threads 1 --api async --iodepth 32
  fio_run "r$rep.fio.seqread1m.qd1" --rw=read --bs=1M --iodepth=1
  eng "r$rep.engine_pread.seqread1m" --workload seqread --bs 1M --threads 1
  eng "r$rep.engine_async.seqread1m.qd1" --workload seqread --bs 1M --threads 1 --api async --iodepth 1
done
