#!/usr/bin/env bash
# braid over TCP vs Open MPI over TCP loopback vs Gloo, 2 ranks, every collective, side by side:
# the runs are interleaved (braid, MPI, gloo, braid, MPI, gloo, ...) and the report takes medians.
# Usage: bench/compare_tcp.sh [ROUNDS=3] [MAXBYTES=256M]   (root; installs Open MPI and torch)
# Output: results/tcp/*.txt|json, results/tcp/report.md (printed) and results/tcp/plots/*.png
# (bench/plot.py: busbw against size per collective, and the overview of the ratios).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
maxb="${2:-256M}"
out="$repo/results/tcp"
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.txt  # runs of an earlier, longer comparison would mix in
anchors="$repo/results/anchors"
. "$here/anchors.sh"
anchors_prepare "$anchors" setup
BIN="$repo/build/bin"
export BRAID_SHM_DISABLE=1  # TCP only: this comparison is about the TCP transport
for k in $(seq 1 "$rounds"); do
  echo "== round $k/$rounds: braid"
  for c in allreduce reducescatter allgather broadcast reduce alltoall; do
    "$BIN/braid-run" -n 2 --timeout 900 -- "$BIN/braid-perf" "$c" -b 8 -e "$maxb" -f 4 -w 5 \
      --reps 7 -c 0 --json "$out/braid.$c.run$k.json" > "$out/braid.$c.run$k.txt"
  done
  echo "== round $k/$rounds: Open MPI tcp"
  OUT_DIR="$out" START=$k bash "$anchors/mpi/run.sh" tcp "$k" >/dev/null
  echo "== round $k/$rounds: gloo"
  # A failed gloo run (it ends early now and then) leaves a partial file; the rounds go on.
  OUT_DIR="$out" START=$k bash "$anchors/gloo/run.sh" "$k" 2 >/dev/null ||
    echo "gloo round $k failed (exit $?): its file holds the sizes it reached"
done
/usr/bin/python3 "$here/compare.py" "$out" --mpi tcp --gloo lo2 | tee "$out/report.md"
# Plots from the same files (bench/plot.py).
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
/usr/bin/python3 "$here/plot.py" "$out" "$out/plots" --braid braid --mpi tcp --gloo lo2 \
  --title "2 ranks, TCP loopback, $cpu"
