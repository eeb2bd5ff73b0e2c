#!/usr/bin/env bash
# Runs braid's training benchmarks over a bandwidth-limited link, so that communication is bound
# by the wire instead of by the CPU (docs/training.md, "Measured over a shaped link").
#
#   sudo bench/shaped_link.sh [--rate 1gbit] [--burst 256kb] [--build build] [--np 2] MODE ...
#
#   MODE overlap  [train_bench overlap options]   e.g. --bytes 16M --chunks 16 --reps 5
#   MODE compress [train_bench compress options]  e.g. --bytes 4M --methods none,int8,sign
#   MODE run CMD [ARGS...]                         any command inside the shaped namespace
#
# How: the script re-runs itself under `unshare --net`, i.e. in a network namespace of its own
# whose only interface is a loopback that nothing else uses, sets a token-bucket qdisc on that
# loopback (tc qdisc add dev lo root tbf rate RATE burst BURST latency 50ms) and runs the ranks
# there with braid-run, over TCP (BRAID_SHM_DISABLE=1) on 127.0.0.1 (BRAID_LISTEN_ADDR).
# Every byte between the ranks (both directions, all ranks) passes that one qdisc: the ranks
# share one RATE link, like hosts on a RATE segment. The host's own network is not touched.
#
# Teardown: an unshare'd namespace has no name and disappears with the last process in it. The
# script deletes the qdisc and stops the ranks it started on every exit (normal, error, signal);
# if the script itself is killed with SIGKILL, braid-run's --timeout still ends the ranks and
# with them the namespace. It prints the namespace's id (net:[inode]) so a caller can check
# that no process is left in it (tests/train/shaped_link_test.sh does).
#
# Needs root (namespaces, tc) and the tbf qdisc: otherwise it prints why and exits 77 (skip).
set -euo pipefail

usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

RATE=1gbit
BURST=256kb
BUILD=build
NP=2
TIMEOUT=900
ORIG=("$@")
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rate) RATE=$2; shift 2 ;;
    --burst) BURST=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --np) NP=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h|--help) usage ;;
    overlap|compress|run) break ;;
    *) echo "shaped_link: unknown option '$1'" >&2; usage ;;
  esac
done
[[ $# -gt 0 ]] || usage
MODE=$1
shift

skip() {
  echo "shaped_link: skipped: $*"
  exit 77
}

if [[ -z ${BRAID_SHAPED_LINK_INSIDE:-} ]]; then
  [[ $(id -u) -eq 0 ]] || skip "needs root (a network namespace and a tc qdisc)"
  for tool in unshare ip tc; do
    command -v "$tool" >/dev/null || skip "'$tool' not found"
  done
  unshare --net true 2>/dev/null || skip "cannot create a network namespace (unshare --net)"
  export BRAID_SHAPED_LINK_INSIDE=1
  exec unshare --net -- "$0" "${ORIG[@]}"
fi

# ---- inside the namespace of our own
BIN=$(cd "$BUILD" && pwd)/bin
ip link set lo up
if ! out=$(tc qdisc add dev lo root tbf rate "$RATE" burst "$BURST" latency 50ms 2>&1); then
  skip "cannot shape the loopback with tc tbf: $out"
fi

CHILD=
cleanup() {
  local rc=$?
  if [[ -n $CHILD ]] && kill -0 "$CHILD" 2>/dev/null; then
    kill -TERM "$CHILD" 2>/dev/null || true  # braid-run forwards it to the ranks
    wait "$CHILD" 2>/dev/null || true
  fi
  tc qdisc del dev lo root 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

echo "# shaped link: namespace $(readlink /proc/self/ns/net), lo only, 127.0.0.1;" \
  "$(tc qdisc show dev lo | head -1)"
export BRAID_SHM_DISABLE=1 BRAID_LISTEN_ADDR=127.0.0.1

run_bg() {  # runs "$@" as a child we can stop from the traps, returns its status
  "$@" &
  CHILD=$!
  local rc=0
  wait "$CHILD" || rc=$?
  CHILD=
  return "$rc"
}

qdisc_bytes() {  # bytes that went through the shaped qdisc so far
  tc -s qdisc show dev lo | awk '/Sent/ {print $2; exit}'
}

rc=0
case "$MODE" in
  overlap)
    run_bg "$BIN/braid-run" -n "$NP" --timeout "$TIMEOUT" --no-prefix -- \
      "$BIN/train_bench" overlap "$@" || rc=$?
    ;;
  compress)
    run_bg "$BIN/braid-run" -n "$NP" --timeout "$TIMEOUT" --no-prefix -- \
      "$BIN/train_bench" compress "$@" || rc=$?
    ;;
  run)
    run_bg "$@" || rc=$?
    ;;
  *)
    echo "shaped_link: unknown mode '$MODE'" >&2
    usage
    ;;
esac
echo "# shaped link: $(qdisc_bytes) bytes went through the $RATE qdisc; exit status $rc"
exit "$rc"
