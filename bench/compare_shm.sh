#!/usr/bin/env bash
# braid over shared memory vs Open MPI over shared memory (vader + CMA), every collective, side
# by side: 2 ranks, then 4 and 8 ranks oversubscribed on this machine's CPUs. The runs are
# interleaved collective by collective (braid, Open MPI, braid, Open MPI, ...) and the report
# takes medians.
# Usage: bench/compare_shm.sh [ROUNDS=3] [MAXBYTES=256M] [RANKS="2 4 8"]
#   COLLS="allgather reduce ..." (environment): only these collectives (default: all six);
#   BINDIR=DIR: braid-run, braid-perf and placement-probe from DIR instead of build/bin;
#   RESULTS=DIR: write there instead of results/shm
#   (root the first time: installs Open MPI and its headers)
# Output: results/shm/*.txt|json, results/shm/placement.tsv, results/shm/report.md (printed) and
# results/shm/plots/braid<N>.<collective>.png (bench/plot.py).
#
# Open MPI: the mpirun command line of ../shared/anchors/mpi/run.sh shm (pml ob1, btl vader,self,
# -f 4 -r 7), one collective per launch (-c) and -e MAXBYTES; at 4 and 8 ranks with -np R
# --oversubscribe (Open MPI then yields when idle, as braid's waiters do).
#
# Placement labels: this VM's two vCPUs move between a near placement (shared cache, 8-byte
# one-way ~0.05 us) and a far one (~0.2 us) every few seconds to minutes, and ratios differ
# between them (../shared/anchors/README.md). build/bin/placement-probe (a spin ping-pong of a
# few milliseconds) runs before and after every launch; a run whose two probes both read below
# PLACEMENT_NEAR_US (default 0.1) is "near", both at or above it "far", else "mixed". The report
# prints the ratio tables over all runs, then over near runs only and far runs only (a
# collective's braid and Open MPI medians each taken over that placement's runs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
maxb="${2:-256M}"
ranks="${3:-2 4 8}"
out="${RESULTS:-$repo/results/shm}"
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.txt
anchors="$out/anchors"
. "$here/anchors.sh"
anchors_prepare "$anchors"
maxbytes="$(numfmt --from=iec "$maxb")"
BIN="${BINDIR:-$repo/build/bin}"  # BINDIR: another build's bin folder (A/B)
colls="${COLLS:-allreduce reducescatter allgather broadcast reduce alltoall}"
unset BRAID_SHM_DISABLE BRAID_ALGO  # the defaults: shm transport, shm_ll / shm_direct
MR=(mpirun --allow-run-as-root --mca oob_tcp_if_include lo --mca pml ob1 --mca btl vader,self)
# Open MPI's large collectives fault in fresh temporary buffers on every call, braid's are
# allocated once, so the machine's page-fault cost moves the large-size ratios. Open MPI's 256 MiB
# allreduce ran at ~1.7 GB/s busbw in earlier measurements (../shared/anchors/README.md) and at
# 0.23 GB/s on 2026-11-30 10:45, when a fault took 10.7 us here. The report states the cost.
# A probe that cannot run (one CPU) leaves its fields empty: such runs count as "mixed".
faults="$("$BIN/placement-probe" --page-faults || true)"
probe() { "$BIN/placement-probe" 20000 3 2>/dev/null | cut -d' ' -f1 || true; }
labels="$out/placement.tsv"
printf 'file\tprobe_before_us\tprobe_after_us\n' > "$labels"
for k in $(seq 1 "$rounds"); do
  for n in $ranks; do
    echo "== round $k/$rounds, $n ranks: braid and Open MPI, collective by collective"
    over=()
    [ "$n" -gt 2 ] && over=(--oversubscribe)
    before="$(probe)"
    for c in $colls; do
      mc="$c"
      [ "$c" = broadcast ] && mc=bcast
      f="braid$n.$c.run$k.json"
      "$BIN/braid-run" -n "$n" --timeout 1800 -- "$BIN/braid-perf" "$c" -b 8 -e "$maxb" -f 4 \
        -w 5 --reps 7 -c 0 --json "$out/$f" > "$out/braid$n.$c.run$k.txt"
      mid="$(probe)"
      printf '%s\t%s\t%s\n' "$f" "$before" "$mid" >> "$labels"
      f="mpi$n.run$k.$c.txt"
      "${MR[@]}" -np "$n" "${over[@]}" "$anchors/build/mpi_coll_bench" -c "$mc" -b 8 \
        -e "$maxbytes" -f 4 -r 7 > "$out/$f" < /dev/null  # mpirun reads stdin: SIGTTIN in a background job
      before="$(probe)"
      printf '%s\t%s\t%s\n' "$f" "$mid" "$before" >> "$labels"
    done
  done
done
{
  for n in $ranks; do
    echo
    echo "## $n ranks$([ "$n" -gt 2 ] && echo ", oversubscribed on $(nproc) CPUs")"
    echo
    echo "page faults on this machine: $faults us per 4 KiB page (fresh anonymous memory, median)"
    /usr/bin/python3 "$here/compare.py" "$out" --braid "braid$n" --mpi "mpi$n" \
      --placement "$labels" --near-us "${PLACEMENT_NEAR_US:-0.1}"
  done
} | tee "$out/report.md"
# Plots from the same files (bench/plot.py): busbw against size, braid and Open MPI.
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
for n in $ranks; do
  /usr/bin/python3 "$here/plot.py" "$out" "$out/plots" --braid "braid$n" --mpi "mpi$n" \
    --title "$n ranks, shared memory, $cpu"
done
