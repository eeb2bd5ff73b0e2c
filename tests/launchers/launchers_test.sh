#!/usr/bin/env bash
# Real launchers start braid with nothing to configure (issue 24, docs/cluster.md):
#   launchers_test.sh CASE BUILD_DIR
# CASE: mpirun_perf mpirun_sweep mpirun_kill (Debian's Open MPI mpirun on this host),
#       mpirun_hosts (two emulated hosts: network namespaces, -H with their addresses),
#       slurm_srun slurm_sbatch slurm_kill (a one-node Slurm cluster this script starts: munged,
#       slurmctld and slurmd in the foreground with a minimal slurm.conf in a temporary
#       directory, all stopped at exit), slurm_hosts (the same on two emulated nodes: network
#       namespaces), torchrun, torchrun_hosts (the wheel's torchrun on two emulated hosts:
#       network namespaces, --nnodes 2 --rdzv-backend c10d), braid_run_hosts.
# The commands of docs/cluster.md are run exactly as written: the block after the page's
# "<!-- launchers-test: NAME -->" marker, with BUILD_DIR/bin first in PATH.
# Exit: 0 pass, 1 fail, 77 skipped (the reason printed) where a launcher is missing or cannot
# run. Nothing is left behind: every process started under the temporary directory is checked
# gone, the namespaces are deleted, and /dev/shm has no braid entry it did not have before.
set -uo pipefail

case_name=${1:?usage: launchers_test.sh CASE BUILD_DIR}
build=$(cd "${2:?usage: launchers_test.sh CASE BUILD_DIR}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
doc="$here/../../docs/cluster.md"
bin="$build/bin"
export PATH="$bin:$PATH"
export BRAID_DEBUG=NONE  # the ranks' expected warnings (no auth key) would bury the output

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}

tmp=$(mktemp -d /tmp/braid_launchers.XXXXXX) || fail "mktemp"
shm_before=$(ls /dev/shm 2>/dev/null | grep braid | sort)
daemons=()

# Processes whose working directory is inside $tmp: everything the launchers started here.
processes_in_tmp() {
  local p
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/cwd" 2>/dev/null)" == "$tmp"* ]] && echo "${p#/proc/}"
  done
}

# Whether a slurmstepd (of our cluster: working directory in $tmp) still runs.
stepds_in_tmp() {
  local p
  for p in $(processes_in_tmp); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ] && return 0
  done
  return 1
}

cleanup() {
  local rc=$?
  local pid
  cd / || true  # so that this shell is not among the processes in $tmp
  # A step's slurmstepd finishes its step with slurmd and slurmctld after srun returned: stop the
  # daemons only once no step is left, or it retries them for a minute.
  if [ -n "${SLURM_CONF:-}" ]; then
    for _ in $(seq 150); do
      stepds_in_tmp || break
      sleep 0.1
    done
  fi
  for pid in "${daemons[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${daemons[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  local left
  for _ in $(seq 50); do
    left=$(processes_in_tmp)
    [ -z "$left" ] && break
    sleep 0.1
  done
  if [ -n "$left" ]; then
    echo "FAIL: processes left behind: $(for p in $left; do tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null; echo; done)"
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
    rc=1
  fi
  local shm_after
  shm_after=$(ls /dev/shm 2>/dev/null | grep braid | sort)
  if [ "$shm_after" != "$shm_before" ]; then
    echo "FAIL: /dev/shm entries left behind: $(comm -13 <(echo "$shm_before") <(echo "$shm_after"))"
    rc=1
  fi
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM
cd "$tmp" || fail "cd $tmp"
for tool in braid-perf braid-info braid-run braid-check braid_launched_test; do
  [ -x "$bin/$tool" ] || fail "$bin/$tool is not built"
done

# The shell block of docs/cluster.md after the marker for $1.
doc_block() {
  awk -v m="<!-- launchers-test: $1 -->" '
    $0 == m { found = 1; next }
    found && !inside && /^```sh/ { inside = 1; next }
    inside && /^```/ { exit }
    inside { print }' "$doc"
}

# Runs docs/cluster.md's block $1 in $tmp; its output goes to $tmp/$1.out (and to ours).
run_doc() {
  local block
  block=$(doc_block "$1")
  [ -n "$block" ] || fail "docs/cluster.md has no block marked launchers-test: $1"
  echo "--- docs/cluster.md, $1:"
  echo "$block"
  echo "---"
  timeout 90 bash -c "$block" > "$tmp/$1.out" 2>&1
  local rc=$?
  cat "$tmp/$1.out"
  return $rc
}

# braid-perf checked its data and found every element right.
perf_ok() {
  grep -q "wrong elements: 0 (OK)" "$1" && ! grep -qE "wrong elements: [1-9]" "$1"
}

# --------------------------------------------------------------------------- Open MPI
mpirun_ready() {
  command -v mpirun > /dev/null || skip "no mpirun (Debian: openmpi-bin; scripts/install_deps.sh)"
  # As root mpirun needs these; fewer cores than ranks needs oversubscription. Set as Open MPI's
  # environment variables so the docs' command lines stay as a user types them.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  timeout 30 mpirun -np 1 true > "$tmp/probe.out" 2>&1 ||
    skip "mpirun cannot start a process here: $(tail -3 "$tmp/probe.out")"
}

need_pmix() {
  timeout 30 mpirun -np 2 braid-info > "$tmp/info.out" 2>&1
  grep -q "built without PMIx" "$tmp/info.out" &&
    skip "this build has no PMIx (libpmix-dev was not found by CMake)"
  grep -q "store: from pmix" "$tmp/info.out" || fail "braid-info under mpirun: $(cat "$tmp/info.out")"
}

case_mpirun_perf() {
  mpirun_ready
  need_pmix
  run_doc mpirun || fail "the docs' mpirun example failed"
  perf_ok "$tmp/mpirun.out" || fail "the docs' mpirun example did not check its data OK"
  local n
  for n in 1 2 3 4 5; do
    echo "--- mpirun -np $n braid-perf"
    timeout 60 mpirun -np $n braid-perf allreduce,broadcast,alltoall -b 8 -e 64K -c 1 -n 2 -w 1 \
      > "$tmp/np$n.out" 2>&1 || { cat "$tmp/np$n.out"; fail "mpirun -np $n braid-perf failed"; }
    perf_ok "$tmp/np$n.out" || { cat "$tmp/np$n.out"; fail "np $n: data not checked OK"; }
  done
  echo "--- mpirun -np 3 braid-check --quick"
  timeout 60 mpirun -np 3 braid-check --quick > "$tmp/check.out" 2>&1 ||
    { cat "$tmp/check.out"; fail "braid-check under mpirun"; }
  grep "^summary: PASS: 3 ranks" "$tmp/check.out" || { cat "$tmp/check.out"; fail "braid-check summary"; }
}

case_mpirun_sweep() {
  mpirun_ready
  need_pmix
  local n
  for n in 1 2 3 4 5; do
    echo "--- mpirun -np $n braid_launched_test"
    timeout 100 mpirun -np $n braid_launched_test > "$tmp/np$n.out" 2>&1 ||
      { cat "$tmp/np$n.out"; fail "mpirun -np $n braid_launched_test failed"; }
    local want="store from pmix"
    [ $n -eq 1 ] && want="store from none"
    [ "$(grep -c "launched: rank .* of $n, launch openmpi, $want" "$tmp/np$n.out")" -eq $n ] ||
      { cat "$tmp/np$n.out"; fail "np $n: not every rank joined as openmpi, $want"; }
    [ "$(grep -c "PASSED" "$tmp/np$n.out")" -eq $n ] ||
      { cat "$tmp/np$n.out"; fail "np $n: not every rank passed"; }
  done
}

# Survivors of a killed rank: each printed PeerLost (exit 3), and some survivor names rank $2.
check_survivors() {
  local out=$1 victim=$2 n=$3 r
  for ((r = 0; r < n; ++r)); do
    [ $r -eq "$victim" ] && continue
    grep -q "launched: rank $r: PeerLost" "$out" || { cat "$out"; fail "rank $r did not report PeerLost"; }
  done
  grep "launched: rank" "$out" | grep -q "rank $victim (" ||
    { cat "$out"; fail "no survivor's error names rank $victim"; }
}

case_mpirun_kill() {
  mpirun_ready
  need_pmix
  echo "--- mpirun -np 3 braid_launched_test --victim 1 (mpirun stops the others at once)"
  timeout 60 mpirun -np 3 braid_launched_test --victim 1 > "$tmp/kill.out" 2>&1
  local rc=$?
  cat "$tmp/kill.out"
  [ $rc -ne 0 ] || fail "mpirun exited 0 although rank 1 was killed"
  # Usually mpirun reaps the killed rank first and names it; but the survivors may notice the
  # loss through the store and exit (3, PeerLost) before it does, and mpirun then names the
  # first survivor's exit instead. Either way the output must name rank 1's death.
  if ! grep -q "process rank 1 .*signal 9" "$tmp/kill.out"; then
    grep -Eq "PeerLost: .*(revoked by rank 1 |lost rank 1 )" "$tmp/kill.out" ||
      fail "neither mpirun nor a surviving rank named rank 1's death"
    echo "(the survivors reported rank 1's death before mpirun reaped it)"
  fi
  echo "--- with --enable-recovery (the others run on and report)"
  timeout 60 mpirun --enable-recovery -np 4 braid_launched_test --victim 2 > "$tmp/recover.out" 2>&1
  rc=$?
  cat "$tmp/recover.out"
  check_survivors "$tmp/recover.out" 2 4
  # Open MPI 4.1's mpirun exits 0 under --enable-recovery whatever the ranks' statuses (docs).
  echo "mpirun --enable-recovery exited $rc"
}

# Two emulated hosts: network namespaces joined by a veth pair (198.18.0.1 and .2). mpirun runs
# in the first; in place of ssh its rsh agent (a script here) starts Open MPI's orted in the
# namespace of the address it is given, as ssh would on that host.
netns=()
netns_cleanup() {
  local ns pid
  for ns in "${netns[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  for ns in "${netns[@]}"; do
    for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
    ip netns del "$ns" 2>/dev/null
  done
}

case_mpirun_hosts() {
  mpirun_ready
  need_pmix
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
  command -v ip > /dev/null || skip "no ip (iproute2)"
  local a="bln$$_0" b="bln$$_1"
  trap 'netns_cleanup; cleanup' EXIT
  ip netns add "$a" 2> "$tmp/ip.err" || skip "cannot create a network namespace: $(cat "$tmp/ip.err")"
  netns+=("$a")
  ip netns add "$b" || fail "ip netns add $b"
  netns+=("$b")
  ip link add e0 netns "$a" type veth peer name e1 netns "$b" || fail "veth pair"
  { ip -n "$a" addr add 198.18.0.1/24 dev e0 && ip -n "$b" addr add 198.18.0.2/24 dev e1 &&
    ip -n "$a" link set e0 up && ip -n "$b" link set e1 up &&
    ip -n "$a" link set lo up && ip -n "$b" link set lo up; } || fail "configuring the namespaces"
  {
    echo '#!/bin/sh'
    echo '# mpirun rsh agent: AGENT HOST COMMAND... runs COMMAND in the namespace of HOST.'
    echo 'host=$1; shift'
    echo "case \"\$host\" in 198.18.0.1) ns=$a ;; 198.18.0.2) ns=$b ;;"
    echo '  *) echo "agent: unknown host $host" >&2; exit 1 ;; esac'
    echo 'exec ip netns exec "$ns" sh -c "$*"'
  } > "$tmp/agent.sh"
  chmod +x "$tmp/agent.sh"
  local mp=(ip netns exec "$a" mpirun --mca plm_rsh_agent "$tmp/agent.sh")
  echo "--- mpirun -H 198.18.0.1:2,198.18.0.2:2 -np 4 braid-info --paths"
  timeout 60 "${mp[@]}" -H 198.18.0.1:2,198.18.0.2:2 -np 4 braid-info --paths > "$tmp/paths.out" 2>&1 ||
    { cat "$tmp/paths.out"; fail "braid-info --paths on two hosts"; }
  cat "$tmp/paths.out"
  grep -qE "^ +0 +self +shm +tcp +tcp" "$tmp/paths.out" || fail "ranks 0,1 | 2,3 are not two hosts"
  echo "--- mpirun -H 198.18.0.1:2,198.18.0.2:2 -np 4 braid-perf"
  timeout 60 "${mp[@]}" -H 198.18.0.1:2,198.18.0.2:2 -np 4 braid-perf allreduce,allgather,alltoall \
    -b 8 -e 256K -c 1 -n 2 -w 1 > "$tmp/perf.out" 2>&1 ||
    { cat "$tmp/perf.out"; fail "braid-perf on two hosts"; }
  perf_ok "$tmp/perf.out" || { cat "$tmp/perf.out"; fail "two hosts: data not checked OK"; }
  echo "--- mpirun -H 198.18.0.1:3,198.18.0.2:2 -np 5 braid_launched_test"
  timeout 100 "${mp[@]}" -H 198.18.0.1:3,198.18.0.2:2 -np 5 braid_launched_test > "$tmp/sweep.out" 2>&1 ||
    { cat "$tmp/sweep.out"; fail "the sweep on two hosts"; }
  [ "$(grep -c "launch openmpi, store from pmix" "$tmp/sweep.out")" -eq 5 ] ||
    { cat "$tmp/sweep.out"; fail "not every rank joined through pmix"; }
  [ "$(grep -c "PASSED" "$tmp/sweep.out")" -eq 5 ] || { cat "$tmp/sweep.out"; fail "not every rank passed"; }
}

# --------------------------------------------------------------------------- Slurm
# Starts munged, slurmctld and slurmd (foreground, as our children) with a slurm.conf in $tmp and
# exports SLURM_CONF for srun/sbatch. `slurm_start` : one node on loopback. `slurm_start two`:
# two emulated nodes, bnode1 and bnode2, each in a network namespace (198.18.0.1 and .2) with a
# UTS and mount namespace of its own (its hostname; an /etc/hosts naming both nodes, bind-mounted
# there only); slurmctld runs on bnode1 and `on_login` runs a command there (as a login node).
slurm_mode=one
on_login() {
  if [ "$slurm_mode" = two ]; then in_node "bln$$_0" bnode1 "$@"; else "$@"; fi
}
in_node() {
  local ns=$1 name=$2
  shift 2
  nsenter --net="/run/netns/$ns" unshare -m -u sh -c \
    "hostname $name && mount --bind '$tmp/slurm/hosts' /etc/hosts && exec \"\$@\"" sh "$@"
}

slurm_start() {
  slurm_mode=${1:-one}
  local c
  for c in munged slurmctld slurmd srun sbatch sinfo; do
    command -v $c > /dev/null || skip "no $c (Debian: slurm-wlm, munge; scripts/install_deps.sh)"
  done
  [ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start tasks"
  local s="$tmp/slurm"
  mkdir -p "$s/state"
  chmod 755 "$tmp" "$s"
  if [ "$slurm_mode" = two ]; then
    command -v nsenter > /dev/null && command -v unshare > /dev/null && command -v ip > /dev/null ||
      skip "needs nsenter, unshare (util-linux) and ip (iproute2)"
    local a="bln$$_0" b="bln$$_1"
    trap 'netns_cleanup; cleanup' EXIT
    ip netns add "$a" 2> "$tmp/ip.err" || skip "cannot create a network namespace: $(cat "$tmp/ip.err")"
    netns+=("$a")
    ip netns add "$b" || fail "ip netns add $b"
    netns+=("$b")
    ip link add e0 netns "$a" type veth peer name e1 netns "$b" || fail "veth pair"
    { ip -n "$a" addr add 198.18.0.1/24 dev e0 && ip -n "$b" addr add 198.18.0.2/24 dev e1 &&
      ip -n "$a" link set e0 up && ip -n "$b" link set e1 up &&
      ip -n "$a" link set lo up && ip -n "$b" link set lo up; } || fail "configuring the namespaces"
    printf '127.0.0.1 localhost\n198.18.0.1 bnode1\n198.18.0.2 bnode2\n' > "$s/hosts"
  fi
  head -c 1024 /dev/urandom > "$s/munge.key"
  chmod 400 "$s/munge.key"
  # A Unix socket by path: reachable from every network namespace.
  munged -F -f --key-file="$s/munge.key" --socket="$s/munge.sock" --pid-file="$s/munged.pid" \
    --log-file="$s/munged.log" --seed-file="$s/munged.seed" > "$s/munged.out" 2>&1 &
  daemons+=($!)
  for _ in $(seq 50); do [ -S "$s/munge.sock" ] && break; sleep 0.1; done
  [ -S "$s/munge.sock" ] || skip "munged did not start: $(tail -3 "$s/munged.out")"
  # Ports of our own, free now; job ids of our own, so a concurrent test cluster on this host
  # (another build's) derives other store ports.
  local port
  for _ in $(seq 20); do
    port=$((40000 + RANDOM % 20000))
    grep -qiE ":($(printf '%04X|%04X' $port $((port + 1)))) " /proc/net/tcp /proc/net/tcp6 \
      2> /dev/null || break
  done
  local node ctld nodes
  node=$(hostname -s)
  ctld="$node(127.0.0.1)"
  nodes="NodeName=$node NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN"
  local partition="$node"
  if [ "$slurm_mode" = two ]; then
    ctld="bnode1(198.18.0.1)"
    nodes="NodeName=bnode1 NodeAddr=198.18.0.1 CPUs=4 State=UNKNOWN
NodeName=bnode2 NodeAddr=198.18.0.2 CPUs=4 State=UNKNOWN"
    partition="bnode[1-2]"
  fi
  {
    echo "ClusterName=braidtest$$"
    echo "SlurmctldHost=$ctld"
    echo "SlurmctldPort=$port"
    echo "SlurmdPort=$((port + 1))"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$s/munge.sock"
    echo "CredType=cred/munge"
    echo "StateSaveLocation=$s/state"
    echo "SlurmdSpoolDir=$s/spool.%n"
    echo "SlurmctldPidFile=$s/slurmctld.pid"
    echo "SlurmdPidFile=$s/slurmd.%n.pid"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "MpiDefault=none"
    echo "SelectType=select/linear"
    echo "SchedulerType=sched/builtin"
    echo "ReturnToService=2"
    echo "FirstJobId=$((1 + RANDOM % 600000))"
    echo "SlurmdParameters=config_overrides"
    echo "SlurmctldLogFile=$s/slurmctld.log"
    echo "SlurmdLogFile=$s/slurmd.%n.log"
    echo "$nodes"
    echo "PartitionName=debug Nodes=$partition Default=YES MaxTime=INFINITE State=UP"
  } > "$s/slurm.conf"
  export SLURM_CONF="$s/slurm.conf"
  if [ "$slurm_mode" = two ]; then
    in_node "bln$$_0" bnode1 slurmctld -D -c -f "$SLURM_CONF" > "$s/slurmctld.out" 2>&1 &
    daemons+=($!)
    in_node "bln$$_0" bnode1 slurmd -D -f "$SLURM_CONF" -N bnode1 > "$s/slurmd1.out" 2>&1 &
    daemons+=($!)
    in_node "bln$$_1" bnode2 slurmd -D -f "$SLURM_CONF" -N bnode2 > "$s/slurmd2.out" 2>&1 &
    daemons+=($!)
  else
    slurmctld -D -c -f "$SLURM_CONF" > "$s/slurmctld.out" 2>&1 &
    daemons+=($!)
    slurmd -D -f "$SLURM_CONF" -N "$node" > "$s/slurmd.out" 2>&1 &
    daemons+=($!)
  fi
  local want=1
  [ "$slurm_mode" = two ] && want=2
  for _ in $(seq 100); do
    [ "$(on_login sinfo -h -N -o %t 2> /dev/null | grep -c idle)" -eq $want ] && break
    sleep 0.2
  done
  [ "$(on_login sinfo -h -N -o %t 2> /dev/null | grep -c idle)" -eq $want ] ||
    skip "the Slurm cluster did not come up: $(tail -n 3 "$s"/*.out)"
  echo "slurm: $want-node cluster up (slurmctld port $port, $SLURM_CONF)"
}

case_slurm_hosts() {
  slurm_start two
  echo "--- srun -N 2 -n 4 braid-info (from bnode1)"
  on_login timeout 60 srun -N 2 -n 4 braid-info > "$tmp/info.out" 2>&1 || { cat "$tmp/info.out"; fail "srun braid-info"; }
  grep "^store:" "$tmp/info.out" | sort | uniq -c
  [ "$(grep -c "^store: bnode1:2[0-9]*, from slurm: first host of SLURM_STEP_NODELIST='bnode\[1-2\]'" "$tmp/info.out")" -eq 4 ] ||
    fail "the 4 tasks did not derive bnode1 from SLURM_STEP_NODELIST"
  echo "--- srun -N 2 -n 4 braid-info --paths"
  on_login timeout 60 srun -N 2 -n 4 braid-info --paths > "$tmp/paths.out" 2>&1 ||
    { cat "$tmp/paths.out"; fail "srun braid-info --paths"; }
  cat "$tmp/paths.out"
  grep -qE "^ +0 +self +shm +tcp +tcp" "$tmp/paths.out" || fail "tasks 0,1 | 2,3 are not two hosts"
  echo "--- srun -N 2 -n 4 braid-perf"
  on_login timeout 60 srun -N 2 -n 4 braid-perf allreduce,allgather,alltoall -b 8 -e 256K -c 1 -n 2 -w 1 \
    > "$tmp/perf.out" 2>&1 || { cat "$tmp/perf.out"; fail "srun braid-perf on two nodes"; }
  perf_ok "$tmp/perf.out" || { cat "$tmp/perf.out"; fail "two nodes: data not checked OK"; }
  echo "--- srun -N 2 -n 3 braid_launched_test --victim 2 (task 2 on bnode2)"
  on_login timeout 60 srun -N 2 -n 3 braid_launched_test --victim 2 > "$tmp/kill.out" 2>&1
  local rc=$?
  cat "$tmp/kill.out"
  [ $rc -ne 0 ] || fail "srun exited 0 although task 2 was killed"
  check_survivors "$tmp/kill.out" 2 3
}

case_slurm_srun() {
  slurm_start
  run_doc slurm_srun || fail "the docs' srun example failed"
  perf_ok "$tmp/slurm_srun.out" || fail "the docs' srun example did not check its data OK"
  echo "--- srun -n 4 braid-info"
  timeout 60 srun -n 4 braid-info > "$tmp/info.out" 2>&1 || { cat "$tmp/info.out"; fail "srun braid-info"; }
  grep -E "^(launch|store):" "$tmp/info.out"
  [ "$(grep -c "^launch: slurm, rank" "$tmp/info.out")" -eq 4 ] || fail "not 4 ranks as slurm"
  [ "$(grep "^store:" "$tmp/info.out" | sort -u | wc -l)" -eq 1 ] || fail "ranks disagree on the store"
  grep -q "^store: 127.0.0.1:2[0-9]*, from slurm" "$tmp/info.out" || fail "store not derived from slurm"
  echo "--- srun -n 3 braid-check --quick"
  timeout 60 srun -n 3 braid-check --quick > "$tmp/check.out" 2>&1 ||
    { cat "$tmp/check.out"; fail "braid-check under srun"; }
  grep "^summary: PASS: 3 ranks" "$tmp/check.out" || { cat "$tmp/check.out"; fail "braid-check summary"; }
  echo "--- srun -n 3 braid_launched_test"
  timeout 100 srun -n 3 braid_launched_test > "$tmp/sweep.out" 2>&1 ||
    { cat "$tmp/sweep.out"; fail "srun braid_launched_test failed"; }
  [ "$(grep -c "launch slurm, store from slurm" "$tmp/sweep.out")" -eq 3 ] || { cat "$tmp/sweep.out"; fail "sweep"; }
  [ "$(grep -c "PASSED" "$tmp/sweep.out")" -eq 3 ] || { cat "$tmp/sweep.out"; fail "not every rank passed"; }
}

case_slurm_sbatch() {
  slurm_start
  run_doc slurm_sbatch || fail "the docs' sbatch example failed"
  [ "$(grep -c "wrong elements: 0 (OK)" "$tmp/slurm_sbatch.out")" -eq 2 ] ||
    fail "the two concurrent steps did not both check their data OK"
}

case_slurm_kill() {
  slurm_start
  echo "--- srun -n 3 braid_launched_test --victim 1"
  timeout 60 srun -n 3 braid_launched_test --victim 1 > "$tmp/kill.out" 2>&1
  local rc=$?
  cat "$tmp/kill.out"
  echo "srun exited $rc"
  [ $rc -ne 0 ] || fail "srun exited 0 although task 1 was killed"
  grep -q "task 1: Killed" "$tmp/kill.out" || fail "srun did not name task 1"
  check_survivors "$tmp/kill.out" 1 3
}

# --------------------------------------------------------------------------- torchrun, braid-run
case_torchrun() {
  # The repository's .venv (scripts/install_deps.sh: torch 2) first, else the system's.
  local venv="$here/../../.venv/bin"
  [ -x "$venv/torchrun" ] && export PATH="$bin:$venv:$PATH"
  command -v torchrun > /dev/null || skip "no torchrun"
  timeout 60 torchrun --nproc_per_node 1 --master_port 29733 --no_python true > "$tmp/probe.out" 2>&1 ||
    skip "torchrun cannot start a process here: $(tail -1 "$tmp/probe.out")"
  run_doc torchrun || fail "the docs' torchrun example failed"
  perf_ok "$tmp/torchrun.out" || fail "the docs' torchrun example did not check its data OK"
}

# The wheel's torchrun on two emulated hosts (network namespaces joined by a veth pair,
# 198.18.0.1 and .2): one agent per host, --nnodes 2 --nproc-per-node 2 with the c10d rendezvous
# hosted by the first. Its four ranks init_process_group("braid") through env:// and run the
# collectives worker's checks, and check that the ranks of the other host are reached over TCP
# and those of their own over shared memory. Both namespaces share this machine's hostname,
# which torchrun would otherwise use to decide which agent hosts the rendezvous store: is_host
# says it (on real hosts it is inferred), --local-addr names each host's address.
case_torchrun_hosts() {
  local venv="$here/../../.venv/bin" repo="$here/../.."
  [ -x "$venv/torchrun" ] || skip "no $venv/torchrun (scripts/install_venv.sh makes it)"
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
  command -v ip > /dev/null || skip "no ip (iproute2)"
  local a="btr$$_0" b="btr$$_1"
  trap 'netns_cleanup; cleanup' EXIT
  ip netns add "$a" 2> "$tmp/ip.err" || skip "cannot create a network namespace: $(cat "$tmp/ip.err")"
  netns+=("$a")
  ip netns add "$b" || fail "ip netns add $b"
  netns+=("$b")
  ip link add e0 netns "$a" type veth peer name e1 netns "$b" || fail "veth pair"
  { ip -n "$a" addr add 198.18.0.1/24 dev e0 && ip -n "$b" addr add 198.18.0.2/24 dev e1 &&
    ip -n "$a" link set e0 up && ip -n "$b" link set e1 up &&
    ip -n "$a" link set lo up && ip -n "$b" link set lo up; } || fail "configuring the namespaces"
  local checks=(check_all_reduce_coalesced check_all_gather_into_tensor check_reduce_scatter_tensor
                check_broadcast check_all_to_all_single check_send_recv check_new_group
                check_barrier check_paths_follow_nodes)
  local node ns addr host pids=()
  for node in 0 1; do
    if [ "$node" -eq 0 ]; then ns=$a addr=198.18.0.1 host=1; else ns=$b addr=198.18.0.2 host=0; fi
    echo "--- host $addr: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d" \
         "--rdzv-endpoint 198.18.0.1:29761 --local-addr $addr collectives_worker.py"
    ip netns exec "$ns" env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
      PYTHONPATH="$repo/python:$repo/tests/python" OMP_NUM_THREADS=1 \
      timeout 240 "$venv/torchrun" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
      --rdzv-endpoint 198.18.0.1:29761 --rdzv-id braid-hosts --rdzv-conf "is_host=$host" \
      --local-addr "$addr" --max-restarts 0 \
      "$repo/tests/python/workers/collectives_worker.py" "${checks[@]}" \
      > "$tmp/node$node.out" 2>&1 &
    pids+=($!)
  done
  local rc0 rc1
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
  cat "$tmp/node0.out" "$tmp/node1.out"
  echo "torchrun exited $rc0 (host 198.18.0.1) and $rc1 (host 198.18.0.2)"
  [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || fail "torchrun failed on a host"
  grep -q "collectives (world 4): ${#checks[@]} checks passed" "$tmp/node0.out" ||
    fail "rank 0 (host 198.18.0.1) did not report ${#checks[@]} checks passed"
  grep -q "ok check_paths_follow_nodes" "$tmp/node0.out" || fail "the path check did not run"
}

case_braid_run_hosts() {
  run_doc braid_run_hosts || fail "the docs' multi-host braid-run example failed"
  [ "$(grep -c "wrong elements: 0 (OK)" "$tmp/braid_run_hosts.out")" -ge 1 ] ||
    fail "the docs' braid-run example did not check its data OK"
}

declare -F "case_$case_name" > /dev/null || fail "unknown case $case_name"
"case_$case_name"
echo "PASS: $case_name"
