#!/usr/bin/env bash
# The main job: launch 4 local ranks with braid-run and run every collective with checking
# (-c 1: every element on every rank verified), printing the nccl-tests-style table.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
RANKS=${RANKS:-4}
for coll in allreduce allgather reducescatter broadcast reduce alltoall gather scatter sendrecv; do
  echo "== $coll ($RANKS ranks) =="
  "$BIN/braid-run" -n "$RANKS" --timeout 300 -- "$BIN/braid-perf" "$coll" -b 8 -e 16M -f 8 -c 1 -n 5 -w 2 --reps 3
done
"$BIN/braid-info" | sed -n 1,5p  # sed reads everything: no SIGPIPE under pipefail
