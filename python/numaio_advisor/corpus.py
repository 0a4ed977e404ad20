"""The corpus: one JSON line per run, measured (``numaio advise collect``) or modelled.

A record holds ``source`` ("measured" or "modelled"), ``machine``, ``workload`` (an id that
groups the runs of one workload shape), ``features`` (see ``features.WORKLOAD_FEATURES``),
``settings`` (see ``grid.SETTINGS``) and ``throughput`` in bytes/s.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from importlib import resources

from . import grid
from .errors import AdviceError
from .features import WORKLOAD_FEATURES, bench_features

SOURCES = ("measured", "modelled")


def shipped_corpus_path():
    return str(resources.files("numaio_advisor") / "data" / "corpus.jsonl")


def _check(rec, where):
    if not isinstance(rec, dict):
        raise AdviceError(f"{where}: not a JSON object")
    for k in ("workload", "features", "settings", "throughput"):
        if k not in rec:
            raise AdviceError(f"{where}: record has no {k!r}")
    if rec.get("source", "measured") not in SOURCES:
        raise AdviceError(f"{where}: source must be one of {', '.join(SOURCES)}")
    missing = [f for f in WORKLOAD_FEATURES if f not in rec["features"]]
    if missing:
        raise AdviceError(f"{where}: record lacks features {', '.join(missing)}")
    try:
        t = float(rec["throughput"])
        vals = [float(rec["features"][f]) for f in WORKLOAD_FEATURES]
    except (TypeError, ValueError):
        raise AdviceError(f"{where}: throughput and features must be numbers")
    if not (t > 0 and math.isfinite(t)) or not all(math.isfinite(v) for v in vals):
        raise AdviceError(f"{where}: throughput must be > 0 and features finite")
    rec.setdefault("source", "measured")
    rec["settings"] = grid.normalise(rec["settings"])
    return rec


def load(path, source=None):
    """Records of a JSON-lines file; ``source`` forces (and checks) their label."""
    if not os.path.exists(path):
        raise AdviceError(f"{path}: corpus not found; collect one with `numaio advise collect "
                          f"--out {path}` or leave out --corpus to use the shipped one")
    recs = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise AdviceError(f"{path}: line {n}: bad JSON ({e.msg})")
                rec = _check(rec, f"{path}: line {n}")
                if source and rec["source"] != source:
                    raise AdviceError(f"{path}: line {n}: source is {rec['source']!r}, "
                                      f"expected {source!r}")
                recs.append(rec)
    except (OSError, UnicodeDecodeError) as e:
        raise AdviceError(f"{path}: cannot read: {e}")
    return recs


def machine_label():
    """Where the runs came from: host, CPU, NUMA nodes, load."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        nodes = len([d for d in os.listdir("/sys/devices/system/node") if d.startswith("node")
                     and d[4:].isdigit()])
    except OSError:
        nodes = 1
    return f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, {nodes} NUMA node(s)"


def find_numaio():
    exe = os.environ.get("NUMAIO_BIN") or shutil.which("numaio")
    if exe and not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise AdviceError(f"{exe}: not an executable numaio binary (from NUMAIO_BIN); build "
                          "it with `cargo build --release -p numaio`")
    if not exe:
        raise AdviceError("cannot find the numaio binary: set NUMAIO_BIN or put numaio on PATH "
                          "(build it with `cargo build --release -p numaio`)")
    return exe


def _progress(total, initial):
    try:
        from tqdm import tqdm
        return tqdm(total=total, initial=initial, unit="run", file=sys.stderr)
    except ImportError:
        return None


def collect(out, workdir, per_workload=19, duration=0.5, workloads=None, note="", numaio=None,
            echo=print):
    """Run the grid with ``numaio bench`` and append one record per run to ``out``.

    Runs already in ``out`` are skipped, so an interrupted collection resumes where it stopped.
    """
    numaio = numaio or find_numaio()
    shapes = {k: v for k, v in grid.WORKLOADS.items() if not workloads or k in workloads}
    if not shapes:
        raise AdviceError(f"no workload matches; known: {', '.join(grid.WORKLOADS)}")
    done = set()
    if os.path.exists(out):
        for r in load(out):
            done.add((r["workload"], grid.setting_key(r["settings"])))
    plan = [(w, s) for w in shapes for s in grid.sample_settings(per_workload)]
    todo = [(w, s) for w, s in plan if (w, grid.setting_key(s)) not in done]
    os.makedirs(workdir, exist_ok=True)
    machine = machine_label()
    bar = _progress(len(plan), len(plan) - len(todo))
    failed = 0
    with open(out, "a", encoding="utf-8") as f:
        for w, s in todo:
            workload, bs, size = shapes[w]
            path = os.path.join(workdir, f"advise-{size >> 20}M.dat")
            args = [numaio] + grid.bench_args(s, workload, bs, size, path, duration)
            try:
                p = subprocess.run(args, capture_output=True, text=True)
            except OSError as e:
                raise AdviceError(f"running {numaio}: {e.strerror}")
            if p.returncode != 0:
                failed += 1
                echo(f"run failed ({' '.join(args[1:])}): {p.stderr.strip()}", file=sys.stderr)
            else:
                bench = json.loads(p.stdout)
                rec = {
                    "source": "measured",
                    "machine": machine,
                    "note": note,
                    "loadavg_1m": os.getloadavg()[0],
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "workload": w,
                    "features": bench_features(workload, bs, size),
                    "settings": s,
                    "throughput": bench["bytes_per_s"],
                    "bench": {k: bench.get(k) for k in ("ops", "duration_s", "hit_ratio",
                                                         "buffer_local_fraction", "slices")},
                }
                f.write(json.dumps(rec) + "\n")
                f.flush()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return len(plan), len(todo), failed
