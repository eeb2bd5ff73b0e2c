#!/usr/bin/env bash
# bench/plot.py on result files written here (two braid runs of two collectives, two Open MPI
# runs in the anchors' columns): one PNG per collective and the overview, each a real PNG; a directory without
# braid runs is an error that names it. Checks that the plots are made, not what they show.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
for k in 1 2; do
  for c in allreduce allgather; do
    for s in 8 1024 65536 1048576; do
      printf '{"collective": "%s", "size": %d, "time_us": %s, "busbw": %s}\n' \
        "$c" "$s" "$((s / 1000 + k))" "0.$((s % 7 + k))"
    done > "$tmp/braid2.$c.run$k.json"
  done
  {
    echo "# coll size_B count time_us algbw_GBs busbw_GBs check"
    for c in allreduce allgather; do
      for s in 8 1024 65536 1048576; do
        echo "$c $s $((s / 4)) $((s / 900 + 2)).0 0.1 0.$((s % 5 + 1)) ok"
      done
    done
  } > "$tmp/mpi2.run$k.txt"
done
/usr/bin/python3 "$here/plot.py" "$tmp" "$tmp/plots" --braid braid2 --mpi mpi2 --title "test" \
  > "$tmp/out.txt"
for c in allreduce allgather overview; do
  f="$tmp/plots/braid2.$c.png"
  grep -qx "$f" "$tmp/out.txt" || { echo "FAIL: $f not reported"; cat "$tmp/out.txt"; exit 1; }
  [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || {
    echo "FAIL: $f is not a PNG"
    exit 1
  }
done
if /usr/bin/python3 "$here/plot.py" "$tmp/plots" "$tmp/p2" 2> "$tmp/err.txt"; then
  echo "FAIL: no error for a directory without runs"
  exit 1
fi
grep -q "no braid runs braid.\*.run\*.json in $tmp/plots" "$tmp/err.txt" || {
  echo "FAIL: the error does not name the directory"
  cat "$tmp/err.txt"
  exit 1
}
echo "plot_test: ok"
