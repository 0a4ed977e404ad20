"""``python3 -m numaio_advisor``: checks the dependencies before anything imports them."""

import importlib.util
import os
import sys

# The data are tiny: OpenMP worker threads would only contend with each other (and, on a busy
# machine, make training ten times slower). Must be set before numpy or scikit-learn loads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

INSTALL = "scripts/setup-python.sh  (from the numaio checkout; or: pip install ./python)"
# Import name -> distribution name.
REQUIRED = {"numpy": "numpy", "pandas": "pandas", "sklearn": "scikit-learn"}

# Exit statuses follow numaio's table (docs/exit-codes.md): 1 an error (bad input, a failure, a
# missing dependency), 2 a usage error.
MISSING_DEP_EXIT = 1


def missing_modules(names=REQUIRED):
    out = []
    for mod, dist in names.items():
        try:
            if importlib.util.find_spec(mod) is None:
                out.append(dist)
                continue
            __import__(mod)
        except Exception:  # a broken install counts as missing
            out.append(dist)
    return out


def main():
    # Help needs only the standard library (cli imports the rest when it runs): it prints
    # even where the dependencies are missing.
    wants_help = any(a in ("-h", "--help") for a in sys.argv[1:])
    missing = [] if wants_help else missing_modules()
    if missing:
        print(f"numaio advise: missing Python package(s) {', '.join(missing)} for "
              f"{sys.executable}; install them with: {INSTALL}", file=sys.stderr)
        return MISSING_DEP_EXIT
    from .cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
