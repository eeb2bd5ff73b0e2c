#!/usr/bin/env bash
# Does automatic selection pick the fastest allreduce? On emulated hosts (scripts/emucluster.sh,
# 2 hosts x 2 ranks, links shaped to RATE), braid-perf allreduce 1 KiB - 64 MiB runs with the
# default selection and with each algorithm forced (BRAID_ALGO=allreduce:NAME), interleaved round
# by round; the report gives per size the median time of each, the algorithm the selection ran,
# and auto's time over the best forced one's (the issue's aim: within 10 %).
# Usage (root): bench/selection_netns.sh [ROUNDS=3] [RATE=1gbit|none] [MAXBYTES=64M]
# Output: results/selection/*.json and results/selection/report.md (printed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
rate="${2:-1gbit}"
maxb="${3:-64M}"
out="$repo/results/selection"
mkdir -p "$out"
rm -f "$out"/*.json
shape=()
[ "$rate" != none ] && shape=(--rate "$rate")
BIN="$repo/build/bin"
configs=(auto ring recursive_doubling halving_doubling double_binary_tree hierarchical)
for k in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    echo "== round $k/$rounds: $c" >&2
    envs=()
    [ "$c" != auto ] && envs=(--env "BRAID_ALGO=allreduce:$c")
    "$repo/scripts/emucluster.sh" --bin "$BIN" --hosts 2 --ranks 2 "${shape[@]}" "${envs[@]}" \
      --timeout 900 --quiet -- "$BIN/braid-perf" allreduce -b 1K -e "$maxb" -f 4 -w 2 --reps 3 \
      -c 0 --json "$out/$c.run$k.json"
  done
done
/usr/bin/python3 - "$out" "$rate" "${configs[@]}" <<'PY' | tee "$out/report.md"
import glob, json, statistics, sys
out, rate, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(c):
    by = {}
    for f in sorted(glob.glob(f"{out}/{c}.run*.json")):
        for line in open(f):
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            by.setdefault(r["size"], []).append(r)
    return by
data = {c: load(c) for c in configs}
def fmt(b):
    for unit, s in (("M", 20), ("K", 10)):
        if b >= 1 << s and b % (1 << s) == 0:
            return f"{b >> s}{unit}"
    return str(b)
forced = [c for c in configs if c != "auto"]
print(f"# allreduce, 2 hosts x 2 ranks, link {rate}: median time (us) per size\n")
print("| size | " + " | ".join(configs) + " | auto ran | best forced | auto / best |")
print("|---:|" + "---:|" * len(configs) + "---|---|---:|")
worst = 0.0
for size in sorted(data["auto"]):
    med = {c: statistics.median(r["time_us"] for r in data[c][size]) for c in configs if size in data[c]}
    ran = sorted({r["algo"] for r in data["auto"][size]})
    best = min((c for c in forced if c in med), key=lambda c: med[c])
    ratio = med["auto"] / med[best]
    worst = max(worst, ratio)
    cells = " | ".join(f"{med[c]:.1f}" if c in med else "-" for c in configs)
    print(f"| {fmt(size)} | {cells} | {', '.join(ran)} | {best} | {ratio:.2f} |")
print(f"\nauto over the best forced algorithm: at most {worst:.2f}x "
      f"({'within' if worst <= 1.10 else 'NOT within'} 10 %)")
PY
