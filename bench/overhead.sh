#!/usr/bin/env bash
# What the always-on diagnosis costs per operation: braid-perf allreduce with the defaults, with
# BRAID_FINGERPRINT=0 (tags without the fingerprint; a measurement switch only) and with
# BRAID_FLIGHT_RECORDER=0, interleaved round by round, and a ping-pong probe (braid-perf
# sendrecv at 8 B) before every run that labels the CPU placement of the moment (docs/benchmarks.md,
# "Cost of diagnosis"). Prints the median and the fastest time per size and setting.
#
# Usage: bench/overhead.sh [ROUNDS=7] [RANKS=2] [MAXBYTES=32K] [TRANSPORT=shm|tcp]
# Output: results/overhead/*.json and the table on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-7}"
ranks="${2:-2}"
maxb="${3:-32K}"
transport="${4:-shm}"
BIN="$repo/build/bin"
out="$repo/results/overhead"
mkdir -p "$out"
rm -f "$out"/*.json
unset BRAID_ALGO BRAID_FINGERPRINT BRAID_FLIGHT_RECORDER
shm=()
[ "$transport" = tcp ] && shm=(BRAID_SHM_DISABLE=1)
settings=(default BRAID_FINGERPRINT=0 BRAID_FLIGHT_RECORDER=0)
for k in $(seq 1 "$rounds"); do
  for s in "${settings[@]}"; do
    envs=("${shm[@]}")
    [ "$s" != default ] && envs+=("$s")
    env "${envs[@]}" "$BIN/braid-run" -n "$ranks" -- "$BIN/braid-perf" sendrecv -b 8 -e 8 \
      -n 2000 -c 0 --json "$out/probe.$s.run$k.json" >/dev/null
    env "${envs[@]}" "$BIN/braid-run" -n "$ranks" -- "$BIN/braid-perf" allreduce -b 8 -e "$maxb" \
      -f 4 -n 2000 -c 0 --json "$out/allreduce.$s.run$k.json" >/dev/null
  done
done
/usr/bin/python3 - "$out" "${settings[@]}" <<'EOF'
import glob, json, statistics, sys
out, settings = sys.argv[1], sys.argv[2:]
def rows(pattern):
    r = {}
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            j = json.loads(line)
            r.setdefault(j["size"], []).append((j["time_us"], j.get("algo", "")))
    return r
probe = {s: [t for v in rows(f"{out}/probe.{s}.run*.json").values() for t, _ in v] for s in settings}
print("ping-pong probe (8 B sendrecv), us: " + ", ".join(
    f"{s} median {statistics.median(v):.2f} min {min(v):.2f}" for s, v in probe.items() if v))
data = {s: rows(f"{out}/allreduce.{s}.run*.json") for s in settings}
print("| size | algorithm | " + " | ".join(f"{s}: median (min) us" for s in settings) + " |")
print("|---|---|" + "---|" * len(settings))
for size in sorted(data[settings[0]]):
    algo = data[settings[0]][size][0][1]
    cells = []
    for s in settings:
        t = [x for x, _ in data[s].get(size, [])]
        cells.append(f"{statistics.median(t):.2f} ({min(t):.2f})" if t else "-")
    print(f"| {size} | {algo} | " + " | ".join(cells) + " |")
EOF
