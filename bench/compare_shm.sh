#!/usr/bin/env bash
# braid over shared memory vs Open MPI over shared memory (vader + CMA), every collective, side
# by side: 2 ranks, then 4 and 8 ranks oversubscribed on this machine's CPUs. The runs are
# interleaved (braid, Open MPI, braid, Open MPI, ...) and the report takes medians.
# Usage: bench/compare_shm.sh [ROUNDS=3] [MAXBYTES=256M] [RANKS="2 4 8"]
#   (root the first time: installs Open MPI through the anchors' setup)
# Output: results/shm/*.txt|json and results/shm/report.md (printed).
#
# Open MPI, 2 ranks: ../shared/anchors/mpi/run.sh shm (its fixed 8 B .. 256 MiB range) when
# MAXBYTES is 256M; otherwise the same mpirun command line as run.sh shm with -e MAXBYTES.
# 4 and 8 ranks: that command line with -np R --oversubscribe (run.sh's over4 config measures
# allreduce only). Open MPI then yields when idle, as braid's waiters do.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
maxb="${2:-256M}"
ranks="${3:-2 4 8}"
out="$repo/results/shm"
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.txt
# The anchors: $ANCHORS, else ../shared/anchors beside the repository (or beside a worktree's
# parent folder).
src="${ANCHORS:-}"
for cand in "$repo/../shared/anchors" "$repo/../../shared/anchors"; do
  [ -n "$src" ] || { [ -d "$cand" ] && src="$cand"; } || true
done
[ -d "$src" ] || { echo "no anchors folder (set ANCHORS=.../shared/anchors)" >&2; exit 1; }
anchors="$repo/results/anchors"
rm -rf "$anchors"
cp -r "$src" "$anchors"
chmod -R u+w "$anchors"
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  bash "$anchors/run_all.sh" setup >/dev/null
fi
mkdir -p "$anchors/build"
mpicc -O2 -Wall "$anchors/mpi/mpi_coll_bench.c" -o "$anchors/build/mpi_coll_bench"
maxbytes="$(numfmt --from=iec "$maxb")"
BIN="$repo/build/bin"
colls="allreduce reducescatter allgather broadcast reduce alltoall"
unset BRAID_SHM_DISABLE BRAID_ALGO  # the defaults: shm transport, shm_ll / shm_direct
MR=(mpirun --allow-run-as-root --mca oob_tcp_if_include lo --mca pml ob1 --mca btl vader,self)
for k in $(seq 1 "$rounds"); do
  for n in $ranks; do
    echo "== round $k/$rounds: braid, $n ranks"
    for c in $colls; do
      "$BIN/braid-run" -n "$n" --timeout 1800 -- "$BIN/braid-perf" "$c" -b 8 -e "$maxb" -f 4 \
        -w 5 --reps 7 -c 0 --json "$out/braid$n.$c.run$k.json" > "$out/braid$n.$c.run$k.txt"
    done
    echo "== round $k/$rounds: Open MPI shm, $n ranks"
    if [ "$n" = 2 ] && [ "$maxbytes" = $((256 << 20)) ]; then
      OUT_DIR="$out" START=$k bash "$anchors/mpi/run.sh" shm "$k" >/dev/null
      mv "$out/shm.run$k.txt" "$out/mpi$n.run$k.txt"
    else
      over=()
      [ "$n" -gt 2 ] && over=(--oversubscribe)
      "${MR[@]}" -np "$n" "${over[@]}" "$anchors/build/mpi_coll_bench" -b 8 -e "$maxbytes" \
        -f 4 -r 7 > "$out/mpi$n.run$k.txt"
    fi
  done
done
{
  for n in $ranks; do
    echo
    echo "## $n ranks$([ "$n" -gt 2 ] && echo ", oversubscribed on $(nproc) CPUs")"
    /usr/bin/python3 "$here/compare.py" "$out" --braid "braid$n" --mpi "mpi$n"
  done
} | tee "$out/report.md"
