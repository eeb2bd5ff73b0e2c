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

# The emulated hosts' namespaces of the run in $log must all be gone.
check_teardown() {
  local tag
  tag=$(sed -n 's/^emucluster: \(bcl[0-9]*\): .*/\1/p' "$log" | head -1)
  [ -n "$tag" ] || fail "no cluster tag in the output"
  grep -q "emucluster: teardown done ($tag" "$log" || fail "no teardown confirmation for $tag"
  if ip netns list | grep -q "^${tag}_"; then fail "namespaces left: $(ip netns list | grep "^${tag}_")"; fi
  if ip -o link | grep -q "$tag"; then fail "links left behind by $tag"; fi
}

# check_paths HOSTS RANKS: braid-info --paths (rank 0, on host 0) shows shm between ranks of one
# host and tcp between hosts.
check_paths() {
  local hosts=$1 ranks=$2 n=$(($1 * $2)) r p got want seen=0
  for ((r = 0; r < n; r++)); do
    row=$(grep -E "^\[h0\] \[0\] +$r( |$)" "$log" | grep -F self | tail -1)
    [ -n "$row" ] || fail "no paths row for rank $r"
    read -r -a cells <<<"$(echo "$row" | sed 's/^\[h0\] \[0\] *//')"
    for ((p = 0; p < n; p++)); do
      [ "$p" = "$r" ] && continue
      got=${cells[$((p + 1))]:-}
      if [ $((r / ranks)) = $((p / ranks)) ]; then want=shm; else want=tcp; fi
      case "$got" in "$want"*) ;; *) fail "path $r -> $p is '$got', expected $want" ;; esac
      seen=$((seen + 1))
    done
  done
  [ "$seen" = $((n * (n - 1))) ] || fail "checked $seen paths of $((n * (n - 1)))"
  echo "paths ok: $seen pairs (shm inside a host, tcp across)"
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

# Every collective, every dtype x op, checked on every element, small odd sizes, chunks of 1 KiB
# so that the pipelined paths run. Then, on a fresh cluster (a second job on the same store port
# could meet the first one's store), the paths matrix with INFO logging.
perf=("$bin/braid-perf" all -b 8 -e 100K -f 7 -n 2 -w 1 --reps 1 -d all -o all)
paths=("$bin/braid-info" --paths)
common=(--timeout 240 --env BRAID_CHUNK_SIZE=1K --env BRAID_SMALL_MSG_SIZE=4K)

# cluster HOSTS RANKS REASON EXTRA...: the jobs on HOSTS x RANKS (emucluster options EXTRA), each
# with its checks; REASON: why every rank's listener must have picked its host's address.
cluster() {
  local hosts=$1 ranks=$2 reason=$3
  shift 3
  emu --hosts "$hosts" --ranks "$ranks" "$@" "${common[@]}" -- "${perf[@]}"
  [ "$rc" = 0 ] || fail "braid-perf on the cluster exited $rc"
  grep -q "wrong elements: 0 (OK)" "$log" || fail "braid-perf did not report 0 wrong elements"
  check_teardown
  emu --hosts "$hosts" --ranks "$ranks" "$@" --env BRAID_DEBUG=INFO -- "${paths[@]}"
  [ "$rc" = 0 ] || fail "braid-info --paths on the cluster exited $rc"
  check_paths "$hosts" "$ranks"
  check_listen "$hosts" "$ranks" "$reason"
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
    "$emu" --bin "$bin" --hosts 2 --ranks 1 -- sh -c "exec $marker" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do
      [ "$(pgrep -fc "^$marker")" = 2 ] && break
      sleep 0.1
    done
    [ "$(pgrep -fc "^$marker")" = 2 ] || { kill -TERM "$pid"; wait "$pid"; cat "$log"; fail "hosts did not start"; }
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
