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
# HOSTS=2 (environment): the 2 ranks of both sides run on two emulated hosts instead, one rank
#   each: network namespaces anc_a (198.18.0.1) and anc_b (198.18.0.2), each with its own host
#   name, joined by a veth pair whose ends are both called emu0 (UCX_NET_DEVICES=emu0; UCX_TLS
#   must be tcp); RATE=1gbit shapes both ends with tc tbf as the anchors' netns run does. braid
#   starts one braid-run per host; Open MPI's mpirun starts the second host's daemon through the
#   anchors' netns/ns_agent.sh, with mpi_yield_when_idle as the anchors' netns run (busy-polling
#   ranks otherwise starve the veth's soft interrupts on 2 CPUs: milliseconds per small message).
#   The namespaces are deleted on every exit.
#   PIN=1 (the default with HOSTS=2): each side's rank on host A runs on CPU 0 and its rank on
#   host B on CPU 1 (taskset), as two hosts give each rank a CPU of its own. Unpinned (PIN=0),
#   the scheduler may put both ranks on one CPU, where Open MPI's yielding receiver hands the
#   CPU to the sender and then reads a one-way stream (broadcast, reduce) 200 messages per
#   recv(): faster than either side on two hosts (docs/benchmarks.md, "2 emulated hosts").
# Placement (one host only): build/bin/placement-probe runs before and after every launch, as in
#   bench/compare_shm.sh; the report then prints the ratios over all runs, over runs of the near
#   placement only and of the far one only (PLACEMENT_NEAR_US, default 0.1). This VM's launches
#   meet one of two speeds for small messages, on both sides (docs/benchmarks.md, "UCX over
#   shared memory, small messages"), and the medians over a few runs mix them.
# Output: results/ucx-<tls>-vs-<ref>[-2hosts]/*.txt|json, placement.tsv (one host) and
#   report.md there (printed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
maxb="${2:-64M}"
tls="${3:-tcp,self}"
ref="${4:-mpi}"
case "$ref" in mpi | tcp) ;; *) echo "REF must be mpi or tcp, not '$ref'" >&2; exit 2 ;; esac
hosts="${HOSTS:-1}"
case "$hosts" in 1 | 2) ;; *) echo "HOSTS must be 1 or 2, not '$hosts'" >&2; exit 2 ;; esac
out="$repo/results/ucx-${tls//,/-}-vs-$ref"
if [ "$hosts" = 2 ]; then
  case "$tls" in *sm* | *posix* | *sysv* | *cma* | *xpmem* | *knem*)
    echo "HOSTS=2 needs UCX_TLS without shared-memory transports (tcp,self), not '$tls'" >&2
    exit 2 ;;
  esac
  out="$out-2hosts${RATE:+-$RATE}"
fi
rm -rf "$out" && mkdir -p "$out"
# Open MPI's side is the anchors' benchmark (../shared/anchors/mpi), built here.
anchors="$repo/results/anchors"
. "$here/anchors.sh"
anchors_prepare "$anchors"
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
  *tcp*) [ "$hosts" = 2 ] && export UCX_NET_DEVICES=emu0 || export UCX_NET_DEVICES=lo ;;
esac
case "$tls" in
  *sm* | *posix* | *sysv*) export UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y ;;
esac
export BRAID_SHM_DISABLE=1
pass=()  # the UCX variables set above, handed to Open MPI's ranks explicitly
for v in UCX_TLS UCX_NET_DEVICES UCX_POSIX_ERROR_HANDLING UCX_SYSV_ERROR_HANDLING; do
  [ -n "${!v:-}" ] && pass+=(-x "$v")
done

# Two emulated hosts (HOSTS=2): the namespaces the anchors' ns_agent.sh knows.
A=anc_a B=anc_b IPA=198.18.0.1 IPB=198.18.0.2
in_host() {  # in_host NS HOSTNAME CMD...: CMD on that emulated host
  local ns=$1 hn=$2
  shift 2
  ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$hn" "$@"
}
if [ "$hosts" = 2 ]; then
  cleanup() {
    ip netns del $A 2>/dev/null || true
    ip netns del $B 2>/dev/null || true
  }
  trap cleanup EXIT
  cleanup
  ip netns add $A
  ip netns add $B
  ip link add name emu0 netns $A type veth peer name emu0 netns $B
  ip -n $A addr add $IPA/24 dev emu0
  ip -n $B addr add $IPB/24 dev emu0
  for ns in $A $B; do
    ip -n $ns link set lo up
    ip -n $ns link set emu0 up
    [ -n "${RATE:-}" ] && tc -n $ns qdisc add dev emu0 root tbf rate "$RATE" burst 256kb latency 20ms
  done
  # UCX lists only links that are up and running: wait for the carrier on both ends.
  for _ in $(seq 50); do
    ip -n $A link show emu0 | grep -q 'state UP' && ip -n $B link show emu0 | grep -q 'state UP' &&
      break
    sleep 0.1
  done
  export BRAID_AUTH_KEY="${BRAID_AUTH_KEY:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
  printf '%s slots=1\n%s slots=1\n' $IPA $IPB >"$out/hostfile"
fi
# PIN (HOSTS=2): one CPU per emulated host's rank.
pin="${PIN:-$([ "$hosts" = 2 ] && echo 1 || echo 0)}"
pinA=() pinB=() mpiPin=()
if [ "$pin" = 1 ]; then
  [ "$hosts" = 2 ] || { echo "PIN=1 needs HOSTS=2" >&2; exit 2; }
  [ "$(nproc)" -ge 2 ] || { echo "PIN=1 needs 2 CPUs, this machine has $(nproc)" >&2; exit 2; }
  pinA=(taskset -c 0) pinB=(taskset -c 1)
  printf '#!/bin/sh\nexec taskset -c "$OMPI_COMM_WORLD_RANK" "$@"\n' >"$out/pin.sh"
  chmod +x "$out/pin.sh"
  mpiPin=("$out/pin.sh")
fi
port=29700

colls=(allreduce reducescatter allgather broadcast reduce alltoall)
where="1 host"
pinned=""
if [ "$pin" = 1 ]; then pinned=", ranks pinned to CPUs 0 and 1"; fi
[ "$hosts" = 2 ] && where="2 emulated hosts (veth${RATE:+, tbf $RATE}$pinned)"
echo "# $(date -u +%FT%TZ) UCX_TLS=$UCX_TLS, $where, against $ref, $rounds rounds, 8 B - $maxb; load: $(cut -d' ' -f1-3 /proc/loadavg)" \
  | tee "$out/conditions.txt"
# One host: the placement probe's one-way latency (empty where it cannot run: a "mixed" run).
labels="$out/placement.tsv"
probe() { "$BIN/placement-probe" 20000 3 2>/dev/null | cut -d' ' -f1 || true; }
[ "$hosts" = 1 ] && printf 'file\tprobe_before_us\tprobe_after_us\n' >"$labels"
# braid_perf PREFIX TRANSPORT ROUND: every collective with BRAID_TRANSPORT=TRANSPORT.
braid_perf() {
  for c in "${colls[@]}"; do
    local perf=("$BIN/braid-perf" "$c" -b 8 -e "$maxb" -f 4 -w 5 --reps 7 -c 0
      --json "$out/$1.$c.run$3.json")
    if [ "$hosts" = 1 ]; then
      local before
      before="$(probe)"
      BRAID_TRANSPORT=$2 "$BIN/braid-run" -n 2 --timeout 900 -- "${perf[@]}" >"$out/$1.$c.run$3.txt"
      printf '%s\t%s\t%s\n' "$1.$c.run$3.json" "$before" "$(probe)" >>"$labels"
      continue
    fi
    port=$((port + 1))
    local run=(env BRAID_TRANSPORT="$2" "$BIN/braid-run" -n 1 --nnodes 2 --master "$IPA:$port"
      --timeout 900)
    in_host $B anchost-b "${run[@]}" --node-rank 1 -- "${pinB[@]}" "${perf[@]}" >/dev/null &
    local second=$!
    in_host $A anchost-a "${run[@]}" --node-rank 0 -- "${pinA[@]}" "${perf[@]}" \
      >"$out/$1.$c.run$3.txt"
    wait "$second"
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
  if [ "$hosts" = 1 ]; then
    before="$(probe)"
    mpirun --allow-run-as-root --mca oob_tcp_if_include lo -np 2 --mca pml ucx \
      --mca pml_ucx_tls any --mca pml_ucx_devices any "${pass[@]}" \
      "$anchors/build/mpi_coll_bench" -b 8 -e "$maxn" -f 4 -r 7 >"$out/mpi_ucx.run$k.txt"
    printf '%s\t%s\t%s\n' "mpi_ucx.run$k.txt" "$before" "$(probe)" >>"$labels"
  else
    in_host $A anchost-a mpirun --allow-run-as-root -np 2 --hostfile "$out/hostfile" \
      --map-by slot --mca plm_rsh_agent "$anchors/netns/ns_agent.sh" --mca mpi_yield_when_idle 1 \
      --mca oob_tcp_if_include 198.18.0.0/24 --mca pml ucx --mca pml_ucx_tls any \
      --mca pml_ucx_devices any "${pass[@]}" \
      "${mpiPin[@]}" "$anchors/build/mpi_coll_bench" -b 8 -e "$maxn" -f 4 -r 7 \
      >"$out/mpi_ucx.run$k.txt"
  fi
  grep -E '^# total' "$out/mpi_ucx.run$k.txt" || true
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/conditions.txt"
if [ "$ref" = tcp ]; then
  /usr/bin/python3 "$here/compare.py" "$out" --ref-braid braid_tcp | tee "$out/report.md"
else
  placement=()
  [ "$hosts" = 1 ] && placement=(--placement "$labels" --near-us "${PLACEMENT_NEAR_US:-0.1}")
  /usr/bin/python3 "$here/compare.py" "$out" --mpi mpi_ucx "${placement[@]}" | tee "$out/report.md"
fi
