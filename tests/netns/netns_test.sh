#!/usr/bin/env bash
# ctest label "netns": braid on an emulated cluster (scripts/emucluster.sh). Skipped (77) where
# network namespaces cannot be created (not root, no iproute2). Cases:
#   2x2     2 hosts x 2 ranks, 1 Gbit/s links: every collective with data checking (braid-perf
#           all, tiny chunks; braid-check --quick); shared memory inside a host and TCP across (braid-info --paths);
#           each rank's data listener on its host's veth address, chosen as the address that
#           reaches the store (BRAID_DEBUG=INFO)
#   3x1     3 hosts x 1 rank, BRAID_SOCKET_IFNAME=emu0: the same collectives; TCP everywhere;
#           the listener address chosen by interface name
#   fail    one rank exits 3 while the others would sleep: the script exits 3, stops the others
#           and leaves no namespace, link or process behind
#   signal  SIGTERM to the script while its hosts run: exit 143, nothing left behind
#   skip    run as an unprivileged user: exit 77 with the reason, nothing created
#   delay   --delay through the userspace TUN forwarder (braid-netdelay, --delay-by tun):
#           2 hosts, 5 ms: every TCP round trip (rtt_probe.py) takes at least 2 x 5 ms and
#           the forwarder reports the packets it moved; 3 hosts x 1 rank, 1 ms and 1 Gbit/s:
#           every collective with data checking, 8 B allreduce and sendrecv at least 1 ms; a
#           run killed with SIGKILL: its forwarder exits by itself (--parent-pid), the next
#           run removes its namespaces and processes
#   delay_args  braid-netdelay's bad arguments: exit 2 and a message naming the argument
#   ucx     2 hosts x 2 ranks, 1 Gbit/s links, BRAID_TRANSPORT=ucx with UCX_TLS=tcp: the same
#           collectives and braid-check; shared memory inside a host and UCX across (braid-info
#           --paths); registered only in a build with UCX (docs/ucx.md)
# usage: netns_test.sh CASE BUILD_DIR
set -uo pipefail
case_name=${1:?case: 2x2, 3x1, fail, signal or skip}
build=${2:?build directory}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
emu="$here/../../scripts/emucluster.sh"
bin=$(cd "$build/bin" && pwd)
log=$(mktemp "${TMPDIR:-/tmp}/netns_test.XXXXXX")
trap 'rm -f "$log"' EXIT

fail() {
  echo "FAIL ($case_name): $*" >&2
  exit 1
}

# emu ARGS...: runs the script, shows its output, exits 77 when it skipped; sets $rc.
emu() {
  "$emu" --bin "$bin" "$@" >"$log" 2>&1
  rc=$?
  cat "$log"
  if [ "$rc" = 77 ] && grep -q "emucluster: SKIP" "$log"; then exit 77; fi
}

# start_hosts MARKER ARGS...: starts the script in the background with ARGS, each of 2 hosts
# running "sh -c 'exec MARKER'", and waits until both run; sets $pid (the script's).
start_hosts() {
  local marker=$1
  shift
  "$emu" --bin "$bin" "$@" -- sh -c "exec $marker" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    [ "$(pgrep -fc "^$marker")" = 2 ] && break
    sleep 0.1
  done
  [ "$(pgrep -fc "^$marker")" = 2 ] || { kill -TERM "$pid"; wait "$pid"; cat "$log"; fail "hosts did not start"; }
}

# The emulated hosts' namespaces of the run in $log must all be gone.
check_teardown() {
  local tag
  tag=$(sed -n 's/^emucluster: \(bcl[0-9]*\): .*/\1/p' "$log" | head -1)
  [ -n "$tag" ] || fail "no cluster tag in the output"
  grep -q "emucluster: teardown done ($tag" "$log" || fail "no teardown confirmation for $tag"
  if ip netns list | grep -q "^${tag}_"; then fail "namespaces left: $(ip netns list | grep "^${tag}_")"; fi
  if ip -o link | grep -q "$tag"; then fail "links left behind by $tag"; fi
}

# check_paths HOSTS RANKS [ACROSS]: braid-info --paths (rank 0, on host 0) shows shm between ranks
# of one host and ACROSS (tcp unless given) between hosts.
check_paths() {
  local hosts=$1 ranks=$2 across=${3:-tcp} n=$(($1 * $2)) r p got want seen=0
  for ((r = 0; r < n; r++)); do
    row=$(grep -E "^\[h0\] \[0\] +$r( |$)" "$log" | grep -F self | tail -1)
    [ -n "$row" ] || fail "no paths row for rank $r"
    read -r -a cells <<<"$(echo "$row" | sed 's/^\[h0\] \[0\] *//')"
    for ((p = 0; p < n; p++)); do
      [ "$p" = "$r" ] && continue
      got=${cells[$((p + 1))]:-}
      if [ $((r / ranks)) = $((p / ranks)) ]; then want=shm; else want=$across; fi
      case "$got" in "$want"*) ;; *) fail "path $r -> $p is '$got', expected $want" ;; esac
      seen=$((seen + 1))
    done
  done
  [ "$seen" = $((n * (n - 1))) ] || fail "checked $seen paths of $((n * (n - 1)))"
  echo "paths ok: $seen pairs (shm inside a host, $across across)"
}

# check_listen HOSTS RANKS REASON: every rank logged its data listener on its host's address.
check_listen() {
  local hosts=$1 ranks=$2 reason=$3 k l r line
  for ((k = 0; k < hosts; k++)); do
    for ((l = 0; l < ranks; l++)); do
      r=$((k * ranks + l))
      line=$(grep -F "[h$k] [$r] " "$log" | grep -F "rank $r: tcp data listener address" | head -1)
      [ -n "$line" ] || fail "rank $r logged no data listener address"
      case "$line" in
        *"address 198.18.0.$((k + 1)) ($reason"*) ;;
        *) fail "rank $r listens on the wrong address or for the wrong reason: $line" ;;
      esac
    done
  done
  echo "listen addresses ok ($reason)"
}

# Every collective, the original eight dtypes x five ops plus bool and bxor (49 supported
# pairs), checked on every element, small odd sizes, chunks of 1 KiB so that the pipelined paths
# run. `-d all -o all` would be 123 pairs, three times the time; the other added dtypes and ops
# are swept over threads and processes (tests/comm, tests/algo). Then, on a fresh cluster (a
# second job on the same store port could meet the first one's store), the paths matrix with
# INFO logging.
perf=("$bin/braid-perf" all -b 8 -e 100K -f 7 -n 2 -w 1 --reps 1
  -d fp32,fp64,fp16,bf16,int8,uint8,int32,int64,bool -o sum,prod,min,max,avg,bxor)
paths=("$bin/braid-info" --paths)
common=(--timeout 240 --env BRAID_CHUNK_SIZE=1K --env BRAID_SMALL_MSG_SIZE=4K)

# cluster HOSTS RANKS REASON EXTRA...: the jobs on HOSTS x RANKS (emucluster options EXTRA), each
# with its checks; REASON: why every rank's listener must have picked its host's address (empty:
# no TCP data listener to check, as over UCX). $across names the path between hosts (tcp).
across=tcp
cluster() {
  local hosts=$1 ranks=$2 reason=$3
  shift 3
  emu --hosts "$hosts" --ranks "$ranks" "$@" "${common[@]}" -- "${perf[@]}"
  [ "$rc" = 0 ] || fail "braid-perf on the cluster exited $rc"
  grep -q "wrong elements: 0 (OK)" "$log" || fail "braid-perf did not report 0 wrong elements"
  check_teardown
  emu --hosts "$hosts" --ranks "$ranks" "$@" --env BRAID_DEBUG=INFO -- "${paths[@]}"
  [ "$rc" = 0 ] || fail "braid-info --paths on the cluster exited $rc"
  check_paths "$hosts" "$ranks" "$across"
  [ -z "$reason" ] || check_listen "$hosts" "$ranks" "$reason"
  check_teardown
  # braid-check: pairs both ways and the variable-count collectives, checked.
  emu --hosts "$hosts" --ranks "$ranks" "$@" -- "$bin/braid-check" --quick
  [ "$rc" = 0 ] || fail "braid-check on the cluster exited $rc"
  grep -q "summary: PASS" "$log" || fail "braid-check did not pass"
  check_teardown
}

case "$case_name" in
  2x2)
    cluster 2 2 "the address that reaches the store" --rate 1gbit
    ;;
  3x1)
    cluster 3 1 "interface emu0 matches BRAID_SOCKET_IFNAME=emu0" --ifname emu0
    ;;
  ucx)
    across=ucx
    cluster 2 2 "" --rate 1gbit --env BRAID_TRANSPORT=ucx --env UCX_TLS=tcp
    ;;
  fail)
    marker="sleep 599.$$"  # a command line no other process has
    emu --hosts 2 --ranks 2 --grace 1 -- sh -c \
      "if [ \"\$BRAID_RANK\" = 2 ]; then echo rank 2 fails; exit 3; fi; exec $marker"
    [ "$rc" = 3 ] || fail "emucluster exited $rc, expected the failed rank's 3"
    grep -q "rank 2 fails" "$log" || fail "the failing rank's output was not collected"
    check_teardown
    if pgrep -f "^$marker" >/dev/null; then fail "processes left: $(pgrep -af "^$marker")"; fi
    echo "failure ok: exit 3, nothing left"
    ;;
  signal)
    # SIGTERM to the script while its hosts run: exit 143, every process stopped, nothing left.
    marker="sleep 598.$$"
    start_hosts "$marker" --hosts 2 --ranks 1
    grep -q "emucluster: SKIP" "$log" && { cat "$log"; exit 77; }
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    cat "$log"
    [ "$rc" = 143 ] || fail "emucluster exited $rc after SIGTERM, expected 143"
    check_teardown
    if pgrep -f "^$marker" >/dev/null; then fail "processes left: $(pgrep -af "^$marker")"; fi
    echo "signal ok: exit 143, nothing left"
    ;;
  delay)
    # A round trip crosses the forwarder twice, each time held >= 5 ms: a lower bound that
    # load cannot break (load only adds).
    emu --hosts 2 --ranks 1 --delay 5ms --delay-by tun -- /usr/bin/python3 "$here/rtt_probe.py" 20
    [ "$rc" = 0 ] || fail "the round-trip probe exited $rc"
    grep -q "emucluster: delay by userspace TUN forwarder" "$log" || fail "no mechanism line"
    line=$(grep -o "rtt: connect .*" "$log")
    [ -n "$line" ] || fail "no round-trip line"
    read -r connect min < <(echo "$line" | sed 's/rtt: connect \([0-9.]*\) us, min \([0-9.]*\) us.*/\1 \2/')
    awk -v c="$connect" -v m="$min" 'BEGIN { exit !(c >= 10000 && m >= 10000) }' ||
      fail "a round trip took less than 2 x 5 ms: $line"
    fwd=$(grep -o "forwarder: braid-netdelay: delay 5ms: forwarded [0-9]* packets" "$log")
    [ -n "$fwd" ] || fail "no forwarder summary"
    [ "$(echo "$fwd" | awk '{print $6}')" -ge 43 ] || fail "the forwarder moved too few packets: $fwd"
    check_teardown
    tag=$(sed -n 's/^emucluster: \(bcl[0-9]*\): .*/\1/p' "$log" | head -1)
    if pgrep -f -- "braid-netdelay .* ${tag}_h0=" >/dev/null; then fail "forwarder left running"; fi
    echo "delay ok: $line (one way 5 ms)"

    # Every collective, checked, over delayed and shaped links; 8 B allreduce and sendrecv need
    # a packet from another host per operation, so each takes at least the 1 ms delay.
    emu --hosts 3 --ranks 1 --delay 1ms --delay-by tun --rate 1gbit --timeout 240 -- \
      "$bin/braid-perf" all -b 8 -e 64K -f 8 -n 2 -w 1 --reps 1
    [ "$rc" = 0 ] || fail "braid-perf over delayed links exited $rc"
    grep -q "wrong elements: 0 (OK)" "$log" || fail "braid-perf did not report 0 wrong elements"
    for coll in allreduce sendrecv; do
      t=$(awk -v c="$coll" '/^\[h0\] \[0\] # [a-z]+$/ { sec = $NF } sec == c && $3 == 8 { print $(NF-3); exit }' "$log")
      [ -n "$t" ] || fail "no 8 B $coll row"
      awk -v t="$t" 'BEGIN { exit !(t >= 1000) }' || fail "8 B $coll took $t us, less than the 1 ms delay"
      echo "8 B $coll: $t us (>= 1000)"
    done
    check_teardown

    # SIGKILL: nothing can clean up at once. The forwarder goes by itself (--parent-pid);
    # the ranks stay until the next run removes the namespaces of runs whose script is gone.
    marker="sleep 597.$$"
    start_hosts "$marker" --hosts 2 --ranks 1 --delay 1ms --delay-by tun
    tag="bcl$pid"
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    for _ in $(seq 1 100); do
      pgrep -f -- "braid-netdelay .* ${tag}_h0=" >/dev/null || break
      sleep 0.1
    done
    if pgrep -f -- "braid-netdelay .* ${tag}_h0=" >/dev/null; then fail "the forwarder of $tag survived its script"; fi
    ip netns list | grep -q "^${tag}_" || fail "the killed run left no namespaces (nothing to test)"
    emu --hosts 2 --ranks 1 --delay 1ms --delay-by tun -- true
    [ "$rc" = 0 ] || fail "the run after the killed one exited $rc"
    grep -q "removed ${tag}_h0, left by a run that was killed" "$log" || fail "$tag's namespaces were not removed"
    if ip netns list | grep -q "^${tag}_"; then fail "namespaces of $tag left"; fi
    if pgrep -f "^$marker" >/dev/null; then fail "processes left: $(pgrep -af "^$marker")"; fi
    check_teardown
    echo "SIGKILL ok: forwarder gone by itself, $tag removed by the next run"
    ;;
  delay_args)
    nd="$bin/braid-netdelay"
    [ -x "$nd" ] || fail "no $nd"
    # expect RC PATTERN ARGS...: braid-netdelay ARGS exits RC and says PATTERN.
    expect() {
      local want=$1 pattern=$2 out got
      shift 2
      out=$("$nd" "$@" 2>&1)
      got=$?
      [ "$got" = "$want" ] || fail "braid-netdelay $*: exit $got, expected $want ($out)"
      echo "$out" | grep -qF -- "$pattern" || fail "braid-netdelay $*: no '$pattern' in: $out"
      echo "ok: braid-netdelay $* -> $got: $(echo "$out" | head -1)"
    }
    expect 2 "--delay: missing" a=198.18.0.1
    expect 2 "--delay: expected a duration" --delay 5 a=198.18.0.1
    expect 2 "--delay: expected a duration" --delay -1ms a=198.18.0.1
    expect 2 "--delay: expected a duration" --delay 1 a=198.18.0.1
    expect 2 "--delay: at most 60s" --delay 61s a=198.18.0.1
    expect 2 "--delay: missing value" --delay
    expect 2 "NETNS=ADDR: no host given" --delay 1ms
    expect 2 "host 'a': expected NETNS=ADDR" --delay 1ms a
    expect 2 "'198.18.0' is not an IPv4 or IPv6 address" --delay 1ms a=198.18.0
    expect 2 "address 198.18.0.1 is given twice (hosts 'a' and 'b')" --delay 1ms a=198.18.0.1 b=fd00::1,198.18.0.1
    expect 2 "--ifname: 'x234567890123456'" --delay 1ms --ifname x234567890123456 a=198.18.0.1
    expect 2 "--parent-pid: expected a process id" --delay 1ms --parent-pid x a=198.18.0.1
    expect 2 "unknown option '--bogus'" --bogus
    expect 1 "host 'bclnone_h9': cannot open /run/netns/bclnone_h9" --delay 1ms bclnone_h9=198.18.0.1
    expect 0 "usage: braid-netdelay" --help
    ;;
  skip)
    # Without root the script skips (77) and says why, creating nothing.
    command -v setpriv >/dev/null || { echo "no setpriv: cannot drop root"; exit 77; }
    [ "$(id -u)" = 0 ] || { echo "not root: nothing to drop"; exit 77; }
    setpriv --reuid 65534 --regid 65534 --clear-groups "$emu" --bin "$bin" -- true >"$log" 2>&1
    rc=$?
    cat "$log"
    [ "$rc" = 77 ] || fail "non-root run exited $rc, expected 77"
    grep -q "SKIP: needs root" "$log" || fail "no reason printed"
    echo "skip ok"
    ;;
  *) fail "unknown case" ;;
esac
