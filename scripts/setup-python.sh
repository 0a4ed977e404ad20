#!/usr/bin/env bash
# Installs the Python side of `numaio advise` (python/numaio_advisor and its dependencies:
# scikit-learn, pandas, pydarshan, matplotlib, tqdm; for its tests pytest and
# kubernetes-validate, which checks dist/kubernetes) into the git-ignored .venv/ of
# this checkout. A venv works on Debian, whose system Python refuses `pip install` outside one
# (PEP 668). `numaio advise` finds .venv/ by itself; NUMAIO_PYTHON overrides it.
# Safe to run again: pip only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup-python] %s\n' "$*"; }
die() { printf '[setup-python] ERROR: %s\n' "$*" >&2; exit 1; }

PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "$PY not found: install Python 3 (Debian: apt-get install python3 python3-venv)"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || die "$PY is older than 3.9"

if [ ! -x .venv/bin/python3 ]; then
    say "creating .venv with $PY"
    "$PY" -m venv .venv || die "$PY -m venv failed: install the venv module (Debian: apt-get install python3-venv) and run again"
fi
# A non-editable install: the venv keeps working when the checkout's files change branch.
say "installing python/ (numaio_advisor) and its dependencies"
.venv/bin/python3 -m pip install --quiet --disable-pip-version-check "./python[test]" \
    || die "pip install failed (network, or a package index that pip cannot reach?)"
.venv/bin/python3 -c 'import numaio_advisor, sklearn, pandas, darshan, matplotlib, kubernetes_validate, yaml' \
    || die "the packages installed but do not import; see the error above"
say "ok: $(.venv/bin/python3 -c 'import sklearn, pandas, darshan; print("scikit-learn", sklearn.__version__, "pandas", pandas.__version__, "darshan", darshan.__version__)')"
