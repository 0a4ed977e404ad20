#!/usr/bin/env bash
# The miss path against fio, interleaved: each repetition runs every engine/fio pair back to
# back on the same cold 2 GiB file (O_DIRECT, so neither side is served by the page cache).
# Usage: [REPS=5] [SECS=3] [NUMAIO=target/release/numaio] [BASE=path/to/older/numaio]
#        miss_bench.sh FILE   (FILE: at least 2 GiB, on a real device)
# With BASE, every engine run is repeated with that binary in the same repetition (labels
# "base_..."), so before and after are measured in one run.
# Prints one line per run: LABEL OPS_PER_S BYTES_PER_S CPU_US_PER_OP [HITS MISSES]
# (CPU_US_PER_OP: user + system CPU time of the whole process per operation, which a loaded
# host disturbs less than throughput). Summarize with miss_summarize.py.
set -euo pipefail
F=${1:?usage: miss_bench.sh FILE}
T=${SECS:-3}
N=${NUMAIO:-target/release/numaio}
REPS=${REPS:-5}
CPU=$(mktemp); OUT=$(mktemp); trap 'rm -f "$CPU" "$OUT"' EXIT
eng() {
  local bin=$1 label=$2; shift 2
  /usr/bin/time -f "%U %S" -o "$CPU" "$bin" bench --json --target engine --file "$F" --size 2G --cache 64M --warm false --duration "$T" "$@" > "$OUT"
  echo "$label $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); u,s=map(float,open(sys.argv[2]).read().split()[-2:]); n=j["ops_per_s"]*float(sys.argv[3]); print(round(j["ops_per_s"]), round(j["bytes_per_s"]), round((u+s)*1e6/max(n,1),2), j["hits"], j["misses"])' "$OUT" "$CPU" "$T")"
}
fio_run() {
  local label=$1; shift
  /usr/bin/time -f "%U %S" -o "$CPU" fio --name=m --filename="$F" --size=2G --ioengine=io_uring --direct=1 --runtime="$T" --time_based --output-format=json "$@" > "$OUT"
  echo "$label $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]["read"]; u,s=map(float,open(sys.argv[2]).read().split()[-2:]); n=j["total_ios"]; print(round(j["iops"]), round(j["bw_bytes"]), round((u+s)*1e6/max(n,1),2))' "$OUT" "$CPU")"
}
bins=("engine:$N")
[ -n "${BASE:-}" ] && bins+=("base:$BASE")
for rep in $(seq 1 "$REPS"); do
  fio_run "r$rep.fio.randread4k.qd32" --rw=randread --bs=4k --iodepth=32
  for b in "${bins[@]}"; do
    name=${b%%:*} bin=${b#*:}
    eng "$bin" "r$rep.${name}_async.randread4k.qd32" --workload randread --bs 4K --threads 1 --api async --iodepth 32
    eng "$bin" "r$rep.${name}_batch.randread4k.b32" --workload randread --bs 4K --threads 1 --batch 32
  done
  fio_run "r$rep.fio.seqread1m.qd1" --rw=read --bs=1M --iodepth=1
  for b in "${bins[@]}"; do
    name=${b%%:*} bin=${b#*:}
    eng "$bin" "r$rep.${name}_pread.seqread1m" --workload seqread --bs 1M --threads 1
    eng "$bin" "r$rep.${name}_async.seqread1m.qd1" --workload seqread --bs 1M --threads 1 --api async --iodepth 1
  done
done
