"""Child process that reads one Darshan log and prints its summed counters as JSON."""

import json
import sys

from .features import read_darshan_in_process

if __name__ == "__main__":
    try:
        print(json.dumps(read_darshan_in_process(sys.argv[1])))
    except Exception as e:  # any failure is reported by the parent, without a traceback
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
