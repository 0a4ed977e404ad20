"""The feature table shared by every source, and the extractors that fill it.

Each source (a Darshan log, a ``numaio ps --json`` capture, a ``numaio bench --json`` result,
fio's JSON output) becomes one :class:`Profile`: the workload features (what the I/O looks like,
whatever settings ran it) and the settings it ran with, as far as the source tells. The table is
documented in docs/advisor.md; keep the two in step.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
from dataclasses import dataclass, field

from .errors import AdviceError

#: Workload features: name -> meaning. Settings are not in here; see ``grid.SETTINGS``.
WORKLOAD_FEATURES = {
    "read_frac": "bytes read / bytes read or written (0..1)",
    "seq_frac": "sequential requests / all requests (0..1)",
    "req_size_log2": "log2 of the mean request size in bytes",
    "small_req_frac": "requests under 10 KiB / all requests (0..1; Darshan's histogram bins)",
    "data_log2": "log2 of the bytes of file data the workload spans",
    "files": "number of files with I/O",
}

#: Darshan's log magic number (``DARSHAN_MAGIC_NR``), right after the 8-byte version string.
DARSHAN_MAGIC = 6567223


@dataclass
class Profile:
    """One workload as a source describes it."""

    source: str
    features: dict
    settings: dict = field(default_factory=dict)
    throughput: float | None = None
    origin: str = ""
    notes: list = field(default_factory=list)

    def to_dict(self):
        return {
            "source": self.source,
            "origin": self.origin,
            "features": self.features,
            "settings": self.settings,
            "throughput": self.throughput,
            "notes": self.notes,
        }


def _log2(x):
    return math.log2(x) if x and x > 0 else 0.0


def _frac(a, b):
    return float(a) / float(b) if b else 0.0


def bench_features(workload, bs, size, files=1):
    """Workload features of a ``numaio bench`` workload (also used for the corpus grid)."""
    return {
        "read_frac": 1.0 if "read" in workload else 0.0,
        "seq_frac": 1.0 if workload.startswith("seq") else 0.0,
        "req_size_log2": _log2(bs),
        "small_req_frac": 1.0 if bs < 10 * 1024 else 0.0,
        "data_log2": _log2(size),
        "files": float(files),
    }


# --- numaio bench --json ----------------------------------------------------------------------


def from_bench(obj, origin=""):
    """A ``numaio bench --json`` object."""
    try:
        workload = obj["workload"]
        bs = int(obj["bs"])
        size = int(obj["size"])
        threads = int(obj["threads"])
        bps = float(obj["bytes_per_s"])
    except (KeyError, TypeError, ValueError) as e:
        raise AdviceError(f"{origin}: not a numaio bench --json result (field {e} missing or bad)")
    settings = {"threads": threads}
    if obj.get("target") == "kernel":
        settings["io"] = "kernel"
    else:
        settings["io"] = "direct" if obj.get("direct_io", True) else "buffered"
        if "policy" in obj:
            settings["policy"] = str(obj["policy"]).split(":")[0]
        if obj.get("cache_bytes") and size:
            settings["cache_frac"] = round(obj["cache_bytes"] / size, 3)
    return Profile(
        source="bench",
        origin=origin,
        features=bench_features(workload, bs, size, obj.get("files") or 1),
        settings=settings,
        throughput=bps,
    )


# --- fio --output-format=json -----------------------------------------------------------------


def _fio_opt(job, glob, key, default=None):
    opts = job.get("job options") or {}
    if key in opts:
        return opts[key]
    return glob.get(key, default)


def _parse_size(s):
    s = str(s).strip().upper()
    mult = 1
    for suffix, m in (("KIB", 1 << 10), ("MIB", 1 << 20), ("GIB", 1 << 30), ("K", 1 << 10),
                      ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if s.endswith(suffix):
            mult, s = m, s[: -len(suffix)]
            break
    return int(float(s) * mult)


def from_fio(obj, origin=""):
    """fio's ``--output-format=json`` output (one or more jobs, summed)."""
    jobs = obj.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise AdviceError(f"{origin}: fio JSON has no jobs")
    glob = obj.get("global options") or {}
    rbytes = wbytes = rios = wios = seq_ios = small_ios = 0
    bw = 0.0
    clones = {}
    files = {}
    direct = False
    try:
        for job in jobs:
            rd, wr = job.get("read") or {}, job.get("write") or {}
            rb, wb = int(rd.get("io_bytes", 0)), int(wr.get("io_bytes", 0))
            ri, wi = int(rd.get("total_ios", 0)), int(wr.get("total_ios", 0))
            rw = str(_fio_opt(job, glob, "rw", _fio_opt(job, glob, "readwrite", "read")))
            bs = _parse_size(_fio_opt(job, glob, "bs", "4k"))
            name = job.get("jobname", "")
            numjobs = int(_fio_opt(job, glob, "numjobs", 1))
            entries, _ = clones.get(name, (0, numjobs))
            clones[name] = (entries + 1, numjobs)
            size = _fio_opt(job, glob, "size")
            fname = _fio_opt(job, glob, "filename")
            span = _parse_size(size) if size else rb + wb
            # Without a filename each clone has a file of its own.
            key = fname if fname else f"{name}.{len(files)}"
            files[key] = max(files.get(key, 0), span * (1 if fname else numjobs))
            rbytes, wbytes, rios, wios = rbytes + rb, wbytes + wb, rios + ri, wios + wi
            if "rand" not in rw:
                seq_ios += ri + wi
            if bs < 10 * 1024:
                small_ios += ri + wi
            bw += float(rd.get("bw_bytes", 0)) + float(wr.get("bw_bytes", 0))
            direct = direct or str(_fio_opt(job, glob, "direct", "0")) == "1"
    except (TypeError, ValueError, AttributeError) as e:
        raise AdviceError(f"{origin}: fio JSON with unexpected values ({e})")
    ios = rios + wios
    if ios == 0:
        raise AdviceError(f"{origin}: fio JSON reports no I/O")
    # group_reporting folds the numjobs clones of a job into one entry.
    nprocs = sum(max(entries, numjobs) for entries, numjobs in clones.values())
    features = {
        "read_frac": _frac(rbytes, rbytes + wbytes),
        "seq_frac": _frac(seq_ios, ios),
        "req_size_log2": _log2((rbytes + wbytes) / ios),
        "small_req_frac": _frac(small_ios, ios),
        "data_log2": _log2(sum(files.values()) or (rbytes + wbytes)),
        "files": float(len(files)),
    }
    settings = {"threads": nprocs, "io": "direct" if direct else "kernel"}
    return Profile(source="fio", origin=origin, features=features, settings=settings,
                   throughput=bw or None)


# --- numaio ps --json ---------------------------------------------------------------------------


def from_ps(rounds, origin="", pid=None):
    """One or more ``numaio ps --json`` rounds (``--watch`` prints one per line)."""
    procs = {}
    for r in rounds:
        if not isinstance(r, dict) or not isinstance(r.get("processes"), list):
            raise AdviceError(f"{origin}: not a numaio ps --json capture (no \"processes\" list)")
        try:
            for p in r["processes"]:
                if pid is not None and p.get("pid") != pid:
                    continue
                acc = procs.setdefault(p.get("pid"), {"r": 0.0, "w": 0.0, "t": 0.0, "files": {},
                                                      "threads": 1, "rreq": []})
                interval = float(p.get("interval_secs") or r.get("interval_secs") or 1.0)
                rb = float(p.get("read_bytes_per_sec") or 0) * interval
                acc["r"] += rb
                acc["w"] += float(p.get("write_bytes_per_sec") or 0) * interval
                acc["t"] += interval
                acc["threads"] = max(acc["threads"], int(p.get("threads") or 1))
                if p.get("avg_read_bytes"):
                    acc["rreq"].append((rb, float(p["avg_read_bytes"])))
                for f in p.get("files") or []:
                    if int(f.get("size_bytes") or 0) > 0:
                        acc["files"][f.get("path")] = int(f["size_bytes"])
        except (TypeError, ValueError, AttributeError) as e:
            raise AdviceError(f"{origin}: numaio ps capture with unexpected values ({e})")
    if not procs:
        who = f"process {pid}" if pid is not None else "any process"
        raise AdviceError(f"{origin}: the capture has no I/O of {who}; capture while it runs")
    # The busiest process is the workload.
    best = max(procs.values(), key=lambda a: a["r"] + a["w"])
    total = best["r"] + best["w"]
    if total <= 0:
        raise AdviceError(f"{origin}: the process did no file I/O during the capture")
    wsum = sum(w for w, _ in best["rreq"])
    req = sum(w * a for w, a in best["rreq"]) / wsum if wsum else 4096.0
    notes = ["numaio ps does not see the access order: seq_frac is a guess from the request "
             "size (>= 128 KiB: sequential)"]
    features = {
        "read_frac": _frac(best["r"], total),
        "seq_frac": 1.0 if req >= 128 * 1024 else 0.0,
        "req_size_log2": _log2(req),
        "small_req_frac": 1.0 if req < 10 * 1024 else 0.0,
        "data_log2": _log2(sum(best["files"].values()) or total),
        "files": float(max(1, len(best["files"]))),
    }
    # The main thread of a multi-threaded program seldom does the I/O itself.
    threads = best["threads"] - 1 if best["threads"] > 1 else 1
    return Profile(source="ps", origin=origin, features=features,
                   settings={"threads": threads, "io": "kernel"},
                   throughput=total / max(best["t"], 1e-9), notes=notes)


# --- Darshan ------------------------------------------------------------------------------------


def check_darshan_header(path):
    """Refuse files that are not Darshan logs before the C library sees them."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise AdviceError(f"{path}: cannot read: {e.strerror}")
    if len(head) < 16:
        raise AdviceError(f"{path}: not a Darshan log (only {len(head)} bytes)")
    (magic,) = struct.unpack("<q", head[8:16])
    if magic != DARSHAN_MAGIC:
        raise AdviceError(f"{path}: not a Darshan log (no Darshan magic number in its header)")


# POSIX access-size histogram bins under 10 KiB.
_SMALL_BINS = ("0_100", "100_1K", "1K_10K")


def darshan_counters(path, timeout=120):
    """Sum of the POSIX and STDIO counters of a Darshan log, via pydarshan.

    The log is read in a child process: darshan-util's C reader crashes (SIGSEGV) on some
    truncated logs, and prints its own errors on stderr; the child keeps both away from us.
    """
    check_darshan_header(path)
    if importlib.util.find_spec("darshan") is None:
        raise AdviceError("reading Darshan logs needs pydarshan (PyPI package darshan); "
                          "install it with: scripts/setup-python.sh")
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in
                                         env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        p = subprocess.run([sys.executable, "-m", "numaio_advisor._darshan_reader", str(path)],
                           capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise AdviceError(f"{path}: reading the Darshan log took over {timeout} s; damaged?")
    if p.returncode != 0:
        if p.returncode < 0:
            why = f"the Darshan reader crashed (signal {-p.returncode})"
        else:
            why = (p.stderr.strip().splitlines() or ["failed"])[-1]
        raise AdviceError(f"{path}: cannot read the Darshan log (truncated or damaged?): {why}")
    try:
        sums = json.loads(p.stdout)
    except json.JSONDecodeError:
        raise AdviceError(f"{path}: the Darshan reader printed no counters")
    if not any(k.startswith(("POSIX_", "STDIO_")) for k in sums):
        raise AdviceError(f"{path}: the Darshan log has no POSIX or STDIO records")
    return sums


def read_darshan_in_process(path):
    """The child's side of :func:`darshan_counters`: summed counters, NPROCS and FILES."""
    from darshan.report import DarshanReport

    rep = DarshanReport(path, read_all=False)
    mods = set(rep.modules)
    nprocs = int(rep.metadata.get("job", {}).get("nprocs", 1) or 1)
    sums = {}
    nfiles = 0
    for mod in ("POSIX", "STDIO"):
        if mod not in mods:
            continue
        rep.mod_read_all_records(mod, dtype="numpy", warnings=False)
        recs = rep.records[mod].to_df()
        counters, fcounters = recs["counters"], recs["fcounters"]
        for df in (counters, fcounters):
            for col in df.columns:
                if col.startswith(mod + "_"):
                    v = df[col]
                    # Darshan marks counters it could not keep with -1.
                    sums[col] = float(v[v > 0].sum())
        n = int(counters["id"].nunique())
        sums[mod + "_FILES"] = float(n)
        if mod == "POSIX":
            nfiles = n
    sums["NPROCS"] = float(nprocs)
    sums["FILES"] = float(nfiles or sums.get("STDIO_FILES", 0))
    return sums


def from_darshan_counters(c, origin=""):
    """Map summed Darshan counters to the feature table."""
    g = c.get
    rbytes = g("POSIX_BYTES_READ", 0) + g("STDIO_BYTES_READ", 0)
    wbytes = g("POSIX_BYTES_WRITTEN", 0) + g("STDIO_BYTES_WRITTEN", 0)
    preads, pwrites = g("POSIX_READS", 0), g("POSIX_WRITES", 0)
    ios = preads + pwrites + g("STDIO_READS", 0) + g("STDIO_WRITES", 0)
    if ios <= 0 or rbytes + wbytes <= 0:
        raise AdviceError(f"{origin}: the Darshan log records no reads or writes")
    pios = preads + pwrites
    seq = g("POSIX_SEQ_READS", 0) + g("POSIX_SEQ_WRITES", 0)
    small = sum(g(f"POSIX_SIZE_{op}_{b}", 0) for op in ("READ", "WRITE") for b in _SMALL_BINS)
    span = g("POSIX_MAX_BYTE_READ", 0) + g("POSIX_MAX_BYTE_WRITTEN", 0)
    span = max(span, g("STDIO_MAX_BYTE_READ", 0) + g("STDIO_MAX_BYTE_WRITTEN", 0))
    features = {
        "read_frac": _frac(rbytes, rbytes + wbytes),
        # STDIO keeps no sequential or size counters: POSIX requests speak for the log.
        "seq_frac": _frac(seq, pios) if pios else 1.0,
        "req_size_log2": _log2((rbytes + wbytes) / ios),
        "small_req_frac": _frac(small, pios) if pios else 0.0,
        "data_log2": _log2(span or (rbytes + wbytes)),
        "files": max(1.0, g("FILES", 1.0)),
    }
    io_time = (g("POSIX_F_READ_TIME", 0) + g("POSIX_F_WRITE_TIME", 0)
               + g("STDIO_F_READ_TIME", 0) + g("STDIO_F_WRITE_TIME", 0))
    nprocs = max(1, int(g("NPROCS", 1)))
    thr = (rbytes + wbytes) / io_time * nprocs if io_time > 0 else None
    return Profile(source="darshan", origin=origin, features=features,
                   settings={"threads": nprocs, "io": "kernel"}, throughput=thr)


def from_darshan(path):
    return from_darshan_counters(darshan_counters(path), origin=str(path))


# --- dispatch -------------------------------------------------------------------------------------


def load_profile(path):
    """Read any supported source from a file, telling them apart by content."""
    if not os.path.exists(path):
        raise AdviceError(f"{path}: no such file")
    if os.path.isdir(path):
        raise AdviceError(f"{path}: is a directory; give a Darshan log, a numaio ps/bench "
                          "JSON or an fio JSON file")
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError as e:
        raise AdviceError(f"{path}: cannot read: {e.strerror}")
    text = head.lstrip()
    if text.startswith(b"{"):
        try:
            with open(path, encoding="utf-8") as f:
                data = f.read()
        except OSError as e:
            raise AdviceError(f"{path}: cannot read: {e.strerror}")
        except UnicodeDecodeError:
            raise AdviceError(f"{path}: neither JSON text nor a Darshan log")
        objs = _json_objects(data, path)
        first = objs[0]
        if "jobs" in first and ("fio version" in first or "global options" in first):
            return from_fio(first, origin=str(path))
        if "processes" in first:
            return from_ps(objs, origin=str(path))
        if "ops_per_s" in first and "workload" in first:
            return from_bench(first, origin=str(path))
        raise AdviceError(f"{path}: JSON of an unknown kind (expected fio --output-format=json, "
                          "numaio ps --json or numaio bench --json)")
    return from_darshan(path)


def _json_objects(data, path):
    """A single JSON document, or JSON lines (``numaio ps --json --watch``)."""
    try:
        obj = json.loads(data)
        return [obj]
    except json.JSONDecodeError:
        pass
    objs = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            objs.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise AdviceError(f"{path}: line {n}: bad JSON ({e.msg}); truncated file?")
    if not objs:
        raise AdviceError(f"{path}: empty JSON file")
    return objs
