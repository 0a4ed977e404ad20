"""The settable parameters, the grid the advisor searches, and the corpus's workload shapes.

A setting is a dict with every key of ``SETTINGS``. ``io`` chooses the data path: the numaio
engine with O_DIRECT (``direct``), the engine over buffered I/O (``buffered``), or the kernel
page cache (``kernel``, where the engine's parameters do not apply and are kept at their
defaults so that each kernel setting appears once).
"""

from __future__ import annotations

import itertools
import math
import random

#: Settable parameter -> values searched (the first value is numaio bench's default).
SETTINGS = {
    "io": ["direct", "buffered", "kernel"],
    "policy": ["arc", "split-lru", "clock"],
    "placement": ["range", "interleave"],
    "move_work": ["none", "first-reader"],
    "threads": [1, 2, 4],
    "block_size": [4096, 65536],
    "cache_frac": [1.06, 0.25],
}

CATEGORICAL = ("io", "policy", "placement", "move_work")
NUMERIC = ("threads", "block_size", "cache_frac")

#: numaio bench's defaults (the cache holds the file plus 1/16); threads come from the workload.
DEFAULT = {"io": "direct", "policy": "arc", "placement": "range", "move_work": "none",
           "threads": 1, "block_size": 4096, "cache_frac": 1.06}

#: Workload shapes of the shipped corpus: id -> (bench workload, request size, data size).
WORKLOADS = {
    "randread-4k": ("randread", 4096, 48 << 20),
    "randread-64k": ("randread", 65536, 48 << 20),
    "seqread-1m": ("seqread", 1 << 20, 48 << 20),
    "seqread-4k": ("seqread", 4096, 48 << 20),
    "randwrite-4k": ("randwrite", 4096, 48 << 20),
    "randwrite-64k": ("randwrite", 65536, 48 << 20),
    "seqwrite-1m": ("seqwrite", 1 << 20, 48 << 20),
    "randread-4k-big": ("randread", 4096, 192 << 20),
}


def normalise(setting):
    """Fill missing keys from ``DEFAULT`` and neutralise engine keys on the kernel path."""
    s = dict(DEFAULT)
    s.update({k: v for k, v in setting.items() if k in SETTINGS})
    if s["io"] == "kernel":
        for k in ("policy", "placement", "move_work", "block_size", "cache_frac"):
            s[k] = DEFAULT[k]
    s["threads"] = int(s["threads"])
    s["block_size"] = int(s["block_size"])
    s["cache_frac"] = float(s["cache_frac"])
    return s


def setting_key(s):
    s = normalise(s)
    return tuple(s[k] for k in SETTINGS)


def full_grid():
    """Every distinct setting (engine combinations, plus kernel × threads)."""
    seen, out = set(), []
    for combo in itertools.product(*SETTINGS.values()):
        s = normalise(dict(zip(SETTINGS, combo)))
        k = setting_key(s)
        if k not in seen:
            seen.add(k)
            out.append(s)
    return out


def sample_settings(per_workload, seed=14):
    """The corpus's settings: the default first, then a seeded sample of the grid drawn in turn
    from each data path, so that the few kernel settings are all in it."""
    rng = random.Random(seed)
    by_io = {io: [] for io in SETTINGS["io"]}
    for s in full_grid():
        if setting_key(s) != setting_key(DEFAULT):
            by_io[s["io"]].append(s)
    for group in by_io.values():
        rng.shuffle(group)
    out = [normalise(DEFAULT)]
    while len(out) < per_workload and any(by_io.values()):
        for group in by_io.values():
            if group and len(out) < per_workload:
                out.append(group.pop())
    return out


def encode_settings(s):
    """Numbers for the models: one-hot categoricals, logs of sizes and counts."""
    s = normalise(s)
    row = {}
    for k in CATEGORICAL:
        for v in SETTINGS[k]:
            row[f"{k}={v}"] = 1.0 if s[k] == v else 0.0
    row["threads_log2"] = math.log2(s["threads"])
    row["block_size_log2"] = math.log2(s["block_size"])
    row["cache_frac"] = s["cache_frac"]
    return row


def fmt_size(n):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)


def bench_args(setting, workload, bs, size, path, duration):
    """``numaio bench`` arguments that measure ``setting`` on a workload."""
    s = normalise(setting)
    args = ["bench", "--json", "--workload", workload, "--bs", fmt_size(bs),
            "--size", fmt_size(size), "--file", str(path), "--threads", str(s["threads"]),
            "--duration", str(duration)]
    if "write" in workload:
        args.append("--overwrite")
    if s["io"] == "kernel":
        return args + ["--target", "kernel"]
    cache = max(s["block_size"] * 64, int(size * s["cache_frac"]))
    cache -= cache % s["block_size"]
    args += ["--target", "engine", "--policy", s["policy"], "--placement", s["placement"],
             "--move-work", s["move_work"], "--block-size", fmt_size(s["block_size"]),
             "--cache", str(cache)]
    if s["io"] == "buffered":
        args.append("--no-direct")
    return args


def engine_settings_text(setting):
    """How to apply a setting, in words and flags."""
    s = normalise(setting)
    if s["io"] == "kernel":
        return f"kernel page cache (buffered I/O, no engine), {s['threads']} thread(s)"
    return (f"engine: --policy {s['policy']} --placement {s['placement']} --move-work "
            f"{s['move_work']} --block-size {fmt_size(s['block_size'])} --cache "
            f"{s['cache_frac']:g}x data{' --no-direct' if s['io'] == 'buffered' else ''}, "
            f"{s['threads']} thread(s)")
