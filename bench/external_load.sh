#!/usr/bin/env bash
# braid-perf at 2 ranks while other work competes for the CPUs (docs/benchmarks.md, "Waiting
# under external load"): HOGS busy loops at nice 10 (a build, another job), then the same
# without them, interleaved ROUNDS times; prints braid-perf's table for each. A waiter that
# gives up its CPU while it waits (a yield, or a poll that the scheduler preempts) can lose a
# whole scheduler slice (milliseconds) to the other work while its peer answers in microseconds.
#
# Usage: bench/external_load.sh [ROUNDS=2] [HOGS=2] [TRANSPORT=shm|tcp] [COLLS=broadcast,reduce,allreduce] [MINBYTES=8] [MAXBYTES=8M]
#   BINDIR=DIR: braid-run and braid-perf from DIR instead of build/bin; extra BRAID_* variables
#   in the environment apply to braid-perf (e.g. BRAID_SPIN_US=0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
BIN="${BINDIR:-$(dirname "$here")/build/bin}"
rounds="${1:-2}"
hogs="${2:-2}"
transport="${3:-shm}"
colls="${4:-broadcast,reduce,allreduce}"
minb="${5:-8}"
maxb="${6:-8M}"
env=()
[ "$transport" = tcp ] && env=(BRAID_SHM_DISABLE=1)
pids=()
stop_hogs() {
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null || true
  pids=()
}
trap stop_hogs EXIT
echo "# $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, transport $transport"
for k in $(seq 1 "$rounds"); do
  for load in "$hogs" 0; do
    for _ in $(seq 1 "$load"); do
      nice -n 10 sh -c 'while :; do :; done' &
      pids+=($!)
    done
    sleep 0.2
    echo "## round $k, $load nice-10 busy loops"
    env "${env[@]}" "$BIN/braid-run" -n 2 -- "$BIN/braid-perf" "$colls" -b "$minb" -e "$maxb" \
      -f 4 -w 5 --reps 3 -c 0 | grep -v '^\[1\]' | grep -Ev '^\[0\] # (braid-perf|minBytes|options|time|avg)'
    stop_hogs
  done
done
