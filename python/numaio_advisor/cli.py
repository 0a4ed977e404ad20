"""The command line: advise (default), collect, validate, features."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

from . import corpus, grid
from .errors import AdviceError
from .features import WORKLOAD_FEATURES, from_ps, load_profile

PROG = "numaio advise"


def _human_rate(bps):
    for unit, m in (("GiB/s", 1 << 30), ("MiB/s", 1 << 20), ("KiB/s", 1 << 10)):
        if bps >= m:
            return f"{bps / m:.1f} {unit}"
    return f"{bps:.0f} B/s"


def _pct(g):
    return f"{g * 100:+.0f}%"


def load_records(args):
    """The measured corpus. Modelled runs are never part of it (see ``modelled_advisors``)."""
    path = args.corpus or corpus.shipped_corpus_path()
    recs = corpus.load(path)
    if not recs:
        raise AdviceError(f"{path}: the corpus is empty; collect runs with `numaio advise "
                          "collect --out FILE`")
    modelled_in = sum(r["source"] == "modelled" for r in recs)
    if modelled_in:
        raise AdviceError(f"{path}: {modelled_in} modelled run(s) in the measured corpus; keep "
                          "them in their own file and pass it with --modelled FILE")
    return recs


def trained_advisor(args):
    from . import cache, pipeline

    path = args.corpus or corpus.shipped_corpus_path()
    recs = load_records(args)
    k = None if args.no_cache else cache.key([path])
    adv = cache.load(k) if k else None
    if adv is None:
        adv = pipeline.train(recs)
        if k:
            cache.store(k, adv)
    return recs, adv


def wanted_profiles(args):
    """Profiles whose modelled advice is asked for: --include-modelled, or every profile of
    the file given with --modelled."""
    if args.include_modelled:
        return [p for p in args.include_modelled.split(",") if p]
    return ["all"] if args.modelled else []


def modelled_advisors(args):
    """(profile, advisor) for each profile asked for, each learned from that profile's
    modelled runs alone."""
    import hashlib

    from . import cache, modelled, pipeline

    wanted = wanted_profiles(args)
    if not wanted:
        return []
    path = args.modelled or modelled.shipped_modelled_path()
    recs = corpus.load(path, source="modelled")
    have = modelled.by_profile(recs)
    if not have:
        raise AdviceError(f"{path}: no modelled runs; generate them with `numaio advise "
                          "collect-modelled --out FILE`")
    profiles = sorted(have) if "all" in wanted else wanted
    missing = [p for p in profiles if p not in have]
    if missing:
        raise AdviceError(f"{path}: no modelled runs for profile(s) {', '.join(missing)}; it "
                          f"has {', '.join(sorted(have))} (add them with `numaio advise "
                          f"collect-modelled --profiles {','.join(missing)} --out {path}`)")
    out = []
    base = None if args.no_cache else cache.key([path])
    for p in profiles:
        k = hashlib.sha256(f"{base} modelled {p}".encode()).hexdigest()[:32] if base else None
        adv = cache.load(k) if k else None
        if adv is None:
            adv = pipeline.train_modelled(recs, p)
            if k:
                cache.store(k, adv)
        out.append((p, adv))
    return out


def observe_pid(pid, seconds):
    exe = corpus.find_numaio()
    try:
        p = subprocess.run([exe, "ps", "--json", "--interval", str(seconds), str(pid)],
                           capture_output=True, text=True)
    except OSError as e:
        raise AdviceError(f"observing pid {pid}: cannot run {exe}: {e.strerror}")
    if p.returncode != 0:
        raise AdviceError(f"observing pid {pid}: numaio ps failed: {p.stderr.strip()}")
    try:
        rounds = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise AdviceError(f"observing pid {pid}: numaio ps printed bad JSON ({e.msg})")
    return from_ps(rounds, origin=f"pid {pid}", pid=pid)


def get_profile(source, seconds):
    if source.isdigit() and not os.path.exists(source):
        pid = int(source)
        if pid <= 0:
            raise AdviceError(f"pid must be positive, not {source}")
        return observe_pid(pid, seconds)
    return load_profile(source)


def bench_shape(features):
    """A numaio bench workload resembling a profile, to try a setting on this machine."""
    op = "read" if features["read_frac"] >= 0.5 else "write"
    workload = ("seq" if features["seq_frac"] >= 0.5 else "rand") + op
    bs = 2 ** min(28, max(9, round(features["req_size_log2"])))
    size = 2 ** min(34, max(24, math.ceil(features["data_log2"])))
    return workload, bs, size


def advise(args):
    from . import pipeline

    prof = get_profile(args.source, args.seconds)
    _, adv = trained_advisor(args)
    current = dict(grid.DEFAULT)
    current.update({k: v for k, v in prof.settings.items() if k in grid.SETTINGS})
    if current.get("threads", 1) not in grid.SETTINGS["threads"]:
        # Advice is over the grid's thread counts; keep the nearest as the baseline.
        current["threads"] = min(grid.SETTINGS["threads"], key=lambda t: abs(t - current["threads"]))
    res = pipeline.recommend(adv, prof.features, current=current, top=args.top)
    workload, bs, size = bench_shape(prof.features)
    for r in res["recommendations"]:
        r["apply"] = grid.engine_settings_text(r["settings"])
        cmd = grid.bench_args(r["settings"], workload, bs, size, "numaio-bench.dat", 5)
        cmd.remove("--json")
        r["command"] = "numaio " + " ".join(cmd)
    res["source"] = "measured"
    res["profile"] = prof.to_dict()
    res["scores"] = {k: v for k, v in adv.scores.items() if k != "predictions"}
    res["ranking"] = adv.ranking
    res["k"] = adv.k
    res["modelled"] = [modelled_advice(p, madv, prof, current, args.top)
                       for p, madv in modelled_advisors(args)]
    if args.plot:
        from .plots import plot_all

        res["plots"] = plot_all(adv, prof.features, args.plot)
    if args.json:
        print(json.dumps(res, indent=2, default=_json_default))
    else:
        print_advice(res, prof)
    return 0


def modelled_advice(profile, adv, prof, current, top):
    """Advice on a multi-node profile, from its modelled runs: labelled in every field."""
    from . import modelled, pipeline

    # Only the settings the model tells apart: the others were never modelled, and the
    # current one reduced to what the model sees.
    cur = grid.normalise(current)
    cur = grid.normalise({"io": "kernel" if cur["io"] == "kernel" else "direct",
                          "placement": cur["placement"], "move_work": cur["move_work"],
                          "threads": cur["threads"]})
    res = pipeline.recommend(adv, prof.features, current=cur, top=top,
                             candidates=modelled.modelled_settings())
    res["source"] = "modelled"
    res["profile_name"] = profile
    res["label"] = modelled.label(profile)
    res["current"]["model_placement"] = modelled.model_placement(res["current"]["settings"])
    for r in res["recommendations"]:
        r["source"] = "modelled"
        r["label"] = res["label"]
        r["model_placement"] = modelled.model_placement(r["settings"])
        r["apply"] = grid.engine_settings_text(r["settings"])
    res["scores"] = {k: v for k, v in adv.scores.items() if k in ("knn_clustered", "boosted")}
    return res


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def print_advice(res, prof):
    f = prof.features
    print(f"workload: {prof.origin} ({prof.source})")
    print("  " + ", ".join(f"{k} {f[k]:.2f}" for k in WORKLOAD_FEATURES))
    for n in prof.notes:
        print(f"  note: {n}")
    print(f"cluster {res['cluster']} of {res['k']}, clustered on "
          f"{', '.join(res['cluster_features'])}; corpus workloads in it: "
          f"{', '.join(res['cluster_workloads'])}")
    sc = res["scores"]
    print(f"model: {res['model']} (leave-workload-out R²: per-cluster KNN "
          f"{sc['knn_clustered']:.2f}, unclustered KNN {sc['knn_unclustered']:.2f}, "
          f"boosted trees {sc['boosted']:.2f})")
    nov = res["novelty"]
    why = (f"nearest corpus workload {nov['nearest_workload']} at "
           f"{nov['distance_ratio']:.1f}x the corpus's typical spacing; the model's R² on "
           f"unseen workloads {res['model_r2']:.2f}")
    if nov["out_of_range"]:
        why += f"; outside the corpus's range: {', '.join(nov['out_of_range'])}"
    print(f"confidence: {res['confidence']} ({why})")
    cur = res["current"]
    seen = (f"measured {_human_rate(prof.throughput)} (the profile's own), "
            if prof.throughput else "")
    print(f"current: {grid.engine_settings_text(cur['settings'])}; {seen}predicted "
          f"{_human_rate(cur['predicted_bytes_per_s'])} here")
    print("recommendations:")
    for i, r in enumerate(res["recommendations"], 1):
        print(f"{i:2}. {_human_rate(r['predicted_bytes_per_s'])} predicted "
              f"({_pct(r['predicted_gain'])} vs current): {r['apply']}")
        if r["drivers"]:
            alone = math.prod(1 + d["predicted_gain"] for d in r["drivers"]) - 1
            print("    drivers (each changed alone): " + ", ".join(
                f"{d['parameter']} {d['from']}→{d['to']} {_pct(d['predicted_gain'])}"
                for d in r["drivers"]))
            if abs(r["predicted_gain"] - alone) > 0.25 * max(1.0, abs(alone)):
                print(f"    (alone they give {_pct(alone)}: the rest of the gain comes from "
                      "changing them together)")
        print(f"    try: {r['command']}")
    for m in res.get("modelled", []):
        print_modelled(m)
    for p in res.get("plots", []):
        print(f"plot: {p}")


def print_modelled(m):
    lab = m["label"]
    print(f"\n{lab}: predicted by `numaio model` for the {m['profile_name']} machine, not "
          "measured; placement as the model sees it (kernel = single node, engine = fair, "
          "engine moving work to the data = local)")
    nov = m["novelty"]
    print(f"  {lab} confidence: {m['confidence']} (nearest modelled workload "
          f"{nov['nearest_workload']}; model {m['model']}, R² on unseen modelled workloads "
          f"{m['model_r2']:.2f})")
    cur = m["current"]
    print(f"  {lab} current: {cur['model_placement']} placement, "
          f"{_human_rate(cur['predicted_bytes_per_s'])}")
    for i, r in enumerate(m["recommendations"], 1):
        print(f"  {i:2}. [{lab}] {r['model_placement']} placement, "
              f"{_human_rate(r['predicted_bytes_per_s'])} ({_pct(r['predicted_gain'])} vs "
              f"current): {r['apply']}")


def cmd_features(args):
    prof = get_profile(args.source, args.seconds)
    if args.json:
        print(json.dumps(prof.to_dict(), indent=2))
    else:
        for k, v in prof.features.items():
            print(f"{k:16} {v:.3f}   {WORKLOAD_FEATURES[k]}")
        for k, v in prof.settings.items():
            print(f"setting {k:8} {v}")
        for n in prof.notes:
            print(f"note: {n}")
    return 0


def cmd_collect(args):
    wls = [w for w in args.workloads.split(",") if w] if args.workloads else None
    if wls:
        bad = [w for w in wls if w not in grid.WORKLOADS]
        if bad:
            raise AdviceError(f"unknown workload(s) {', '.join(bad)}; known: "
                              f"{', '.join(grid.WORKLOADS)}")
    workdir = args.workdir or os.path.join(tempfile.gettempdir(), "numaio-advise-collect")
    plan, ran, failed = corpus.collect(args.out, workdir, per_workload=args.per_workload,
                                       duration=args.duration, workloads=wls, note=args.note,
                                       echo=print)
    print(f"{args.out}: {plan} runs planned, {plan - ran} already there, {ran - failed} "
          f"measured now, {failed} failed; data files kept in {workdir}", file=sys.stderr)
    return 1 if failed else 0


def cmd_validate(args):
    from . import pipeline

    recs, adv = trained_advisor(args)
    measured = [r for r in recs if r["source"] == "measured"]
    # Validation is on measured runs only: modelled ones are never scored as if measured.
    modelled = []
    rows = pipeline.validate(measured, modelled, model=adv.model)
    out = {"k": adv.k, "cluster_features": adv.cluster_features, "ranking": adv.ranking,
           "k_search": adv.k_search,
           "scores": {k: v for k, v in adv.scores.items() if k != "predictions"}, "model": adv.model,
           "held_out": rows, "knn_k": adv.knn_k,
           "modelled_runs": len(modelled), "measured_runs": len(measured)}
    if args.json:
        print(json.dumps(out, indent=2, default=_json_default))
        return 0
    print(f"{len(measured)} measured runs, {len(modelled)} modelled; k = {adv.k} clusters on "
          f"{', '.join(adv.cluster_features)}; feature ranking: {', '.join(adv.ranking)}")
    sc = adv.scores
    print(f"model kept: {adv.model}")
    print("\n| model | R², workloads held out | R² within a held-out workload | R², random "
          "5-fold split of runs | mean regret, workloads held out |\n|---|---|---|---|---|")
    for name in ("knn_clustered", "knn_unclustered", "boosted"):
        print(f"| {name} | {sc[name]:.2f} | {sc['within_workload_r2'][name]:.2f} | "
              f"{sc['random_split'][name]:.2f} | {sc['regret'][name] * 100:.1f}% |")
    print("\n| cluster | workloads | runs | KNN R² (held out / random split) | boosted R² "
          "(held out / random split) |\n|---|---|---|---|---|")
    for c, s in sorted(sc["per_cluster"].items()):
        wl = ", ".join(sorted(w for w, cc in adv.cluster_of.items() if cc == c))
        print(f"| {c} | {wl} | {s['runs']} | {s['knn']:.2f} / {s['knn_random_split']:.2f} | "
              f"{s['boosted']:.2f} / {s['boosted_random_split']:.2f} |")
    print("\n| held-out workload | R² KNN | R² boosted | regret KNN | regret boosted | "
          "advice | default | best |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['r2_knn']:.2f} | {r['r2_boosted']:.2f} | "
              f"{r['regret_knn'] * 100:.1f}% | {r['regret_boosted'] * 100:.1f}% | "
              f"{_human_rate(r['advice_bytes_per_s'])} | "
              f"{_human_rate(r.get('default_bytes_per_s', float('nan')))} | "
              f"{_human_rate(r['best_bytes_per_s'])} |")
    wins = [r["beats_default"] for r in rows if r.get("better_than_default_exists")]
    print(f"\nadvice ({adv.model}) beats the default setting on {sum(wins)} of {len(wins)} "
          "held-out workloads where a better measured setting exists; mean regret "
          f"{sum(r['regret'] for r in rows) / max(1, len(rows)) * 100:.1f}%")
    return 0


def cmd_collect_modelled(args):
    from . import modelled

    profiles = [p for p in args.profiles.split(",") if p]
    wls = [w for w in args.workloads.split(",") if w] if args.workloads else None
    if wls:
        bad = [w for w in wls if w not in grid.WORKLOADS]
        if bad:
            raise AdviceError(f"unknown workload(s) {', '.join(bad)}; known: "
                              f"{', '.join(grid.WORKLOADS)}")
    plan, ran = modelled.collect_modelled(args.out, profiles=profiles, workloads=wls)
    print(f"{args.out}: {plan} modelled runs planned, {plan - ran} already there, {ran} "
          f"predicted now by numaio model ({', '.join(modelled.label(p) for p in profiles)})",
          file=sys.stderr)
    return 0


def parser_for(cmd):
    if cmd == "collect-modelled":
        from . import modelled

        p = argparse.ArgumentParser(
            prog=f"{PROG} collect-modelled",
            description="Predict the corpus grid with `numaio model --json` on multi-node "
            "profiles; each record is labelled \"source\": \"modelled\" with the profile as "
            "its machine (resumable: runs already in --out are skipped).")
        p.add_argument("--out", required=True, help="JSON-lines file of modelled runs to "
                       "append to (keep it apart from measured corpora)")
        p.add_argument("--profiles", default=",".join(modelled.PROFILES),
                       help="comma-separated numaio model profiles (names or files; default "
                       "%(default)s)")
        p.add_argument("--workloads", help=f"comma-separated subset of: "
                       f"{', '.join(grid.WORKLOADS)}")
        return p
    if cmd == "collect":
        p = argparse.ArgumentParser(prog=f"{PROG} collect",
                                    description="Measure the corpus grid with numaio bench "
                                    "(resumable: runs already in --out are skipped).")
        p.add_argument("--out", required=True, help="JSON-lines corpus to append to")
        p.add_argument("--workdir", help="where the bench data files go (kept for reuse)")
        p.add_argument("--per-workload", type=int, default=19,
                       help="settings per workload shape, the default setting included")
        p.add_argument("--duration", type=float, default=0.5, help="seconds per run")
        p.add_argument("--workloads", help=f"comma-separated subset of: "
                       f"{', '.join(grid.WORKLOADS)}")
        p.add_argument("--note", default="", help="stored with each run (e.g. machine load)")
        return p
    if cmd in ("validate", "features"):
        p = argparse.ArgumentParser(prog=f"{PROG} {cmd}")
    else:
        p = argparse.ArgumentParser(
            prog=PROG, description="Advise numaio settings for a workload, learned from "
            "measured runs. Subcommands: collect, collect-modelled, validate, features "
            "(see `numaio advise collect --help`).")
    if cmd != "validate":
        p.add_argument("source", help="a Darshan log, a numaio ps --json capture, a numaio "
                       "bench --json result, an fio JSON output, or a pid to observe")
        p.add_argument("--seconds", type=float, default=5.0,
                       help="with a pid: seconds to observe it")
    if cmd == "features":
        p.add_argument("--json", action="store_true")
        return p
    p.add_argument("--corpus", help="JSON-lines corpus (default: the shipped one)")
    if cmd != "validate":
        p.add_argument("--include-modelled", metavar="PROFILES",
                       help="also advise placement on multi-node profiles (comma-separated, or "
                       "`all`) from their modelled runs, each learned apart from the measured "
                       "runs and labelled \"modelled (PROFILE profile)\"")
        p.add_argument("--modelled", metavar="FILE",
                       help="JSON-lines of modelled runs (source \"modelled\") for "
                       "--include-modelled (default: the shipped ones); alone, implies "
                       "--include-modelled all")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-cache", action="store_true", help="retrain even when a model "
                   "trained on the same corpus is cached (~/.cache/numaio-advisor)")
    if cmd != "validate":
        p.add_argument("--top", type=int, default=3, help="recommendations to show")
        p.add_argument("--plot", metavar="DIR", help="write cluster and predicted-vs-measured "
                       "plots (PNG and SVG) to DIR")
    return p


def main(argv):
    cmd = (argv[0] if argv and argv[0] in ("collect", "collect-modelled", "validate",
                                           "features") else None)
    p = parser_for(cmd)
    args = p.parse_args(argv[1:] if cmd else argv)
    if getattr(args, "seconds", 1.0) <= 0 or getattr(args, "seconds", 1.0) > 3600:
        p.error("--seconds must be in (0, 3600]")
    if getattr(args, "top", 1) < 1 or getattr(args, "top", 1) > 50:
        p.error("--top must be 1 to 50")
    try:
        if cmd == "collect":
            if args.per_workload < 1 or not (0 < args.duration <= 60):
                p.error("--per-workload must be >= 1 and --duration in (0, 60]")
            return cmd_collect(args)
        if cmd == "collect-modelled":
            return cmd_collect_modelled(args)
        if cmd == "validate":
            return cmd_validate(args)
        if cmd == "features":
            return cmd_features(args)
        return advise(args)
    except AdviceError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        if os.environ.get("NUMAIO_ADVISOR_DEBUG"):
            raise
        print(f"{PROG}: internal error: {type(e).__name__}: {e} (run with "
              "NUMAIO_ADVISOR_DEBUG=1 for the traceback, and report it)", file=sys.stderr)
        return 1
