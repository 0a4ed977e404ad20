#!/usr/bin/env python3
"""Summarises hit_bench.sh output: the median rate of each binary or peer per case, and the
median (min-max, n) of the per-round ratios of `after` to each other one."""
import collections
import statistics as st
import sys

rates = collections.defaultdict(dict)  # case -> variant -> {round: ops/s}
for line in open(sys.argv[1]):
    p = line.split()
    if line.startswith("#") or len(p) < 4:
        if "FAIL" in line:
            print(line.strip())
        continue
    rates[p[1]].setdefault(p[2], {})[p[0]] = float(p[3])


def fmt(x):
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.0f} k" if x >= 1e3 else f"{x:.0f}"


for case, vs in rates.items():
    print(f"== {case}: " + ", ".join(f"{k} {fmt(st.median(v.values()))}/s" for k, v in vs.items()))
    for base in ("after", "before"):
        if base not in vs:
            continue
        for peer, pv in vs.items():
            if peer in ("after", base):
                continue
            rs = [vs[base][r] / pv[r] for r in vs[base] if r in pv]
            if rs:
                print(f"   {base}/{peer}: {st.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f}, {len(rs)})")
