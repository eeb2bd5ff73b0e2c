#!/usr/bin/env bash
# The bounded form of bench/creation_scale.sh (issue 23): 64 ranks as processes on this host,
# TCP only, lazy connections, a ring allreduce as the first collective. Checks that it finishes
# with the right sum and that no rank holds more than 2 connections (its ring neighbours; one
# stream). No timing is checked. Usage: creation_ci_test.sh BINDIR [RANKS=64]
set -euo pipefail
bin="$1"
n="${2:-64}"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
out="$(BRAID_SHM_DISABLE=1 BRAID_CONNECT=lazy BRAID_ALGO=allreduce:ring BRAID_CONNECT_TIMEOUT=100s \
  "$bin/braid-run" -n "$n" --bind none --timeout 100 --no-prefix -- "$bin/creation-probe")"
echo "$out"
line="$(grep '^{' <<<"$out" | tail -1)"
[ -n "$line" ] || { echo "FAIL: no result line"; exit 1; }
grep -q "\"nranks\":$n," <<<"$line" || { echo "FAIL: not $n ranks"; exit 1; }
grep -q '"correct":true' <<<"$line" || { echo "FAIL: wrong allreduce result"; exit 1; }
conns="$(sed -n 's/.*"connections":\([0-9]*\).*/\1/p' <<<"$line")"
[ "$conns" -le 2 ] || { echo "FAIL: a rank holds $conns connections, more than 2 (ring, lazy)"; exit 1; }
echo "OK: $n ranks, at most $conns connections per rank"
