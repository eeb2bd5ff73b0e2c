#!/usr/bin/env bash
# bench/op_instructions.sh counts a collective's instructions on rank 1: a short run over TCP
# prints one row per collective with a plausible count (exit 77 without valgrind).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$1"
command -v valgrind >/dev/null || { echo "skip: no valgrind"; exit 77; }
out="$(OPS=300 "$here/op_instructions.sh" broadcast,allreduce tcp 8 "$bin")"
echo "$out"
for c in broadcast allreduce; do
  n="$(echo "$out" | awk -F'|' -v c="$c" '$2 ~ " " c " " {gsub(/ /, "", $5); print $5}')"
  # A received 8 B message costs braid a few thousand instructions (docs/benchmarks.md); far
  # fewer means callgrind counted nothing, far more that it counted the start-up.
  if [ -z "$n" ] || [ "$n" -lt 300 ] || [ "$n" -gt 200000 ]; then
    echo "FAIL: $c: '$n' instructions per operation" >&2
    exit 1
  fi
done
echo "ok"
