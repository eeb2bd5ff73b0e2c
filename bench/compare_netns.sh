#!/usr/bin/env bash
# braid vs gloo between emulated hosts, side by side: 2 hosts x 2 ranks, 1-64 MiB, on one
# emulated cluster (scripts/emucluster.sh: a bridge, every host's link shaped both ways with tc
# tbf at RATE), with the fraction of the link's bound each of braid's results reaches.
#   braid: braid-perf COLLS (checked after timing)
#   gloo:  the anchors' gloo/gloo_bench.py (torch.distributed gloo, GLOO_SOCKET_IFNAME=emu0)
#          started on the same cluster by braid-run (RANK, WORLD_SIZE), with the project's
#          .venv torch (2.x: its gloo has reduce_scatter), else Debian's /usr/bin/python3
# The runs are interleaved (braid, gloo, braid, gloo, ...) and the report takes medians
# (bench/compare.py: busbw ratio braid/gloo per size; > 1 means braid is faster), then the
# bound: the bytes each host must send to the other (allreduce S, allgather and reducescatter
# S/2 for S the nccl-tests size) at RATE, with TCP/IP framing (1514 bytes on the wire per 1448
# of payload), against braid's median time.
# Usage (root): [COLLS=allreduce,allgather,reducescatter] [ANCHORS=DIR]
#               bench/compare_netns.sh [ROUNDS=3] [MODE=1gbit|10gbit|nolimit]
# Output: results/netns/*.txt|json and results/netns/report_MODE.md (printed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
mode="${2:-1gbit}"
colls="${COLLS:-allreduce}"
case "$mode" in
  1gbit | 10gbit) rate=(--rate "$mode") ;;
  nolimit) rate=() ;;
  *) echo "compare_netns: MODE must be 1gbit, 10gbit or nolimit, got '$mode'" >&2; exit 2 ;;
esac
out="$repo/results/netns"
mkdir -p "$out"
rm -f "$out"/braid_"$mode".*.run*.json "$out"/gloo4_"$mode".run*.txt
anchors="$repo/results/anchors"
. "$here/anchors.sh"
anchors_prepare "$anchors" setup
BIN="$repo/build/bin"
py=/usr/bin/python3
[ -x "$repo/.venv/bin/python" ] && py="$repo/.venv/bin/python"
# gloo_bench.py's names: the same as braid-perf's except broadcast.
gcolls="${colls//broadcast/bcast}"
for k in $(seq 1 "$rounds"); do
  echo "== round $k/$rounds: braid (2 hosts x 2 ranks, $mode)"
  for c in ${colls//,/ }; do
    "$repo/scripts/emucluster.sh" --bin "$BIN" --hosts 2 --ranks 2 "${rate[@]}" --timeout 900 \
      --quiet --out "$out/emu_$mode.$c.run$k" -- \
      "$BIN/braid-perf" "$c" -b 1M -e 64M -f 4 -w 2 --reps 5 -c 1 \
      --json "$out/braid_$mode.$c.run$k.json"
  done
  echo "== round $k/$rounds: gloo (2 hosts x 2 ranks, $mode)"
  "$repo/scripts/emucluster.sh" --bin "$BIN" --hosts 2 --ranks 2 "${rate[@]}" --timeout 900 \
    --quiet --port 29600 --env GLOO_SOCKET_IFNAME=emu0 --out "$out/emu_gloo_$mode.run$k" -- \
    sh -c "exec $py $anchors/gloo/gloo_bench.py --rank \$RANK --world \$WORLD_SIZE \
      --init tcp://198.18.0.1:29700 -c $gcolls -b $((1 << 20)) -e $((64 << 20)) -f 4 -r 5 -w 2"
  sed -n 's/^\[0\] //p' "$out/emu_gloo_$mode.run$k/h0.log" > "$out/gloo4_$mode.run$k.txt"
done
{
  /usr/bin/python3 "$here/compare.py" "$out" --braid "braid_$mode" --gloo "gloo4_$mode"
  [ "$mode" = nolimit ] && exit 0
  /usr/bin/python3 - "$out" "$mode" <<'PY'
import glob, json, os, statistics, sys
out, mode = sys.argv[1], sys.argv[2]
bits = {"1gbit": 1e9, "10gbit": 1e10}[mode]
# Bytes each host must send to the other, as a fraction of the nccl-tests size S.
across = {"allreduce": 1.0, "allgather": 0.5, "reducescatter": 0.5, "broadcast": 1.0}
times = {}
for f in glob.glob(os.path.join(out, f"braid_{mode}.*.run*.json")):
    for line in open(f):
        r = json.loads(line)
        times.setdefault((r["collective"], r["size"], r["algo"]), []).append(r["time_us"])
print(f"\n### braid against the link's bound ({mode}, 2 hosts x 2 ranks)\n")
print("| collective | size | algorithm | braid time us | bound us | of the bound |")
print("|---|---:|---|---:|---:|---:|")
for (coll, size, algo) in sorted(times, key=lambda k: (k[0], k[1])):
    if coll not in across:
        continue
    t = statistics.median(times[(coll, size, algo)])
    bound = across[coll] * size * 8 / bits * 1514 / 1448 * 1e6
    print(f"| {coll} | {size >> 20}M | {algo} | {t:.0f} | {bound:.0f} | {100 * bound / t:.0f} % |")
PY
} | tee "$out/report_$mode.md"
