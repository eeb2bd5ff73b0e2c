#!/usr/bin/env bash
# What straggler stamps and metrics cost per operation (docs/benchmarks.md, "Cost of straggler
# attribution and metrics"): braid-perf allreduce at 8 B and 1 MiB with everything off (the
# default), with BRAID_STRAGGLER=1 (precise stamps only) and with BRAID_METRICS_FILE (precise
# stamps, metrics recorded per operation, the metrics thread writing the file and exchanging the
# stamps every BRAID_METRICS_INTERVAL=1s), interleaved run by run; prints the median and the
# fastest time per size and setting, and the ratio of the medians to "off".
#
# Usage: bench/observe_ab.sh [ROUNDS=9] [RANKS=2] [TRANSPORT=shm|tcp]
# Output: results/observe_ab/*.json and the table on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-9}"
ranks="${2:-2}"
transport="${3:-shm}"
BIN="${BIN:-$repo/build/bin}"
out="${OUT:-$repo/results/observe_ab}"
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.prom
unset BRAID_ALGO BRAID_STRAGGLER BRAID_METRICS_FILE BRAID_METRICS_PORT BRAID_METRICS_INTERVAL
shm=()
[ "$transport" = tcp ] && shm=(BRAID_SHM_DISABLE=1)
for k in $(seq 1 "$rounds"); do
  for s in off stamps metrics; do
    envs=("${shm[@]}")
    [ "$s" = stamps ] && envs+=(BRAID_STRAGGLER=1)
    [ "$s" = metrics ] && envs+=("BRAID_METRICS_FILE=$out/m.%r.prom" BRAID_METRICS_INTERVAL=1s)
    env "${envs[@]}" "$BIN/braid-run" -n "$ranks" -- "$BIN/braid-perf" allreduce -b 8 -e 8 \
      -n 50000 -c 0 --json "$out/small.$s.run$k.json" >/dev/null
    env "${envs[@]}" "$BIN/braid-run" -n "$ranks" -- "$BIN/braid-perf" allreduce -b 1M -e 1M \
      -n 100 -c 0 --json "$out/large.$s.run$k.json" >/dev/null
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
settings = ("off", "stamps", "metrics")
data = {}
for s in settings:
    for f in sorted(glob.glob(f"{out}/*.{s}.run*.json")):
        for line in open(f):
            j = json.loads(line)
            data.setdefault((j["size"], j["algo"]), {}).setdefault(s, []).append(j["time_us"])
print("| size | algorithm | " + " | ".join(f"{s}: median (min) us" for s in settings) +
      " | stamps/off | metrics/off |")
print("|---|---|" + "---|" * (len(settings) + 2))
for (size, algo), v in sorted(data.items()):
    if any(not v.get(s) for s in settings):
        continue
    med = {s: statistics.median(v[s]) for s in settings}
    cells = [f"{med[s]:.3f} ({min(v[s]):.3f})" for s in settings]
    print(f"| {size} | {algo} | " + " | ".join(cells) +
          f" | {med['stamps'] / med['off']:.3f} | {med['metrics'] / med['off']:.3f} |")
PY
