#!/usr/bin/env bash
# The hierarchical allreduce at 2 fabricated hosts x 2 ranks (docs/benchmarks.md, "Hierarchies
# on sub-communicators"): a BRAID_TOPO_FILE makes 2 "hosts" of ranks {0,1} and {2,3}, all on this
# machine, so every phase, the "network" one too, runs over shared memory. Three settings,
# interleaved run by run:
#   before  braid-run / braid-perf from BEFORE_BIN (a build without sub-communicators)
#   after   this build: the in-node phases run the node sub-communicator's selection
#   ring    this build, BRAID_ALGO phase rules reducescatterv:ring;allgatherv:ring (what the
#           phases ran before, now on the node sub-communicator)
# Then the in-node phases alone: reducescatter and allgather among 2 ranks of one host, the
# default selection against --algo ring, interleaved.
# Prints the median time (us) per size and setting.
#
# Usage: BEFORE_BIN=DIR bench/hierarchy_ab.sh [ROUNDS=5]   (without BEFORE_BIN: after and ring)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-5}"
BIN="${BIN:-$repo/build/bin}"
topo="$(mktemp /tmp/braid_hier_XXXXXX.json)"
raw="$(mktemp /tmp/braid_hier_XXXXXX.txt)"
trap 'rm -f "$topo" "$raw"' EXIT
echo '{"nodes": [{"host": "h0", "ranks": [0, 1]}, {"host": "h1", "ranks": [2, 3]}]}' >"$topo"
settings=(after ring)
[ -n "${BEFORE_BIN:-}" ] && settings=(before after ring)
for ((round = 1; round <= rounds; ++round)); do
  for v in "${settings[@]}"; do
    b="$BIN" rules=allreduce:hierarchical
    [ "$v" = before ] && b="$BEFORE_BIN"
    [ "$v" = ring ] && rules="allreduce:hierarchical;reducescatterv:ring;allgatherv:ring"
    BRAID_TOPO_FILE="$topo" "$b/braid-run" -n 4 --timeout 300 -- "$b/braid-perf" allreduce \
      --algo "$rules" -b 64K -e 4M -f 4 --reps 3 2>&1 |
      awk -v v="hier-$v" '/^\[0\] +[0-9]/ {print v, $2, $8}' >>"$raw"
  done
  for v in default ring; do
    a=()
    [ "$v" = ring ] && a=(--algo ring)
    "$BIN/braid-run" -n 2 --timeout 300 -- "$BIN/braid-perf" reducescatter,allgather "${a[@]}" \
      -b 64K -e 4M -f 4 --reps 3 2>&1 |
      awk -v v="$v" '/^\[0\] # [a-z]+$/ {c = $3} /^\[0\] +[0-9]/ {print "node-" c "-" v "(" $7 ")", $2, $8}' >>"$raw"
  done
done
python3 - "$raw" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    k, size, t = line.split()
    d[(k, int(size))].append(float(t))
for k in sorted({k for k, _ in d}):
    print(k, " ".join(f"{s}:{statistics.median(d[(k, s)]):.1f}" for s in sorted({s for kk, s in d if kk == k})))
PY
