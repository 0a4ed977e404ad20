"""Trained advisors cached per corpus, so that each `numaio advise` need not retrain.

The key hashes the corpus files, this package's code and scikit-learn's version: any change
retrains. The cache lives in the user's own cache directory and holds only what this package
wrote there.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile

from . import __version__


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "numaio-advisor")


def key(paths):
    import sklearn

    h = hashlib.sha256()
    h.update(f"{__version__} {sklearn.__version__}".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    for p in paths:
        with open(p, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:32]


def load(k):
    path = os.path.join(cache_dir(), k + ".pickle")
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:  # missing, unreadable or from another version: retrain
        return None


def store(k, adv):
    d = cache_dir()
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(adv, f)
        os.replace(tmp, os.path.join(d, k + ".pickle"))
    except OSError:
        pass  # a cache that cannot be written only costs time
