#!/usr/bin/env bash
# Point-to-point before/after: braid-perf sendrecv (a ring: every rank sends to rank+1 while
# receiving from rank-1) with two builds, interleaved round by round so that the load of the
# moment hits both alike: 2 ranks over shared memory, 2 ranks over TCP (BRAID_SHM_DISABLE=1),
# 4 ranks over shared memory. Prints per configuration and size the median time of the rounds
# (docs/benchmarks.md, "Point-to-point").
#
# Usage: bench/p2p.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS=3] [MAXBYTES=16M]
# Output: results/p2p/*.json and the table on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
before="$1"
after="$2"
rounds="${3:-3}"
maxb="${4:-16M}"
out="$repo/results/p2p"
mkdir -p "$out"
rm -f "$out"/*.json
unset BRAID_ALGO
configs=("shm2:2:" "tcp2:2:BRAID_SHM_DISABLE=1" "shm4:4:")
for k in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    IFS=: read -r name ranks setting <<< "$c"
    envs=()
    [ -n "$setting" ] && envs=("$setting")
    for which in before after; do
      bin="$before"
      [ "$which" = after ] && bin="$after"
      env "${envs[@]}" "$bin/braid-run" -n "$ranks" -- "$bin/braid-perf" sendrecv -b 8 -e "$maxb" -f 4 \
        -c 0 --json "$out/$name.$which.run$k.json" >/dev/null
    done
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
for name, title in (("shm2", "2 ranks, shared memory"), ("tcp2", "2 ranks, TCP (BRAID_SHM_DISABLE=1)"),
                    ("shm4", "4 ranks, shared memory")):
    times = {}
    for which in ("before", "after"):
        for f in sorted(glob.glob(f"{out}/{name}.{which}.run*.json")):
            for line in open(f):
                r = json.loads(line)
                times.setdefault((r["size"], which), []).append(r["time_us"])
    sizes = sorted({s for s, _ in times})
    print(f"\n{title}: median of the rounds, us (GB/s)")
    print("| size | before | after | speedup |")
    print("|---:|---:|---:|---:|")
    for s in sizes:
        b = statistics.median(times[(s, "before")])
        a = statistics.median(times[(s, "after")])
        label = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1 << 10 else f"{s} B"
        print(f"| {label} | {b:.1f} ({s / b / 1e3:.3f}) | {a:.1f} ({s / a / 1e3:.3f}) | {b / a:.1f}x |")
PY
