#!/usr/bin/env bash
# braid over its UCX transport vs Open MPI over UCX (pml ucx), 2 ranks, every collective, side by
# side: both on the same UCX with the same UCX_TLS, runs interleaved (braid, MPI, braid, MPI, ...),
# the report takes medians and prints the ratio per size (> 1: braid faster).
# Usage: bench/compare_ucx.sh [ROUNDS=3] [MAXBYTES=64M] [UCX_TLS=tcp,self] [REF=mpi]
#   (root: installs Open MPI if missing; braid built in build/)
#   REF mpi  Open MPI over the same UCX (mpirun --mca pml ucx), the default
#   REF tcp  braid over its own TCP transport instead (BRAID_TRANSPORT=tcp), same rounds
#   UCX_TLS tcp,self    UCX's tcp transport on loopback (UCX_NET_DEVICES=lo), the default
#   UCX_TLS sm,cma,self UCX's shared memory and CMA (UCX_POSIX_ERROR_HANDLING=y, which braid's
#                       endpoints need for peer failure detection, is set for both)
# braid runs with BRAID_TRANSPORT=ucx BRAID_SHM_DISABLE=1, so UCX carries every message.
# Output: results/ucx-<tls>-vs-<ref>/*.txt|json and report.md there (printed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
maxb="${2:-64M}"
tls="${3:-tcp,self}"
ref="${4:-mpi}"
case "$ref" in mpi | tcp) ;; *) echo "REF must be mpi or tcp, not '$ref'" >&2; exit 2 ;; esac
out="$repo/results/ucx-${tls//,/-}-vs-$ref"
rm -rf "$out" && mkdir -p "$out"
# Open MPI's side is the anchors' benchmark (../shared/anchors/mpi), built here.
anchors="$repo/results/anchors"
rm -rf "$anchors" && cp -r "$repo/../shared/anchors" "$anchors" && chmod -R u+w "$anchors"
if ! command -v mpicc >/dev/null; then
  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y openmpi-bin libopenmpi-dev
fi
mkdir -p "$anchors/build"
mpicc -O2 -Wall "$anchors/mpi/mpi_coll_bench.c" -o "$anchors/build/mpi_coll_bench"
BIN="$repo/build/bin"
# braid-perf's byte suffixes for Open MPI's benchmark, which takes plain numbers.
case "$maxb" in
  *K) maxn=$((${maxb%K} << 10)) ;;
  *M) maxn=$((${maxb%M} << 20)) ;;
  *G) maxn=$((${maxb%G} << 30)) ;;
  *) maxn=$maxb ;;
esac

# The same UCX for both.
export UCX_TLS="$tls"
case "$tls" in
  *tcp*) export UCX_NET_DEVICES=lo ;;
esac
case "$tls" in
  *sm* | *posix* | *sysv*) export UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y ;;
esac
export BRAID_SHM_DISABLE=1
pass=()  # the UCX variables set above, handed to Open MPI's ranks explicitly
for v in UCX_TLS UCX_NET_DEVICES UCX_POSIX_ERROR_HANDLING UCX_SYSV_ERROR_HANDLING; do
  [ -n "${!v:-}" ] && pass+=(-x "$v")
done

colls=(allreduce reducescatter allgather broadcast reduce alltoall)
echo "# $(date -u +%FT%TZ) UCX_TLS=$UCX_TLS, against $ref, $rounds rounds, 8 B - $maxb; load: $(cut -d' ' -f1-3 /proc/loadavg)" \
  | tee "$out/conditions.txt"
# braid_perf PREFIX TRANSPORT ROUND: every collective with BRAID_TRANSPORT=TRANSPORT.
braid_perf() {
  for c in "${colls[@]}"; do
    BRAID_TRANSPORT=$2 "$BIN/braid-run" -n 2 --timeout 900 -- "$BIN/braid-perf" "$c" -b 8 \
      -e "$maxb" -f 4 -w 5 --reps 7 -c 0 --json "$out/$1.$c.run$3.json" >"$out/$1.$c.run$3.txt"
  done
}
for k in $(seq 1 "$rounds"); do
  echo "== round $k/$rounds: braid (ucx)"
  braid_perf braid ucx "$k"
  if [ "$ref" = tcp ]; then
    echo "== round $k/$rounds: braid (tcp)"
    braid_perf braid_tcp tcp "$k"
    continue
  fi
  echo "== round $k/$rounds: Open MPI (pml ucx)"
  # As the anchors' mpi/run.sh ucx: Open MPI takes pml ucx without an RDMA device only with
  # pml_ucx_tls/devices set to any.
  mpirun --allow-run-as-root --mca oob_tcp_if_include lo -np 2 --mca pml ucx \
    --mca pml_ucx_tls any --mca pml_ucx_devices any "${pass[@]}" \
    "$anchors/build/mpi_coll_bench" -b 8 -e "$maxn" -f 4 -r 7 >"$out/mpi_ucx.run$k.txt"
  grep -E '^# total' "$out/mpi_ucx.run$k.txt" || true
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/conditions.txt"
if [ "$ref" = tcp ]; then
  /usr/bin/python3 "$here/compare.py" "$out" --ref-braid braid_tcp | tee "$out/report.md"
else
  /usr/bin/python3 "$here/compare.py" "$out" --mpi mpi_ucx | tee "$out/report.md"
fi
