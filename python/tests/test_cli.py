"""`python3 -m numaio_advisor` and `numaio advise`, end to end, good input and bad."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import FIXTURES, PYROOT, REPO, make_corpus, skip_visibly


@pytest.fixture(scope="session")
def env(tmp_path_factory):
    """The checkout's package first on the path, and a cache of trained models of our own."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([PYROOT] + [p for p in e.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    e["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    e.pop("NUMAIO_ADVISOR_DEBUG", None)
    return e


def advise(env, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "numaio_advisor", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def fixture(name):
    return os.path.join(FIXTURES, name)


def assert_clean_failure(p, code, *want):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    msg = p.stderr.strip()
    assert msg, "no message"
    for w in want:
        assert w in msg, (w, msg)


def test_advise_from_fio_human(env):
    p = advise(env, fixture("fio-randread-4k.json"))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for want in ("workload:", "cluster ", "model:", "confidence:", "current:",
                 "recommendations:", "drivers (each changed alone):", "try: numaio bench --workload randread"):
        assert want in out, (want, out)
    assert out.count("predicted (") == 3   # --top defaults to 3


def test_advise_from_ps_json(env):
    p = advise(env, fixture("ps-randread-4k.json"), "--json", "--top", "5")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["profile"]["source"] == "ps"
    assert len(res["recommendations"]) == 5
    assert res["confidence"] in ("high", "medium", "low")
    assert res["model"] in ("knn", "boosted")
    gains = [r["predicted_gain"] for r in res["recommendations"]]
    assert gains == sorted(gains, reverse=True)
    for r in res["recommendations"]:
        assert r["command"].startswith("numaio bench ")
        assert r["predicted_bytes_per_s"] > 0
    assert set(res["scores"]) >= {"knn_clustered", "knn_unclustered", "boosted"}


def test_advise_from_darshan_log(env, request):
    try:
        import darshan
    except ImportError:
        skip_visibly(request, "pydarshan", "PyPI package darshan is not installed")
    log = os.path.join(os.path.dirname(darshan.__file__), "examples", "example_logs",
                       "ior_hdf5_example.darshan")
    if not os.path.exists(log):
        skip_visibly(request, "pydarshan-example-logs", log)
    p = advise(env, log, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["profile"]["source"] == "darshan"


def test_out_of_range_workload_says_low_confidence(env, tmp_path):
    bench = {"target": "engine", "workload": "randread", "bs": 4096, "threads": 1,
             "size": 64 << 30, "ops_per_s": 1.0, "bytes_per_s": 4e6}
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(bench))
    p = advise(env, str(path))
    assert p.returncode == 0, p.stderr
    assert "confidence: low" in p.stdout
    assert "outside the corpus's range: data_log2" in p.stdout


def test_truncated_and_foreign_darshan_logs(env, tmp_path, request):
    try:
        import darshan
    except ImportError:
        skip_visibly(request, "pydarshan", "PyPI package darshan is not installed")
    log = os.path.join(os.path.dirname(darshan.__file__), "examples", "example_logs",
                       "example.darshan")
    data = open(log, "rb").read()
    cut = tmp_path / "cut.darshan"
    cut.write_bytes(data[:1000])   # crashes darshan-util's reader
    assert_clean_failure(advise(env, str(cut)), 1, "cut.darshan", "truncated")
    foreign = tmp_path / "foreign.darshan"
    foreign.write_bytes(b"\x7fELF" + bytes(500))
    assert_clean_failure(advise(env, str(foreign)), 1, "not a Darshan log")


def test_empty_and_bad_corpora(env, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert_clean_failure(advise(env, fixture("fio-randread-4k.json"), "--corpus", str(empty)),
                         1, "empty")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"workload": "x"}\n')
    assert_clean_failure(advise(env, fixture("fio-randread-4k.json"), "--corpus", str(bad)),
                         1, "line 1")
    assert_clean_failure(advise(env, fixture("fio-randread-4k.json"), "--corpus",
                                str(tmp_path / "none.jsonl")), 1, "corpus not found")


def test_modelled_file_must_hold_modelled_runs(env, tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(make_corpus(per=2)[0]) + "\n")   # a measured run
    assert_clean_failure(advise(env, fixture("fio-randread-4k.json"), "--modelled", str(path)),
                         1, "expected 'modelled'")


def test_modelled_file_alone_adds_labelled_modelled_advice(env):
    from numaio_advisor import modelled

    p = advise(env, fixture("fio-randread-4k.json"), "--modelled",
               modelled.shipped_modelled_path(), "--json", "--top", "1")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["source"] == "measured"
    assert {m["label"] for m in res["modelled"]} == {
        f"modelled ({x} profile)" for x in modelled.PROFILES}


def test_bad_usage_and_missing_input(env, tmp_path):
    p = advise(env, fixture("fio-randread-4k.json"), "--top", "0")
    assert_clean_failure(p, 2, "--top")
    assert_clean_failure(advise(env), 2, "source")
    assert_clean_failure(advise(env, str(tmp_path / "nope.darshan")), 1, "no such file")
    assert_clean_failure(advise(env, "0"), 1, "pid must be positive")


def test_unobservable_pid(env):
    e = dict(env, NUMAIO_BIN="/nonexistent/numaio")
    e["PATH"] = "/usr/bin:/bin"
    p = advise(e, "2147483646", "--seconds", "0.1")
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert "pid 2147483646" in p.stderr or "numaio binary" in p.stderr, p.stderr


def test_missing_dependency_gives_one_message(env, tmp_path):
    # A scikit-learn that cannot be imported, first on the path.
    fake = tmp_path / "fake" / "sklearn"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('scikit-learn is broken here')\n")
    e = dict(env, PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), env["PYTHONPATH"]]))
    p = advise(e, fixture("fio-randread-4k.json"))
    assert_clean_failure(p, 1, "scikit-learn", "scripts/setup-python.sh")
    assert len(p.stderr.strip().splitlines()) == 1
    assert p.stdout == ""


def test_help_prints_without_the_dependencies(env, tmp_path):
    fake = tmp_path / "fake" / "sklearn"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('scikit-learn is broken here')\n")
    e = dict(env, PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), env["PYTHONPATH"]]))
    for args in (["--help"], ["-h"], ["collect", "--help"], ["collect-modelled", "--help"]):
        p = advise(e, *args)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        assert p.stdout.startswith("usage: numaio advise"), (args, p.stdout)
        assert p.stderr == "", (args, p.stderr)


def test_plots(env, tmp_path, request):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        skip_visibly(request, "matplotlib", "not installed")
    out = tmp_path / "plots"
    p = advise(env, fixture("fio-seqwrite-1m.json"), "--plot", str(out))
    assert p.returncode == 0, p.stderr
    for name in ("clusters", "predicted-vs-measured"):
        for ext in ("png", "svg"):
            f = out / f"{name}.{ext}"
            assert f.stat().st_size > 1000, f


def test_features_subcommand(env):
    p = advise(env, "features", fixture("fio-seqwrite-1m.json"), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["features"]["seq_frac"] == 1.0


def test_validate_subcommand_on_a_small_corpus(env, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_corpus(per=10)))
    p = advise(env, "validate", "--corpus", str(path), "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert len(res["held_out"]) == 8
    assert {"knn_clustered", "knn_unclustered", "boosted"} <= set(res["scores"])


FAKE_BENCH = textwrap.dedent("""\
    #!{python}
    import json, sys
    a = sys.argv[1:]
    v = lambda k: a[a.index(k) + 1]
    with open({log!r}, "a") as f:
        f.write(" ".join(a) + "\\n")
    print(json.dumps({{"workload": v("--workload"), "bs": 4096, "size": 1, "threads":
                      int(v("--threads")), "ops_per_s": 1.0, "bytes_per_s": 1e6 *
                      int(v("--threads")), "duration_s": 0.1, "ops": 10}}))
""")


def test_collect_is_resumable_and_labelled(env, tmp_path):
    log = tmp_path / "calls.log"
    fake = tmp_path / "numaio"
    fake.write_text(FAKE_BENCH.format(python=sys.executable, log=str(log)))
    fake.chmod(0o755)
    out = tmp_path / "corpus.jsonl"
    e = dict(env, NUMAIO_BIN=str(fake))
    args = ["collect", "--out", str(out), "--workdir", str(tmp_path / "w"),
            "--workloads", "randread-4k,seqwrite-1m", "--per-workload", "3", "--note", "test"]
    p = advise(e, *args)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 6
    assert all(r["source"] == "measured" and r["machine"] and r["note"] == "test"
               for r in lines)
    calls = log.read_text().splitlines()
    assert all("--json" in c for c in calls)
    assert any("--overwrite" in c for c in calls if "seqwrite" in c)
    # Again, with more settings: only the new ones run.
    p = advise(e, *args[:-4], "--per-workload", "4", "--note", "test")
    assert p.returncode == 0, p.stderr
    assert len(out.read_text().splitlines()) == 8
    assert len(log.read_text().splitlines()) == 8
    assert "6 already there" in p.stderr


def find_numaio():
    for cand in (os.environ.get("NUMAIO_BIN"),
                 os.path.join(REPO, "target", "debug", "numaio"),
                 os.path.join(REPO, "target", "release", "numaio")):
        if cand and os.path.exists(cand):
            h = subprocess.run([cand, "--help"], capture_output=True, text=True)
            if "advise" in h.stdout:
                return cand
    return None


def test_numaio_advise_end_to_end(env, request):
    exe = find_numaio()
    if exe is None:
        skip_visibly(request, "numaio-binary", "no target/{debug,release}/numaio with the "
                     "advise subcommand; build with cargo build -p numaio")
    e = dict(env, NUMAIO_PYTHON=sys.executable)
    p = subprocess.run([exe, "advise", fixture("fio-seqwrite-1m.json"), "--json"], env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["recommendations"]
    p = subprocess.run([exe, "advise", "--help"], env=e, capture_output=True, text=True)
    assert p.returncode == 0 and "collect" in p.stdout
    p = subprocess.run([exe, "advise", fixture("nope")], env=e, capture_output=True, text=True)
    assert_clean_failure(p, 1, "no such file")
    e2 = dict(env, NUMAIO_PYTHON="/nonexistent/python3")
    p = subprocess.run([exe, "advise", fixture("fio-seqwrite-1m.json")], env=e2,
                       capture_output=True, text=True)
    assert_clean_failure(p, 1, "Python 3", "setup-python.sh")


def test_shipped_corpus_is_labelled_and_small():
    from numaio_advisor import corpus

    path = corpus.shipped_corpus_path()
    assert os.path.getsize(path) < 2 << 20
    recs = corpus.load(path)
    assert len(recs) >= 100
    assert all(r["source"] == "measured" and r["machine"] for r in recs)
    assert len({r["workload"] for r in recs}) >= 8
    assert glob.glob(os.path.join(os.path.dirname(path), "README.md"))


def test_numaio_advise_observes_a_pid(env, tmp_path, request):
    exe = find_numaio()
    if exe is None:
        skip_visibly(request, "numaio-binary", "no target/{debug,release}/numaio with the "
                     "advise subcommand; build with cargo build -p numaio")
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(4 << 20))
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import os, time
        fd = os.open({str(data)!r}, os.O_RDONLY)
        end = time.time() + 60
        while time.time() < end:
            for off in range(0, 4 << 20, 65536):
                os.pread(fd, 65536, off)
                os.posix_fadvise(fd, off, 65536, os.POSIX_FADV_DONTNEED)
        """)])
    try:
        e = dict(env, NUMAIO_PYTHON=sys.executable)
        p = subprocess.run([exe, "advise", str(reader.pid), "--seconds", "1", "--json"], env=e,
                           capture_output=True, text=True, timeout=300)
    finally:
        reader.kill()
        reader.wait()
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["profile"]["source"] == "ps"
    assert res["profile"]["origin"] == f"pid {reader.pid}"
    assert res["profile"]["features"]["read_frac"] > 0.9
