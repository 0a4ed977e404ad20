#!/bin/bash
# Measures the daemon's CPU per interval with 200 processes (docs/daemon.md).
# 150 sleepers + 50 light readers (64 KiB every 20 ms) of one cached 64 MiB file, then
# `numaio daemon` for 20 one-second intervals; prints median/mean CPU per interval.
# Usage: cargo build --release && crates/numaio-proc/scripts/measure_daemon_200.sh [daemon flags]
set -u
B=${NUMAIO_BIN_DIR:-$(dirname "$0")/../../../target/release}
F=$(mktemp /tmp/numaio-m200.XXXXXX)
LOG=$(mktemp /tmp/numaio-m200-log.XXXXXX)
head -c $((64 << 20)) /dev/urandom > "$F"
cat "$F" > /dev/null
PIDS=()
for _ in $(seq 150); do sleep 900 & PIDS+=($!); done
for _ in $(seq 50); do
    "$B/numaio-probe" reader --file "$F" --block-size 64K --pause-us 20000 --interval-ms 1000000 > /dev/null &
    PIDS+=($!)
done
sleep 2
"$B/numaio" daemon --interval 1 --iterations 20 --json --policy auto "$@" > "$LOG"
kill "${PIDS[@]}" 2> /dev/null
wait 2> /dev/null
python3 - "$LOG" <<'PY'
import json, statistics, sys
iv = [l for l in map(json.loads, open(sys.argv[1])) if l.get("event") == "interval"]
c = [l["cpu_secs"] * 1000 for l in iv[1:]]
print(f"intervals {len(iv)}, scanned {iv[-1]['scanned']}, I/O-active {iv[-1]['io_active']}")
print(f"CPU per interval (after the first): median {statistics.median(c):.1f} ms, "
      f"mean {statistics.mean(c):.1f} ms, max {max(c):.1f} ms; first {iv[0]['cpu_secs']*1000:.1f} ms")
PY
rm -f "$F" "$LOG"
