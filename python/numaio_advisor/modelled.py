"""Modelled runs: what ``numaio model`` predicts for the corpus grid on multi-node profiles.

The development machines have one NUMA node, so measured runs cannot show what placement does.
``numaio model`` predicts it from a published machine profile. Each of its answers becomes one
corpus record with ``"source": "modelled"`` and the profile's name as ``machine``; the workload
id carries the profile too (``zonfs/randread-4k``), so modelled workloads never share a group
with measured ones.

How a grid setting maps to the model's placement (``MODEL_PLACEMENT``), because the model knows
where data sits and where threads run, not caches or replacement policies:

* ``kernel``: the page cache keeps a file where it was first read (bench loads it from one
  thread), ZonFS's *Single*: ``single``.
* the engine with ``move_work=first-reader``: a reader is moved to the node of the data, so
  every access is local: ``local``.
* the engine otherwise, ``range`` or ``interleave``: the file's blocks are spread over all the
  nodes' slices and every thread reads all of the file, ZonFS's *Fair*: ``fair`` (the model
  cannot tell the two placements apart).

Threads share bench's one data file (``--sharing medium``); the request size is the workload's,
the read fraction 1 for reads and 0 for writes; thread counts go beyond the grid's (``THREADS``)
because on these machines placement matters only with many threads. The engine's policy, block
and cache size do not enter the model and keep their defaults in the modelled runs.
"""

from __future__ import annotations

import json
import os
import subprocess

from . import grid
from .errors import AdviceError
from .features import bench_features

#: Multi-node profiles shipped with numaio whose placement the advisor models by default.
PROFILES = ("zonfs", "adams", "tofalos")
SHARING = "medium"
#: Thread counts modelled: the grid's (sized for a small machine), then up to the scale of the
#: profiles' machines (40 threads in ZonFS's runs), where placement starts to matter.
THREADS = (1, 2, 4, 8, 16, 32)


def label(profile):
    """How a modelled run or advice names itself in every output."""
    return f"modelled ({profile} profile)"


def model_placement(setting):
    s = grid.normalise(setting)
    if s["io"] == "kernel":
        return "single"
    if s["move_work"] == "first-reader":
        return "local"
    return "fair"


def modelled_settings():
    """The settings whose model placement or threads differ: per data path, placement, work
    moving and thread count, the rest at bench's defaults."""
    seen, out = set(), []
    for io in ("direct", "kernel"):
        for placement in grid.SETTINGS["placement"]:
            for move in grid.SETTINGS["move_work"]:
                for threads in THREADS:
                    s = grid.normalise({"io": io, "placement": placement, "move_work": move,
                                        "threads": threads})
                    k = grid.setting_key(s)
                    if k not in seen:
                        seen.add(k)
                        out.append(s)
    return out


def model_args(profile, setting, workload, bs):
    s = grid.normalise(setting)
    return ["model", "--json", "--profile", profile, "--placement", model_placement(s),
            "--sharing", SHARING, "--threads", str(s["threads"]), "--bs", grid.fmt_size(bs),
            "--read-fraction", "1" if "read" in workload else "0"]


def run_model(numaio, args):
    where = f"{numaio} {' '.join(args)}"
    try:
        p = subprocess.run([numaio] + args, capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise AdviceError(f"running {numaio}: {e.strerror}; build it with `cargo build "
                          "--release -p numaio` or set NUMAIO_BIN")
    except subprocess.TimeoutExpired:
        raise AdviceError(f"`{where}` did not answer within 60 s")
    if p.returncode != 0:
        err = p.stderr.strip().splitlines()
        hint = (" (this numaio has no `model` subcommand: rebuild it with `cargo build "
                "--release -p numaio`)" if "unrecognized subcommand" in p.stderr else "")
        raise AdviceError(f"`{where}` failed{hint}: {err[-1] if err else p.returncode}")
    try:
        out = json.loads(p.stdout)
        mb_s = float(out["throughput_mb_s"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise AdviceError(f"`{where}` printed no throughput_mb_s (is it numaio's model?)")
    if not mb_s > 0:
        raise AdviceError(f"`{where}` predicts no throughput ({mb_s} MB/s)")
    return out


def collect_modelled(out, profiles=PROFILES, workloads=None, numaio=None, progress=True):
    """Append the modelled grid to ``out``: every profile × workload shape × modelled setting.

    Records already in ``out`` are skipped, so an interrupted run resumes. Returns (planned,
    run now).
    """
    from .corpus import _progress, find_numaio, load

    numaio = numaio or find_numaio()
    shapes = {k: v for k, v in grid.WORKLOADS.items() if not workloads or k in workloads}
    if not shapes:
        raise AdviceError(f"no workload matches; known: {', '.join(grid.WORKLOADS)}")
    done = set()
    if os.path.exists(out):
        for r in load(out, source="modelled"):
            done.add((r["workload"], grid.setting_key(r["settings"])))
    plan = [(p, w, s) for p in profiles for w in shapes for s in modelled_settings()]
    todo = [(p, w, s) for p, w, s in plan if (f"{p}/{w}", grid.setting_key(s)) not in done]
    bar = _progress(len(plan), len(plan) - len(todo)) if progress else None
    answers = {}
    with open(out, "a", encoding="utf-8") as f:
        for profile, w, s in todo:
            workload, bs, size = shapes[w]
            args = model_args(profile, s, workload, bs)
            # Settings that map to the same model question share its answer.
            if tuple(args) not in answers:
                answers[tuple(args)] = run_model(numaio, args)
            m = answers[tuple(args)]
            rec = {
                "source": "modelled",
                "machine": profile,
                "profile": profile,
                "label": label(profile),
                "workload": f"{profile}/{w}",
                "features": bench_features(workload, bs, size),
                "settings": s,
                "throughput": float(m["throughput_mb_s"]) * 1e6,
                "model": {"args": args[2:], "placement": model_placement(s),
                          "sharing": SHARING, "threads_per_node": m.get("threads_per_node"),
                          "latency_ns": m.get("latency_ns"),
                          "bottlenecks": m.get("bottlenecks")},
            }
            f.write(json.dumps(rec) + "\n")
            f.flush()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return len(plan), len(todo)


def profile_of(rec):
    return rec.get("profile") or rec.get("machine") or "unknown"


def by_profile(records):
    out = {}
    for r in records:
        if r.get("source") == "modelled":
            out.setdefault(profile_of(r), []).append(r)
    return out


def shipped_modelled_path():
    from importlib import resources

    return str(resources.files("numaio_advisor") / "data" / "modelled.jsonl")
