#!/usr/bin/env bash
# The paths other CPUs take, run on this one (docs/testing.md, "Machine independence"): the
# kernel tests and the collective sweeps once per instruction-set level, forced with
# BRAID_KERNEL_ISA (each test binary's main applies it process-wide, and
# Kernels.RunsAtTheLevelTheEnvironmentForces fails if any call ran at another level), then once
# with a fake 8 KiB last-level cache (BRAID_LLC_SIZE), so that non-temporal stores start at
# 4 KiB instead of at half of this machine's cache. A level this CPU lacks is skipped, and the
# run says so. .ci/run runs this after `make test` with --below-best: the CPU's best level is
# the one `make test` just ran everything at, so only the levels below it and the fake cache run.
#   scripts/test_machines.sh [--below-best] [BUILD_DIR]      (JOBS binaries at once, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
below_best=0
if [ "${1:-}" = --below-best ]; then
  below_best=1
  shift
fi
build=${1:-build}
bin="$build/bin"
# The machine profile (BRAID_TUNE_CACHE's default, under XDG_CACHE_HOME) of this run only, as
# ctest does for the suite: the user's own profile neither changes these tests nor is written.
XDG_CACHE_HOME=$(mktemp -d)
export XDG_CACHE_HOME
# Kept however busy the CPUs are, as in ctest (CMakeLists.txt, BRAID_TEST_ENV).
export BRAID_TUNE_MAX_BUSY=100
trap 'rm -rf "$XDG_CACHE_HOME"' EXIT
# The kernel sweep itself runs every supported level explicitly in `make test`: skip it here.
binaries=(
  "braid_unit_kernels_test --gtest_filter=-*/KernelSweep.*"
  "braid_unit_machine_test"
  "braid_algo_sweep_test"
  "braid_comm_collectives_test"
  "braid_comm_shm_direct_test --gtest_filter=-*LargeMessages*"
  "braid_comm_shm_ll_test"
  "braid_train_compress_test"
)
levels=$(env -u BRAID_KERNEL_ISA -u BRAID_LLC_SIZE "$bin/braid-info" |
  sed -n 's/^kernels: [^(]*(this CPU: \([^)]*\)).*/\1/p')
[ -n "$levels" ] || { echo "test_machines: braid-info printed no kernel levels"; exit 1; }
failed=()
# The binaries of a set run $JOBS at a time (2 by default, as ctest in `make test`); their
# reports print in the list's order.
jobs=${JOBS:-2}
run_set() {
  local label=$1
  shift
  local start=$SECONDS
  local logs=() pids=() i
  for i in "${!binaries[@]}"; do
    read -r -a cmd <<<"${binaries[$i]}"
    logs[i]=$(mktemp)
    env "$@" "$bin/${cmd[0]}" "${cmd[@]:1}" >"${logs[$i]}" 2>&1 &
    pids[i]=$!
    # At most $jobs running: wait for the oldest still running before starting another.
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  done
  for i in "${!binaries[@]}"; do
    read -r -a cmd <<<"${binaries[$i]}"
    if wait "${pids[$i]}"; then
      printf '  %-32s %s\n' "${cmd[0]}" "$(grep -m1 -o 'PASSED .*' "${logs[$i]}" || echo passed)"
    else
      printf '  %-32s FAILED\n' "${cmd[0]}"
      grep -E '^\[  FAILED|Failure|error' "${logs[$i]}" | head -20 | sed 's/^/    /'
      failed+=("$label ${cmd[0]}")
    fi
    rm -f "${logs[$i]}"
  done
  echo "  ($label: $((SECONDS - start)) s)"
}
for isa in avx512 avx2 scalar; do
  case " $levels " in
    *" $isa "*) ;;
    *)
      echo "== BRAID_KERNEL_ISA=$isa: skipped, this CPU lacks it (it has: $levels)"
      continue
      ;;
  esac
  if [ $below_best = 1 ] && [ "$isa" = "${levels##* }" ]; then
    echo "== BRAID_KERNEL_ISA=$isa: skipped, this CPU's best level: the suite ran at it"
    continue
  fi
  echo "== BRAID_KERNEL_ISA=$isa: $(BRAID_KERNEL_ISA=$isa "$bin/braid-info" | sed -n 's/^kernels: //p')"
  run_set "BRAID_KERNEL_ISA=$isa" BRAID_KERNEL_ISA="$isa"
done
echo "== BRAID_LLC_SIZE=8K: $(BRAID_LLC_SIZE=8K "$bin/braid-info" | sed -n 's/^kernels: //p')"
run_set "BRAID_LLC_SIZE=8K" BRAID_LLC_SIZE=8K
if [ ${#failed[@]} -gt 0 ]; then
  echo "test_machines: FAILED: ${failed[*]}"
  exit 1
fi
echo "test_machines: every forced level and the fake cache passed"
