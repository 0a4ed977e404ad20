"""Modelled runs from `numaio model`: generated with the real binary, labelled, kept apart from
measured training, and advice on a multi-node profile that follows the model's ranking."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import FIXTURES, PYROOT, REPO, make_corpus, skip_visibly

from numaio_advisor import corpus, grid, modelled, pipeline
from numaio_advisor.errors import AdviceError


@pytest.fixture(scope="session")
def env(tmp_path_factory):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([PYROOT] + [p for p in e.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    e["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    e.pop("NUMAIO_ADVISOR_DEBUG", None)
    return e


def advise(env, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "numaio_advisor", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def numaio_with_model():
    """A built numaio that has the `model` subcommand, or None."""
    for cand in (os.environ.get("NUMAIO_BIN"),
                 os.path.join(REPO, "target", "release", "numaio"),
                 os.path.join(REPO, "target", "debug", "numaio")):
        if cand and os.path.exists(cand):
            h = subprocess.run([cand, "model", "--profiles"], capture_output=True, text=True)
            if h.returncode == 0 and "zonfs" in h.stdout:
                return cand
    return None


@pytest.fixture
def numaio(request):
    exe = numaio_with_model()
    if exe is None:
        skip_visibly(request, "numaio-binary", "no target/{release,debug}/numaio with the model "
                     "subcommand; build it with cargo build --release -p numaio")
    return exe


def shipped_modelled():
    return corpus.load(modelled.shipped_modelled_path(), source="modelled")


def model_mb_s(exe, *args):
    p = subprocess.run([exe, "model", "--json", *args], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["throughput_mb_s"]


def test_collect_modelled_with_the_real_binary(numaio, env, tmp_path):
    out = tmp_path / "modelled.jsonl"
    e = dict(env, NUMAIO_BIN=numaio)
    args = ["collect-modelled", "--out", str(out), "--profiles", "zonfs",
            "--workloads", "randread-4k,seqwrite-1m"]
    p = advise(e, *args)
    assert p.returncode == 0, p.stderr
    recs = corpus.load(str(out), source="modelled")
    per = len(modelled.modelled_settings())
    assert per == 30 and len(recs) == 2 * per
    for r in recs:
        assert r["source"] == "modelled" and r["machine"] == "zonfs"
        assert r["label"] == "modelled (zonfs profile)"
        assert r["workload"] in ("zonfs/randread-4k", "zonfs/seqwrite-1m")
    # Each record is what `numaio model` itself answers for its mapped placement.
    for r in recs[::7]:
        wl, bs, _ = grid.WORKLOADS[r["workload"].split("/")[1]]
        want = model_mb_s(numaio, *modelled.model_args("zonfs", r["settings"], wl, bs)[2:])
        assert r["throughput"] == pytest.approx(want * 1e6, rel=1e-9)
    # Placement matters on zonfs: the three model placements do not all predict the same.
    four = {r["model"]["placement"]: r["throughput"] for r in recs
            if r["workload"] == "zonfs/randread-4k" and r["settings"]["threads"] == 32}
    assert set(four) == {"single", "local", "fair"} and len(set(four.values())) > 1
    # Resumable: again, nothing new; with another profile, only its runs are predicted.
    p = advise(e, *args)
    assert p.returncode == 0 and f"{2 * per} already there" in p.stderr, p.stderr
    assert len(out.read_text().splitlines()) == 2 * per
    p = advise(e, *args[:-3], "zonfs,adams", *args[-2:])
    assert p.returncode == 0, p.stderr
    assert f"{2 * per} already there, {2 * per} predicted now" in p.stderr
    assert {r["machine"] for r in corpus.load(str(out))} == {"zonfs", "adams"}


def test_collect_modelled_bad_binary_and_profile(env, tmp_path, numaio):
    old = tmp_path / "numaio"
    old.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        sys.stderr.write("error: unrecognized subcommand 'model'\\n")
        sys.exit(2)
    """))
    old.chmod(0o755)
    p = advise(dict(env, NUMAIO_BIN=str(old)), "collect-modelled", "--out",
               str(tmp_path / "m.jsonl"), "--workloads", "randread-4k")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "no `model` subcommand" in p.stderr and "cargo build" in p.stderr
    p = advise(dict(env, NUMAIO_BIN=numaio), "collect-modelled", "--out",
               str(tmp_path / "m.jsonl"), "--profiles", "nosuch", "--workloads", "randread-4k")
    assert p.returncode == 1 and "Traceback" not in p.stderr and "nosuch" in p.stderr


def test_shipped_modelled_corpus_is_labelled_and_apart():
    path = modelled.shipped_modelled_path()
    assert os.path.getsize(path) < 1 << 20
    recs = shipped_modelled()
    assert {modelled.profile_of(r) for r in recs} == set(modelled.PROFILES)
    for r in recs:
        p = modelled.profile_of(r)
        assert r["source"] == "modelled" and r["machine"] == p
        assert r["label"] == f"modelled ({p} profile)"
        assert r["workload"].startswith(p + "/")
    assert len(recs) == len(modelled.PROFILES) * len(grid.WORKLOADS) * 30
    # The measured corpus holds measured runs only, and the two never share a workload id.
    measured = corpus.load(corpus.shipped_corpus_path())
    assert all(r["source"] == "measured" for r in measured)
    assert not {r["workload"] for r in measured} & {r["workload"] for r in recs}


def test_measured_training_never_mixes_modelled(synthetic):
    zonfs = [r for r in shipped_modelled() if r["machine"] == "zonfs"]
    mixed = pipeline.train(synthetic + zonfs, score=False)
    alone = pipeline.train(synthetic, score=False)
    assert not [w for w in mixed.cluster_of if w.startswith("zonfs/")]
    assert mixed.k == alone.k and mixed.ranking == alone.ranking
    f = synthetic[0]["features"]
    settings = grid.full_grid()
    for m in ("knn", "boosted"):
        assert (mixed.predict(f, settings, model=m) == alone.predict(f, settings, model=m)).all()
    # Validation scores measured runs only, whatever the records hold.
    scored = pipeline.train(synthetic + zonfs)
    assert set(scored.scores["predictions"]["workload"]) == {r["workload"] for r in synthetic}
    with pytest.raises(AdviceError, match="no measured runs"):
        pipeline.train(zonfs)


def test_modelled_advisor_is_one_profile_alone():
    recs = shipped_modelled()
    adv = pipeline.train_modelled(recs, "zonfs")
    assert all(w.startswith("zonfs/") for w in adv.cluster_of)
    with pytest.raises(AdviceError, match="no modelled runs for profile 'nosuch'"):
        pipeline.train_modelled(recs, "nosuch")


def best_model_placement(recs, workload):
    best = max((r for r in recs if r["workload"] == workload), key=lambda r: r["throughput"])
    return best["model"]["placement"], best["settings"]["threads"]


def test_zonfs_advice_prefers_the_placement_the_model_ranks_best(env, request):
    fio = os.path.join(FIXTURES, "fio-randread-4k.json")
    p = advise(env, fio, "--include-modelled", "zonfs", "--json", "--top", "3")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["source"] == "measured"
    (m,) = res["modelled"]
    assert m["source"] == "modelled" and m["label"] == "modelled (zonfs profile)"
    assert all(r["label"] == "modelled (zonfs profile)" and r["source"] == "modelled"
               for r in m["recommendations"])
    assert all("model_placement" not in r for r in res["recommendations"])
    recs = [r for r in shipped_modelled() if r["machine"] == "zonfs"]
    want, _ = best_model_placement(recs, "zonfs/randread-4k")
    top = m["recommendations"][0]
    assert top["model_placement"] == want, (top, want)
    exe = numaio_with_model()
    if exe is None:
        skip_visibly(request, "numaio-binary", "cannot check the ranking against numaio model "
                     "itself; build it with cargo build --release -p numaio")
    # The real model ranks the advised placement best at the advised thread count.
    t = str(top["settings"]["threads"])
    got = model_mb_s(exe, "--profile", "zonfs", "--placement", want, "--sharing", "medium",
                     "--threads", t, "--bs", "4K", "--read-fraction", "1")
    for other in ("single", "local", "fair"):
        alt = model_mb_s(exe, "--profile", "zonfs", "--placement", other, "--sharing", "medium",
                         "--threads", t, "--bs", "4K", "--read-fraction", "1")
        assert got >= alt, (want, other, got, alt)


def test_measured_advice_unchanged_and_modelled_labelled_in_text(env):
    fio = os.path.join(FIXTURES, "fio-randread-4k.json")
    plain = json.loads(advise(env, fio, "--json").stdout)
    both = json.loads(advise(env, fio, "--json", "--include-modelled", "all").stdout)
    assert plain["recommendations"] == both["recommendations"]
    assert plain["modelled"] == []
    assert [m["profile_name"] for m in both["modelled"]] == sorted(modelled.PROFILES)
    p = advise(env, fio, "--include-modelled", "zonfs,adams")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("modelled (zonfs profile)"))
    measured_part = lines[:start]
    assert not [x for x in measured_part if "modelled (" in x]
    for x in lines[start:]:
        if x.strip()[:2].strip(".").strip().isdigit():
            assert "[modelled (" in x, x
    assert any(x.startswith("modelled (adams profile)") for x in lines)


def test_modelled_bad_input(env, tmp_path):
    fio = os.path.join(FIXTURES, "fio-randread-4k.json")
    p = advise(env, fio, "--include-modelled", "nosuch")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "nosuch" in p.stderr and "collect-modelled" in p.stderr
    mixed = tmp_path / "mixed.jsonl"
    rows = make_corpus(per=6) + shipped_modelled()[:3]
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = advise(env, fio, "--corpus", str(mixed))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "modelled run(s) in the measured corpus" in p.stderr
