import math
import os
import random
import sys

# As `python -m numaio_advisor` does: one OpenMP thread for tiny data.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PYROOT)
FIXTURES = os.path.join(HERE, "fixtures")
# The checkout's package, whether or not a copy was pip-installed.
sys.path.insert(0, PYROOT)

from numaio_advisor import grid  # noqa: E402
from numaio_advisor.features import bench_features  # noqa: E402


def skip_visibly(request, what, why):
    """Skip with a `SKIPPED: <test>: needs <what>` line (run pytest with -rs to see it), or
    fail where NUMAIO_REQUIRE says the machine has it, as the Rust suites do."""
    line = f"SKIPPED: {request.node.nodeid}: needs {what} ({why})"
    req = [r.strip() for r in os.environ.get("NUMAIO_REQUIRE", "").split(",")]
    if "all" in req or what in req:
        pytest.fail(f"{line}, but NUMAIO_REQUIRE says this machine must provide {what}")
    log = os.environ.get("NUMAIO_SKIP_LOG")
    if log:
        try:
            with open(log, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass
    pytest.skip(line)


# A synthetic corpus whose best settings are known: reads gain from the kernel page cache and
# threads, writes from O_DIRECT and a 64K block; small requests favour split-lru.
SHAPES = {
    "rr4k": ("randread", 4096, 48 << 20),
    "rr64k": ("randread", 65536, 48 << 20),
    "sr1m": ("seqread", 1 << 20, 48 << 20),
    "sr4k": ("seqread", 4096, 48 << 20),
    "rw4k": ("randwrite", 4096, 48 << 20),
    "rw64k": ("randwrite", 65536, 48 << 20),
    "sw1m": ("seqwrite", 1 << 20, 48 << 20),
    "rr4kbig": ("randread", 4096, 192 << 20),
}


def true_log_tput(features, s):
    read = features["read_frac"] > 0.5
    v = 8.0 + 0.12 * features["req_size_log2"] - 0.05 * features["data_log2"]
    if read:
        v += {"kernel": 0.30, "buffered": 0.10, "direct": 0.0}[s["io"]]
        v += 0.15 * math.log2(s["threads"])
    else:
        v += {"kernel": -0.10, "buffered": 0.0, "direct": 0.25}[s["io"]]
        v += 0.15 if s["block_size"] == 65536 else 0.0
        v -= 0.05 * math.log2(s["threads"])
    if features["small_req_frac"] > 0.5 and s["policy"] == "split-lru":
        v += 0.08
    return v


def make_corpus(per=24, noise=0.02, seed=1, shapes=SHAPES):
    rng = random.Random(seed)
    settings = grid.sample_settings(per, seed=seed)
    recs = []
    for w, (wl, bs, size) in shapes.items():
        f = bench_features(wl, bs, size)
        for s in settings:
            recs.append({"source": "measured", "machine": "synthetic", "workload": w,
                         "features": f, "settings": s,
                         "throughput": 10 ** (true_log_tput(f, s) + rng.gauss(0, noise))})
    return recs


@pytest.fixture(scope="session")
def synthetic():
    return make_corpus()


@pytest.fixture(scope="session")
def trained(synthetic):
    from numaio_advisor import pipeline

    return pipeline.train(synthetic)
