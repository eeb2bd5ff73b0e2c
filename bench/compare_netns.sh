#!/usr/bin/env bash
# braid vs gloo between emulated hosts, side by side: allreduce 1-64 MiB on 2 hosts x 2 ranks.
#   braid: scripts/emucluster.sh --hosts 2 --ranks 2 [--rate RATE] (a bridge, every host's link
#          shaped both ways with tc tbf) running braid-perf allreduce (checked after timing)
#   gloo:  ../shared/anchors/netns/run.sh MODE 1 gloo (two namespaces on one veth pair, both ends
#          shaped with the same tbf; torch.distributed gloo, its flat ring, 4 ranks)
# The runs are interleaved (braid, gloo, braid, gloo, ...) and the report takes medians
# (bench/compare.py: busbw ratio braid/gloo per size; > 1 means braid is faster).
# Usage (root; torch for gloo): [ANCHORS=DIR] bench/compare_netns.sh [ROUNDS=3] [MODE=1gbit|nolimit]
# Output: results/netns/*.txt|json and results/netns/report_MODE.md (printed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
mode="${2:-1gbit}"
case "$mode" in
  1gbit) rate=(--rate 1gbit) ;;
  nolimit) rate=() ;;
  *) echo "compare_netns: MODE must be 1gbit or nolimit, got '$mode'" >&2; exit 2 ;;
esac
out="$repo/results/netns"
mkdir -p "$out"
rm -f "$out"/braid_"$mode".allreduce.run*.json "$out"/gloo4_"$mode".run*.txt
anchors="$repo/results/anchors"
. "$here/anchors.sh"
anchors_prepare "$anchors" setup
BIN="$repo/build/bin"
for k in $(seq 1 "$rounds"); do
  echo "== round $k/$rounds: braid (2 hosts x 2 ranks, $mode)"
  "$repo/scripts/emucluster.sh" --bin "$BIN" --hosts 2 --ranks 2 "${rate[@]}" --timeout 900 \
    --quiet --out "$out/emu_$mode.run$k" -- \
    "$BIN/braid-perf" allreduce -b 1M -e 64M -f 4 -w 2 --reps 5 -c 1 \
    --json "$out/braid_$mode.allreduce.run$k.json"
  sed -n 's/^\[0\] //p' "$out/emu_$mode.run$k/h0.log" > "$out/braid_$mode.allreduce.run$k.txt"
  echo "== round $k/$rounds: gloo (2 hosts x 2 ranks, $mode)"
  OUT_DIR="$out/gloo_round$k" bash "$anchors/netns/run.sh" "$mode" 1 gloo >/dev/null
  mv "$out/gloo_round$k/gloo4_$mode.run1.txt" "$out/gloo4_$mode.run$k.txt"
done
/usr/bin/python3 "$here/compare.py" "$out" --braid "braid_$mode" --gloo "gloo4_$mode" |
  tee "$out/report_$mode.md"
