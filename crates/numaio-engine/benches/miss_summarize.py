#!/usr/bin/env python3
"""Medians (min-max) over repetitions of miss_bench.sh output, and each engine run's ratio to
the fio run of the same repetition (median of per-repetition ratios)."""
import re, statistics, sys
from collections import defaultdict

runs = defaultdict(dict)  # label -> rep -> bytes/s
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3 or not re.match(r"^r\d+\.", f[0]):
        continue
    rep, label = f[0].split(".", 1)
    runs[label][rep] = (float(f[1]), float(f[2]), float(f[3]) if len(f) > 3 else float("nan"))

def peer(label):
    return "fio.randread4k.qd32" if "randread4k" in label else "fio.seqread1m.qd1"

print(f"{'run':34} {'reps':>4} {'median ops/s':>13} {'MB/s':>8} {'CPU us/op':>9}  {'/ fio (min-max)':>22}")
for label, reps in runs.items():
    ops = [v[0] for v in reps.values()]
    mbs = statistics.median(v[1] for v in reps.values()) / 1e6
    cpu = statistics.median(v[2] for v in reps.values())
    line = f"{label:34} {len(ops):4} {statistics.median(ops):13.0f} {mbs:8.1f} {cpu:9.2f}"
    if not label.startswith("fio."):
        p = runs.get(peer(label), {})
        rs = [reps[r][1] / p[r][1] for r in reps if r in p and p[r][1]]
        if rs:
            line += f"  {statistics.median(rs):6.2f}x ({min(rs):.2f}-{max(rs):.2f})"
    print(line)
