#!/usr/bin/env bash
# ctest braid_train_shaped_link: bench/shaped_link.sh works (not how fast: no speed threshold).
#   tests/train/shaped_link_test.sh BUILD_DIR
# Runs train_bench's overlap and compress modes once each, small, over a 200 Mbit/s shaped
# loopback in a namespace of their own, and checks: exit status 0; the overlap results were
# verified element by element ("check: ... ok") and every timing row is there; every compressor
# printed a row; traffic went through the shaped qdisc; and afterwards no process is left in the
# namespace (it is gone). Exit 77 (ctest: skipped) where the script skips (no root, no tbf).
set -uo pipefail
BUILD=${1:?usage: shaped_link_test.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
SCRIPT=$HERE/../../bench/shaped_link.sh
fail() {
  echo "FAIL: $*"
  exit 1
}

run() {  # run LABEL ARGS... -> $OUT, $RC
  OUT=$("$SCRIPT" --build "$BUILD" --rate 200mbit --timeout 400 "$@" 2>&1)
  RC=$?
  echo "$OUT"
  [[ $RC -eq 77 ]] && exit 77
  [[ $RC -eq 0 ]] || fail "shaped_link.sh $* exited $RC"
  local ns
  ns=$(grep -o 'namespace net:\[[0-9]*\]' <<<"$OUT" | head -1 | cut -d' ' -f2)
  [[ -n $ns ]] || fail "no namespace id printed"
  [[ $ns != "$(readlink /proc/self/ns/net)" ]] || fail "ran in this test's own namespace"
  local left="" link
  for link in /proc/[0-9]*/ns/net; do
    [[ $(readlink "$link" 2>/dev/null) == "$ns" ]] && left+=" ${link%/ns/net}"
  done
  [[ -z $left ]] || fail "processes still in $ns after exit:$left"
  local sent
  sent=$(sed -n 's/^# shaped link: \([0-9]*\) bytes went through.*/\1/p' <<<"$OUT")
  [[ -n $sent && $sent -gt 1000000 ]] || fail "only '${sent}' bytes went through the shaped qdisc"
}

run overlap --bytes 1M --chunks 4 --reps 1
for row in "compute only" "allreduce only (chunked)" "max(compute, comm)" \
  "serial: compute, then allreduce" "overlapped (chunked async)" "overlapped / max(compute, comm)"; do
  grep -qF "$row" <<<"$OUT" || fail "overlap: no '$row' line"
done
grep -q "^# check: .*: ok$" <<<"$OUT" || fail "overlap: results not verified ok"

run compress --bytes 256K --steps 2 --reps 1 --methods none,int8,topk:0.01,randk:0.01,sign
for m in none int8 topk:0.01 randk:0.01 sign; do
  grep -qE "^  $m +[0-9.]+ " <<<"$OUT" || fail "compress: no row for $m"
done
echo "shaped_link_test: ok"
