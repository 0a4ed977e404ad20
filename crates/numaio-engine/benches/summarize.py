#!/usr/bin/env python3
"""Medians over repetitions of host_bench.sh output, and the ratios reported in docs/engine.md."""
import json, re, statistics, sys
from collections import defaultdict

runs = defaultdict(list)
for line in open(sys.argv[1]):
    label, _, js = line.partition(" ")
    try:
        j = json.loads(js)
    except ValueError:
        continue
    runs[re.sub(r"^r\d+\.", "", label)].append(j)

def med(label, key="ops_per_s"):
    v = [r[key] for r in runs.get(label, []) if r.get(key) is not None]
    return statistics.median(v) if v else float("nan")

print(f"{'run':40} {'reps':>4} {'median ops/s':>14} {'median MB/s':>12} {'hit ratio':>9}")
for label in runs:
    print(f"{label:40} {len(runs[label]):4} {med(label):14.0f} {med(label,'bytes_per_s')/1e6:12.1f} {med(label,'hit_ratio'):9.3f}")

def ratio(a, b, key="ops_per_s"):
    # median of per-repetition ratios (each pair taken in the same repetition)
    xs = [x[key] / y[key] for x, y in zip(runs.get(a, []), runs.get(b, [])) if y.get(key)]
    return statistics.median(xs) if xs else float("nan")

print()
for t in (1, 2):
    print(f"hit 4K t{t}: engine pread / kernel pread = {ratio(f'hit.engine.pread.t{t}', f'hit.kernel.pread.t{t}'):.2f}")
    print(f"hit 4K t{t}: engine get / kernel pread   = {ratio(f'hit.engine.get.t{t}', f'hit.kernel.pread.t{t}'):.2f}")
    print(f"1M t{t}: engine pread / memcpy = {ratio(f'big.engine.pread.t{t}', f'big.memcpy.t{t}'):.2f}; kernel / memcpy = {ratio(f'big.kernel.pread.t{t}', f'big.memcpy.t{t}'):.2f}")
for f in (1, 8):
    print(f"split-lru f{f}: 2 threads / 1 thread = {ratio(f'lru.f{f}.t2', f'lru.f{f}.t1'):.2f}")
print(f"split-lru 2 threads: f8 / f1 = {ratio('lru.f8.t2', 'lru.f1.t2'):.2f}")
for t in (1, 2):
    print(f"index t{t}: buckets / sharded64 = {ratio(f'index.buckets.t{t}', f'index.sharded:64.t{t}'):.2f}")
print(f"miss randread 4K QD32: engine / fio = {ratio('miss.engine.randread4k.qd32', 'miss.fio.randread4k.qd32'):.2f}")
print(f"miss seqread 1M: engine / fio = {ratio('miss.engine.seqread1m', 'miss.fio.seqread1m'):.2f}; with readahead = {ratio('miss.engine_ra.seqread1m', 'miss.fio.seqread1m'):.2f}")
print(f"miss seqread 1M, 64 KiB cache blocks: engine / fio = {ratio('miss.engine_b64k.seqread1m', 'miss.fio.seqread1m'):.2f}")
print(f"seqwrite 1M: engine / kernel = {ratio('write.engine.seqwrite1m', 'write.kernel.seqwrite1m'):.2f}")
print(f"randwrite 4K t2: engine / kernel = {ratio('write.engine.randwrite4k.t2', 'write.kernel.randwrite4k.t2'):.2f}")
