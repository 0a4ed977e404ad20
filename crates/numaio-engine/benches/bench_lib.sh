# Shared by the bench scripts here (source it). Needs the array `common`: the arguments every
# `numaio bench` run of the script takes.
# bench_run LABEL BINARY ARGS...: prints "LABEL OPS_PER_S", or "LABEL FAIL" if the run failed.
bench_run() {
  local label=$1 bin=$2; shift 2
  local out
  if ! out=$("$bin" bench "${common[@]}" "$@" 2>/dev/null); then
    echo "$label FAIL"
    return
  fi
  echo "$label $(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ops_per_s"])')"
}
