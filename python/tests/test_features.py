"""Feature extraction from each source, and refusal of what is not one."""

import glob
import json
import os

import pytest
from conftest import FIXTURES, skip_visibly

from numaio_advisor.errors import AdviceError
from numaio_advisor.features import (WORKLOAD_FEATURES, bench_features, from_bench,
                                     from_darshan_counters, load_profile)


def fixture(name):
    return os.path.join(FIXTURES, name)


def example_darshan_logs(request):
    """The example logs that pydarshan (PyPI package `darshan`) ships."""
    try:
        import darshan
    except ImportError:
        skip_visibly(request, "pydarshan", "PyPI package darshan is not installed; run "
                     "scripts/setup-python.sh")
    base = os.path.join(os.path.dirname(darshan.__file__), "examples", "example_logs")
    logs = {os.path.basename(p): p for p in glob.glob(os.path.join(base, "*.darshan"))}
    if "ior_hdf5_example.darshan" not in logs:
        skip_visibly(request, "pydarshan-example-logs", f"none in {base}")
    return logs


def assert_table(f):
    assert list(f) == list(WORKLOAD_FEATURES)
    for k in ("read_frac", "seq_frac", "small_req_frac"):
        assert 0.0 <= f[k] <= 1.0, (k, f)
    assert f["files"] >= 1


def test_bench_json():
    obj = {"target": "engine", "workload": "seqwrite", "bs": 1 << 20, "threads": 2,
           "size": 64 << 20, "ops_per_s": 10.0, "bytes_per_s": 5e8, "policy": "split-lru:8",
           "cache_bytes": 16 << 20, "direct_io": False}
    p = from_bench(obj)
    assert p.features == bench_features("seqwrite", 1 << 20, 64 << 20)
    assert p.features["read_frac"] == 0.0 and p.features["seq_frac"] == 1.0
    assert p.features["req_size_log2"] == 20.0 and p.features["data_log2"] == 26.0
    assert p.settings == {"threads": 2, "io": "buffered", "policy": "split-lru",
                          "cache_frac": 0.25}
    assert p.throughput == 5e8
    with pytest.raises(AdviceError, match="bench --json"):
        from_bench({"workload": "randread"}, origin="x.json")


def test_bench_json_file(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"target": "kernel", "workload": "randread", "bs": 4096,
                                "threads": 1, "size": 1 << 24, "ops_per_s": 1.0,
                                "bytes_per_s": 4096.0}))
    p = load_profile(str(path))
    assert p.source == "bench" and p.settings["io"] == "kernel"
    assert p.features["small_req_frac"] == 1.0 and p.features["seq_frac"] == 0.0


def test_fio_json_jobs_without_group_reporting():
    p = load_profile(fixture("fio-randread-4k.json"))
    assert p.source == "fio"
    assert_table(p.features)
    assert p.features["read_frac"] == 1.0 and p.features["seq_frac"] == 0.0
    assert p.features["req_size_log2"] == pytest.approx(12.0)
    assert p.features["data_log2"] == pytest.approx(24.0)   # one shared 16 MiB file
    assert p.settings["threads"] == 2 and p.throughput > 0


def test_fio_json_group_reporting_counts_the_clones():
    p = load_profile(fixture("fio-seqwrite-1m.json"))
    assert p.features["read_frac"] == 0.0 and p.features["seq_frac"] == 1.0
    assert p.features["req_size_log2"] == pytest.approx(20.0)
    assert p.settings["threads"] == 2   # numjobs=2 folded into one entry


def test_ps_capture_single_round():
    p = load_profile(fixture("ps-randread-4k.json"))
    assert p.source == "ps"
    assert_table(p.features)
    assert p.features["read_frac"] == 1.0
    assert p.features["req_size_log2"] == 12.0       # avg_read_bytes 4096
    assert p.features["data_log2"] == 24.0           # the 16 MiB file it had open
    assert p.settings["threads"] == 2                # 3 threads: main + 2 workers
    assert p.notes


def test_ps_capture_watch_lines_and_pid_filter(tmp_path):
    one = json.load(open(fixture("ps-randread-4k.json")))
    other = json.loads(json.dumps(one))
    other["processes"][0].update(pid=7, read_bytes_per_sec=1.0, write_bytes_per_sec=9e9)
    path = tmp_path / "watch.jsonl"
    path.write_text(json.dumps(one) + "\n" + json.dumps(other) + "\n")
    # The busiest process wins: pid 7 writes.
    assert load_profile(str(path)).features["read_frac"] < 0.01
    from numaio_advisor.features import from_ps
    pid = one["processes"][0]["pid"]
    assert from_ps([one, other], pid=pid).features["read_frac"] == 1.0
    with pytest.raises(AdviceError, match="no I/O of process 99999"):
        from_ps([one], pid=99999)


def test_darshan_example_logs(request):
    logs = example_darshan_logs(request)
    p = load_profile(logs["ior_hdf5_example.darshan"])
    assert p.source == "darshan"
    assert_table(p.features)
    assert 0.4 < p.features["read_frac"] < 0.6          # IOR writes then reads back
    assert p.settings["threads"] == 4                   # nprocs
    for name, path in logs.items():
        assert_table(load_profile(path).features)


def test_darshan_counters_mapping():
    c = {"POSIX_BYTES_READ": 3 << 20, "POSIX_BYTES_WRITTEN": 1 << 20, "POSIX_READS": 768,
         "POSIX_WRITES": 256, "POSIX_SEQ_READS": 512, "POSIX_SEQ_WRITES": 256,
         "POSIX_SIZE_READ_1K_10K": 768, "POSIX_SIZE_WRITE_1K_10K": 256,
         "POSIX_MAX_BYTE_READ": (8 << 20) - 1, "POSIX_F_READ_TIME": 1.0,
         "POSIX_F_WRITE_TIME": 1.0, "NPROCS": 4, "FILES": 2}
    p = from_darshan_counters(c)
    assert p.features["read_frac"] == 0.75
    assert p.features["seq_frac"] == 0.75
    assert p.features["req_size_log2"] == 12.0
    assert p.features["small_req_frac"] == 1.0
    assert p.features["data_log2"] == pytest.approx(23.0)
    assert p.features["files"] == 2
    assert p.settings["threads"] == 4
    with pytest.raises(AdviceError, match="no reads or writes"):
        from_darshan_counters({"POSIX_READS": 0, "NPROCS": 1})


def test_truncated_darshan_logs_are_refused_cleanly(request, tmp_path):
    logs = example_darshan_logs(request)
    data = open(logs["example.darshan"], "rb").read()
    # Some of these lengths crash darshan-util's reader outright (SIGSEGV/SIGABRT).
    for n in (20, 200, 1000, 5000, len(data) - 400):
        path = tmp_path / f"t{n}.darshan"
        path.write_bytes(data[:n])
        with pytest.raises(AdviceError, match="truncated|not a Darshan log"):
            load_profile(str(path))


def test_foreign_files_are_refused(tmp_path):
    cases = {
        "empty": b"",
        "text": b"hello world, not a log\n" * 10,
        "binary": bytes(range(256)) * 8,
        "bad.json": b'{"jobs": [',
        "unknown.json": b'{"hello": 1}',
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(AdviceError) as e:
            load_profile(str(path))
        assert str(path) in str(e.value)
    with pytest.raises(AdviceError, match="no such file"):
        load_profile(str(tmp_path / "missing"))
    with pytest.raises(AdviceError, match="directory"):
        load_profile(str(tmp_path))
