#!/usr/bin/env bash
# emucluster.sh: an emulated cluster on one machine. Creates H "hosts" as network namespaces
# joined by veth pairs to a bridge that lives in a namespace of its own (nothing is added to the
# caller's namespace), optionally shapes every host's link with tc (rate; delay with netem, or,
# where the kernel has no netem, TUN links and the userspace forwarder braid-netdelay), runs
#   braid-run -n R --nnodes H --node-rank k --master 198.18.0.1:PORT -- COMMAND...
# in each host k, collects every host's output, and tears everything down on every exit path.
# Docs: docs/topology.md, "Emulated cluster".
set -uo pipefail

usage() {
  cat <<'EOF'
usage: scripts/emucluster.sh [options] [--] COMMAND [ARGS...]

Runs COMMAND as R ranks on each of H emulated hosts (network namespaces; host k has the
address 198.18.0.(k+1)/24 on its interface emu0, host 0 serves the store). Needs root, ip
(iproute2) and, for --rate/--delay, tc; exits 77 (skip) with the reason when they are missing.

options:
  --hosts H         emulated hosts (default 2, at most 200)
  --ranks R         ranks per host (default 1)
  --rate RATE       shape each host's link, both directions (tc units: 1gbit, 500mbit)
  --delay D         add D (e.g. 1ms, 250us) to every packet between two hosts: one way D,
                    a round trip 2D. By the netem qdisc on each host's egress where the kernel
                    has it, else by the userspace forwarder braid-netdelay (tools/netdelay;
                    in --bin DIR): the hosts' links are then TUN devices (emu0, same
                    addresses, MTU 65535) and the forwarder, in the caller's namespace,
                    holds each packet D before writing it to the destination host's TUN
                    (SCHED_FIFO; its summary, with packets, bytes, drops and lateness, is
                    printed at the end; it is stopped and checked on every exit path)
  --delay-by MECH   auto (default: netem if the kernel has it, else tun), netem or tun
  --port P          store port on host 0 (default 29500)
  --bin DIR         directory of braid-run (default: build/bin beside this script's repo)
  --timeout SEC     braid-run --timeout on every host (default 300)
  --grace SEC       after the first host fails, wait this long for the others, then stop
                    them (default 5)
  --ifname SPEC     set BRAID_SOCKET_IFNAME=SPEC on every host (the link is called emu0)
  --env NAME=VALUE  set a variable on every host (repeatable)
  --out DIR         keep each host's output in DIR/hK.log (default: a temporary directory,
                    removed at exit)
  --quiet           do not print the hosts' output
  -h, --help        this help

COMMAND runs with the caller's environment plus EMU_HOST=k, EMU_HOSTS=H and braid-run's
variables; every host gets the same BRAID_AUTH_KEY (the caller's, or a fresh one). Output: each
host's lines prefixed "[hK] ".
Namespaces left by a run killed with SIGKILL (bclPID_* whose PID no longer runs) are removed
at the next start.
Exit status: that of the first host to fail (in time), else 0; 77 when the cluster cannot be
built here; 1 when teardown left something behind.
EOF
}

die() {
  echo "emucluster: $*" >&2
  exit 2
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hosts=2
ranks=1
rate=""
delay=""
delay_by=auto
port=29500
bin="$here/../build/bin"
timeout=300
grace=5
outdir=""
quiet=0
envs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
    --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --delay) delay=${2:?--delay needs a value}; shift 2 ;;
    --delay-by) delay_by=${2:?--delay-by needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --bin) bin=${2:?--bin needs a value}; shift 2 ;;
    --timeout) timeout=${2:?--timeout needs a value}; shift 2 ;;
    --grace) grace=${2:?--grace needs a value}; shift 2 ;;
    --ifname) envs+=("BRAID_SOCKET_IFNAME=${2:?--ifname needs a value}"); shift 2 ;;
    --env)
      case "${2:-}" in *=*) envs+=("$2") ;; *) die "--env expects NAME=VALUE, got '${2:-}'" ;; esac
      shift 2 ;;
    --out) outdir=${2:?--out needs a value}; shift 2 ;;
    --quiet) quiet=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || die "no COMMAND given (see --help)"
case "$hosts" in '' | *[!0-9]*) die "--hosts: expected a number, got '$hosts'" ;; esac
case "$ranks" in '' | *[!0-9]*) die "--ranks: expected a number, got '$ranks'" ;; esac
case "$port" in '' | *[!0-9]*) die "--port: expected a number, got '$port'" ;; esac
[ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] || die "--hosts must be in 1..200"
[ "$ranks" -ge 1 ] || die "--ranks must be at least 1"
[ "$port" -ge 1 ] && [ "$port" -le 65534 ] || die "--port must be in 1..65534"
case "$delay_by" in auto | netem | tun) ;; *) die "--delay-by: expected auto, netem or tun, got '$delay_by'" ;; esac
braid_run="$bin/braid-run"
[ -x "$braid_run" ] || die "braid-run not found at $braid_run (build it, or pass --bin DIR)"
braid_run=$(cd "$(dirname "$braid_run")" && pwd)/braid-run
netdelay="$(dirname "$braid_run")/braid-netdelay"

skip() {
  echo "emucluster: SKIP: $*" >&2
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces (running as uid $(id -u))"
command -v ip >/dev/null || skip "'ip' (iproute2) is not installed"
if [ -n "$rate$delay" ]; then
  command -v tc >/dev/null || skip "'tc' (iproute2) is not installed, needed for --rate/--delay"
fi

tag="bcl$$"
bridge_ns="${tag}_br"
host_ns=()
for ((k = 0; k < hosts; k++)); do host_ns+=("${tag}_h$k"); done
created_ns=()
launched=()
fwd_pid=""
fwd_log=""
own_out=0
if [ -z "$outdir" ]; then
  outdir=$(mktemp -d "${TMPDIR:-/tmp}/emucluster.$tag.XXXXXX") || die "mktemp failed"
  own_out=1
else
  mkdir -p "$outdir" || die "cannot create $outdir"
fi

# Stops every process in the namespaces, deletes them, and checks that nothing is left.
teardown() {
  local ns pids p left
  for p in "${launched[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for ns in "${created_ns[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
  done
  for _ in $(seq 1 30); do
    left=""
    for ns in "${created_ns[@]}"; do left+=$(ip netns pids "$ns" 2>/dev/null); done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for ns in "${created_ns[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  done
  for p in "${launched[@]}"; do wait "$p" 2>/dev/null; done
  local bad=0
  if [ -n "$fwd_pid" ]; then
    # The delay forwarder: stopped after the ranks (their last packets may be in its queue),
    # before the namespaces; it must exit 0 with its summary.
    local frc summary
    kill -TERM "$fwd_pid" 2>/dev/null
    wait "$fwd_pid"
    frc=$?
    summary=$(grep '^braid-netdelay: delay' "$fwd_log" 2>/dev/null)
    if [ "$frc" = 0 ] && [ -n "$summary" ]; then
      echo "emucluster: forwarder: $summary" >&2
    else
      echo "emucluster: the delay forwarder (pid $fwd_pid) exited $frc: $(cat "$fwd_log" 2>/dev/null)" >&2
      bad=1
    fi
    if kill -0 "$fwd_pid" 2>/dev/null; then
      echo "emucluster: the delay forwarder (pid $fwd_pid) is still running; killing it" >&2
      kill -KILL "$fwd_pid" 2>/dev/null
      bad=1
    fi
  fi
  for ns in "${created_ns[@]}"; do ip netns del "$ns" 2>/dev/null; done
  if ip netns list 2>/dev/null | grep -q "^${tag}_"; then
    echo "emucluster: teardown left namespaces: $(ip netns list | grep "^${tag}_" | tr '\n' ' ')" >&2
    bad=1
  fi
  if ip -o link 2>/dev/null | grep -q "$tag"; then
    echo "emucluster: teardown left links: $(ip -o link | grep "$tag" | cut -d: -f2 | tr '\n' ' ')" >&2
    bad=1
  fi
  [ "$own_out" = 1 ] && rm -rf "$outdir"
  return $bad
}

on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  if [ ${#created_ns[@]} -gt 0 ]; then
    if teardown; then
      echo "emucluster: teardown done ($tag: no namespace or link left)" >&2
    else
      [ "$rc" = 0 ] && rc=1
    fi
  elif [ "$own_out" = 1 ]; then
    rm -rf "$outdir"
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "emucluster: $tag: $hosts hosts x $ranks ranks${rate:+, rate $rate}${delay:+, delay $delay}" >&2

# A run killed by SIGKILL cannot clean up: remove the namespaces of runs whose script is gone.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(bcl[0-9][0-9]*_[a-z0-9]*\)\( .*\)\{0,1\}$/\1/p'); do
  owner=${ns%%_*}
  owner=${owner#bcl}
  [ "$owner" = "$$" ] && continue
  kill -0 "$owner" 2>/dev/null && continue
  # Its delay forwarder (root namespace, so not in `ip netns pids`) normally died with it
  # (--parent-pid); one still running names the namespace in its arguments.
  if command -v pgrep >/dev/null; then
    for p in $(pgrep -f -- "braid-netdelay .* ${ns}=" 2>/dev/null); do
      kill -KILL "$p" 2>/dev/null && echo "emucluster: stopped delay forwarder $p, left by a run that was killed" >&2
    done
  fi
  pids=$(ip netns pids "$ns" 2>/dev/null)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns del "$ns" 2>/dev/null && echo "emucluster: removed $ns, left by a run that was killed" >&2
done

# The bridge namespace first; its creation doubles as the capability probe.
if ! err=$(ip netns add "$bridge_ns" 2>&1); then
  skip "cannot create a network namespace: $err"
fi
created_ns+=("$bridge_ns")
ip -n "$bridge_ns" link set lo up
if ! err=$(ip -n "$bridge_ns" link add br0 type bridge 2>&1); then
  skip "cannot create a bridge: $err"
fi
ip -n "$bridge_ns" link set br0 up || exit 1

# How --delay is applied: netem on each host's egress (veth links), or TUN links and the
# userspace forwarder braid-netdelay (docs/topology.md, "Emulated cluster").
netem=0
tun=0
if [ -n "$delay" ]; then
  if [ "$delay_by" != tun ]; then
    probe="${tag}_probe"
    ip netns add "$probe" && created_ns+=("$probe")
    ip -n "$probe" link add p0 type veth peer name p1 2>/dev/null
    if tc -n "$probe" qdisc add dev p0 root netem delay 1ms 2>/dev/null; then netem=1; fi
    ip netns del "$probe" 2>/dev/null
  fi
  if [ "$netem" = 0 ]; then
    [ "$delay_by" = netem ] && skip "--delay-by netem: this kernel has no netem qdisc"
    [ -c /dev/net/tun ] || skip "--delay: no netem qdisc and no /dev/net/tun for the TUN forwarder"
    [ -x "$netdelay" ] || die "--delay without netem needs braid-netdelay, not found at $netdelay (build the target braid-netdelay, or pass --bin DIR)"
    tun=1
    echo "emucluster: delay by userspace TUN forwarder (tools/netdelay: $netdelay), $delay one way" >&2
  else
    echo "emucluster: delay by netem, $delay one way" >&2
  fi
fi

# shape_out DEV NS: what leaves a host (its emu0's egress): DELAY (netem) and RATE.
shape_out() {
  local dev=$1 ns=$2
  if [ "$netem" = 1 ]; then
    tc -n "$ns" qdisc add dev "$dev" root netem delay "$delay" ${rate:+rate "$rate"} limit 100000
  elif [ -n "$rate" ]; then
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 20ms
  fi
}
# shape_in DEV NS: what enters a host (the bridge port's egress): RATE only, so that a packet
# between two hosts is delayed once (one way DELAY, round trip 2 DELAY, as with the forwarder).
shape_in() {
  local dev=$1 ns=$2
  [ -z "$rate" ] || tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 20ms
}
# shape_tun_in NS: RATE on what the forwarder writes into host NS's TUN (an ingress has no
# qdisc of its own: redirected to an ifb device, shaped on its egress).
shape_tun_in() {
  local ns=$1
  [ -n "$rate" ] || return 0
  ip -n "$ns" link add ifb0 type ifb &&
    ip -n "$ns" link set ifb0 up &&
    tc -n "$ns" qdisc add dev emu0 handle ffff: ingress &&
    tc -n "$ns" filter add dev emu0 parent ffff: protocol all u32 match u32 0 0 \
      action mirred egress redirect dev ifb0 &&
    tc -n "$ns" qdisc add dev ifb0 root tbf rate "$rate" burst 256kb latency 20ms
}

for ((k = 0; k < hosts; k++)); do
  ns=${host_ns[$k]}
  ip netns add "$ns" || exit 1
  created_ns+=("$ns")
  ip -n "$ns" link set lo up || exit 1
  if [ "$tun" = 1 ]; then
    # A TUN link: what host k sends to 198.18.0.0/24 goes to the forwarder, which writes it into
    # the destination host's TUN D later. Large MTU: fewer packets for the forwarder to move.
    if ! err=$(ip -n "$ns" tuntap add dev emu0 mode tun 2>&1); then
      [ "$k" = 0 ] && skip "cannot create a TUN device: $err"
      echo "emucluster: TUN for host $k: $err" >&2
      exit 1
    fi
    ip -n "$ns" link set emu0 mtu 65535 txqueuelen 1000 || exit 1
    ip -n "$ns" addr add "198.18.0.$((k + 1))/24" dev emu0 || exit 1
    ip -n "$ns" link set emu0 up || exit 1
    if [ -n "$rate" ]; then
      shape_out emu0 "$ns" || exit 1
      shape_tun_in "$ns" || { echo "emucluster: cannot shape host $k's inbound traffic (ifb, ingress, u32, mirred)" >&2; exit 1; }
    fi
    continue
  fi
  if ! err=$(ip link add name emu0 netns "$ns" type veth peer name "h$k" netns "$bridge_ns" 2>&1); then
    [ "$k" = 0 ] && skip "cannot create a veth pair: $err"
    echo "emucluster: veth for host $k: $err" >&2
    exit 1
  fi
  ip -n "$bridge_ns" link set "h$k" master br0 up || exit 1
  ip -n "$ns" addr add "198.18.0.$((k + 1))/24" dev emu0 || exit 1
  ip -n "$ns" link set emu0 up || exit 1
  if [ -n "$rate$delay" ]; then
    shape_out emu0 "$ns" || exit 1           # host -> network
    shape_in "h$k" "$bridge_ns" || exit 1    # network -> host
  fi
done
if [ -n "$rate" ] || [ "$netem" = 1 ]; then
  echo "emucluster: link of every host: $(tc -n "${host_ns[0]}" qdisc show dev emu0 | head -1)" >&2
fi
if [ "$tun" = 1 ]; then
  # The forwarder attaches to every host's TUN; the ranks start once it says it is ready.
  fwd_log="$outdir/netdelay.log"
  fwd_hosts=()
  for ((k = 0; k < hosts; k++)); do fwd_hosts+=("${host_ns[$k]}=198.18.0.$((k + 1))"); done
  "$netdelay" --delay "$delay" --ifname emu0 --parent-pid $$ --realtime "${fwd_hosts[@]}" \
    </dev/null >"$fwd_log" 2>&1 &
  fwd_pid=$!
  for _ in $(seq 1 300); do
    grep -q '^braid-netdelay: ready' "$fwd_log" && break
    kill -0 "$fwd_pid" 2>/dev/null || break
    sleep 0.05
  done
  if ! grep -q '^braid-netdelay: ready' "$fwd_log"; then
    kill -TERM "$fwd_pid" 2>/dev/null
    wait "$fwd_pid" 2>/dev/null
    frc=$?
    fwd_pid=""
    echo "emucluster: the delay forwarder did not start: $(cat "$fwd_log")" >&2
    [ "$frc" = 2 ] && exit 2
    exit 1
  fi
  echo "emucluster: $(grep '^braid-netdelay: ready' "$fwd_log") (pid $fwd_pid)" >&2
fi

if [ -z "${BRAID_AUTH_KEY:-}" ]; then
  BRAID_AUTH_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
fi
uts=()
if command -v unshare >/dev/null && command -v hostname >/dev/null; then
  # Each host gets a host name of its own, like separate machines.
  uts=(unshare --uts sh -c 'hostname "$0" && exec "$@"')
fi

declare -A host_of
for ((k = 0; k < hosts; k++)); do
  ns=${host_ns[$k]}
  hostenv=(BRAID_AUTH_KEY="$BRAID_AUTH_KEY" EMU_HOST="$k" EMU_HOSTS="$hosts" "${envs[@]}")
  launcher=("$braid_run" -n "$ranks" --nnodes "$hosts" --node-rank "$k"
    --master "198.18.0.1:$port" --timeout "$timeout" -- "$@")
  if [ ${#uts[@]} -gt 0 ]; then
    ip netns exec "$ns" env "${hostenv[@]}" "${uts[@]}" "${tag}-h$k" "${launcher[@]}" \
      </dev/null >"$outdir/h$k.log" 2>&1 &
  else
    ip netns exec "$ns" env "${hostenv[@]}" "${launcher[@]}" </dev/null >"$outdir/h$k.log" 2>&1 &
  fi
  launched+=($!)
  host_of[$!]=$k
done

# Wait for every host; after the first failure give the others --grace seconds, then stop them.
first_rc=0
first_host=""
failed_at=""
stopped=0
declare -A rc_of
running=("${launched[@]}")
while [ ${#running[@]} -gt 0 ]; do
  still=()
  for p in "${running[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      still+=("$p")
    else
      wait "$p"
      rc=$?
      rc_of[${host_of[$p]}]=$rc
      if [ "$rc" != 0 ] && [ "$first_rc" = 0 ]; then
        first_rc=$rc
        first_host=${host_of[$p]}
        failed_at=$SECONDS
      fi
    fi
  done
  running=("${still[@]}")
  [ ${#running[@]} -eq 0 ] && break
  if [ -n "$failed_at" ] && [ "$stopped" = 0 ] && [ $((SECONDS - failed_at)) -ge "$grace" ]; then
    echo "emucluster: host $first_host failed (exit $first_rc); stopping the others" >&2
    for p in "${running[@]}"; do kill -TERM "$p" 2>/dev/null; done
    stopped=1
  fi
  sleep 0.2
done

if [ "$quiet" = 0 ]; then
  for ((k = 0; k < hosts; k++)); do
    sed "s/^/[h$k] /" "$outdir/h$k.log"
  done
fi
for ((k = 0; k < hosts; k++)); do
  echo "emucluster: host $k (${host_ns[$k]}, 198.18.0.$((k + 1))) exit ${rc_of[$k]:-?}" >&2
done
exit "$first_rc"
