#!/bin/sh
# CTest bench_placement_probe: build/bin/placement-probe runs and prints what bench/compare_shm.sh
# parses: two positive one-way latencies, the median first and not below the fastest; then a
# positive page-fault cost. Exit 77 (skipped) where fewer than 2 CPUs are allowed.
probe="${1:?usage: placement_probe_test.sh PATH/TO/placement-probe}"
out="$("$probe" 2000 3)"
rc=$?
[ "$rc" = 1 ] && { echo "skipped: fewer than 2 CPUs allowed"; exit 77; }
echo "latency: $out"
echo "$out" | awk 'NF == 2 && $1 > 0 && $2 > 0 && $2 <= $1 { ok = 1 } END { exit !ok }' ||
  { echo "FAIL: expected '<median> <fastest>', both > 0, fastest <= median"; exit 1; }
faults="$("$probe" --page-faults)" || { echo "FAIL: --page-faults exited $?"; exit 1; }
echo "page faults: $faults us per page"
echo "$faults" | awk 'NF == 1 && $1 > 0 { ok = 1 } END { exit !ok }' ||
  { echo "FAIL: expected one positive number"; exit 1; }
"$probe" 0 2>/dev/null && { echo "FAIL: 0 round trips accepted"; exit 1; }
exit 0
