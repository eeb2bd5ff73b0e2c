#!/usr/bin/env bash
# Instructions one rank executes per collective operation (valgrind's callgrind, counted inside
# Comm::COLLECTIVE only): a measure of braid's own per-operation cost that, unlike time, does not
# move with the VM's state. Two ranks; rank 1 runs under callgrind, 50x slower, so its peer is
# always ahead and rank 1 barely waits (its count is the work of receiving and sending, not
# polling). A/B: run it with the two builds' BIN dirs.
# Usage: bench/op_instructions.sh [COLLECTIVES=broadcast,allreduce,allgather] [TRANSPORT=ucx]
#                                 [BYTES=8] [BIN=build/bin]
#   TRANSPORT ucx (UCX_TLS from the environment, default sm,cma,self), tcp (BRAID_SHM_DISABLE=1),
#   or shm (the shared-memory transport; BRAID_ALGO picks the algorithm to count, e.g.
#   broadcast:binomial_tree to count its point-to-point path instead of shm_ll).
# Env: OPS=20000 (operations counted), plus anything braid reads (BRAID_ALGO, ...).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
colls="${1:-broadcast,allreduce,allgather}"
transport="${2:-ucx}"
bytes="${3:-8}"
bin="${4:-$repo/build/bin}"
ops="${OPS:-20000}"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
# Valgrind's CPU has no AVX-512: a rank under it is another machine to the machine profile
# (BRAID_TUNE_CACHE), and would replace this machine's file with figures of a 50x slower CPU.
export BRAID_TUNE_CACHE=off
case "$transport" in
  ucx)
    export BRAID_TRANSPORT=ucx BRAID_SHM_DISABLE=1 UCX_TLS="${UCX_TLS:-sm,cma,self}"
    export UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y
    ;;
  tcp) export BRAID_TRANSPORT=tcp BRAID_SHM_DISABLE=1 ;;
  shm) ;;
  *) echo "TRANSPORT must be ucx, tcp or shm, not '$transport'" >&2; exit 2 ;;
esac
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/rank.sh" <<'SH'
#!/bin/sh
# rank 1 under callgrind, collecting only inside Comm::$COLL
if [ "$BRAID_RANK" = 1 ]; then
  exec valgrind --tool=callgrind --callgrind-out-file="$OUT" --toggle-collect="braid::Comm::$COLL*" "$@" 2>/dev/null
fi
exec "$@"
SH
chmod +x "$tmp/rank.sh"
echo "| collective | transport | bytes | instructions per operation (rank 1) |"
echo "|---|---|---:|---:|"
for c in ${colls//,/ }; do
  OUT="$tmp/$c.cg" COLL="$c" "$bin/braid-run" -n 2 --timeout 600 -- "$tmp/rank.sh" \
    "$bin/braid-perf" "$c" -b "$bytes" -e "$bytes" -n "$ops" -w 10 -c 0 --reps 1 >/dev/null
  total=$(callgrind_annotate "$tmp/$c.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  label="$transport"
  [ "$transport" = ucx ] && label="ucx ($UCX_TLS)"
  echo "| $c | $label | $bytes | $((total / (ops + 10))) |"
done
