#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) and runs each for
# a bounded time from a seed corpus it generates. Exits non-zero when a target crashes (the
# crashing input is kept under $BUILD/artifacts/), 77 when clang with libFuzzer is not available.
#
#   fuzz/run.sh [SECONDS]        default 20 seconds per target
#
# Environment: BRAID_FUZZ_BUILD (build folder, default build-fuzz), CXX_FUZZ (default clang++),
# BRAID_FUZZ_JOBS (parallel compiles, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-20}"
BUILD="${BRAID_FUZZ_BUILD:-build-fuzz}"
CXX="${CXX_FUZZ:-clang++}"
JOBS="${BRAID_FUZZ_JOBS:-2}"
TARGETS=(store_protocol_fuzz handshake_fuzz frame_fuzz topology_json_fuzz transport_acceptor_fuzz)
# The library sources the targets need (an archive: each target pulls only what it uses).
LIB_SRCS=(src/common/*.cpp src/store/store.cpp src/store/store_protocol.cpp src/store/memory_store.cpp
          src/transport/tcp/socket.cpp src/transport/tcp/tcp_connection.cpp
          src/transport/tcp/tcp_bootstrap.cpp src/transport/engine.cpp
          src/topology/json.cpp src/topology/topology.cpp src/topology/topology_json.cpp)

if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "fuzz: skipped: $CXX not found (scripts/install_deps.sh installs clang)"
  exit 77
fi
mkdir -p "$BUILD/obj" "$BUILD/artifacts"
probe="$BUILD/probe.cpp"
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$probe"
if ! "$CXX" -fsanitize=fuzzer "$probe" -o "$BUILD/probe" >/dev/null 2>&1; then
  echo "fuzz: skipped: $CXX cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)"
  exit 77
fi

# Line tables only: a crash's stack keeps file and line; full debug information only made
# the build longer.
FLAGS=(-std=c++20 -O1 -gline-tables-only -fno-omit-frame-pointer -fsanitize=address,undefined
       -fno-sanitize-recover=undefined -Iinclude -Isrc -DBRAID_VERSION=\"fuzz\")
echo "fuzz: building in $BUILD with $CXX"
compile() {  # src obj extra-flags...
  local src="$1" obj="$2"
  shift 2
  # Rebuilt when the source or any header under include/ or src/ is newer than the object.
  if [ ! -e "$obj" ] || [ -n "$(find "$src" include src -newer "$obj" -name '*.[ch]pp' -print -quit)" ]; then
    "$CXX" "${FLAGS[@]}" "$@" -c "$src" -o "$obj"
  fi
}
export -f compile
export CXX
objs=()
pids=()
for src in "${LIB_SRCS[@]}"; do
  obj="$BUILD/obj/$(echo "$src" | tr '/' '_').o"
  objs+=("$obj")
  compile "$src" "$obj" -fsanitize=fuzzer-no-link &
  pids+=($!)
  if [ ${#pids[@]} -ge "$JOBS" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
rm -f "$BUILD/libbraid_fuzz.a"
ar rcs "$BUILD/libbraid_fuzz.a" "${objs[@]}"
for t in "${TARGETS[@]}"; do
  compile "fuzz/$t.cpp" "$BUILD/obj/$t.o" -fsanitize=fuzzer-no-link
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "$BUILD/obj/$t.o" "$BUILD/libbraid_fuzz.a" -o "$BUILD/$t"
done
compile fuzz/make_seeds.cpp "$BUILD/obj/make_seeds.o"
"$CXX" "${FLAGS[@]}" "$BUILD/obj/make_seeds.o" "$BUILD/libbraid_fuzz.a" -o "$BUILD/make_seeds"

for t in "${TARGETS[@]}"; do mkdir -p "$BUILD/corpus/$t"; done
"$BUILD/make_seeds" "$BUILD/corpus/store_protocol_fuzz" "$BUILD/corpus/handshake_fuzz" \
  "$BUILD/corpus/frame_fuzz" "$BUILD/corpus/transport_acceptor_fuzz"
# Topology seeds: a fabricated nodes-only file and a dumped one with every field.
printf '{"nodes": [{"host": "a", "ranks": [0, 2]}, {"host": "b", "ranks": [1]}]}' \
  >"$BUILD/corpus/topology_json_fuzz/nodes.json"
printf '{"version": 1, "size": 2, "nodes": [{"host": "a", "host_id": "a/x", "leader": 0, "ranks": [0, 1]}], "ranks": [{"rank": 0, "node": 0, "local_rank": 0, "hostname": "a", "host_id": "a/x", "netns": "1", "numa_node": 0, "cpus": "0-1", "interfaces": [{"name": "lo", "addresses": ["127.0.0.1/8", "::1/128"]}]}, {"rank": 1, "host_id": "a/x", "numa_node": -1, "cpus": "", "interfaces": []}], "x": [1.5e3, -0, true, false, null, "\\u00e9\\n"]}' \
  >"$BUILD/corpus/topology_json_fuzz/dump.json"

status=0
for t in "${TARGETS[@]}"; do
  echo "fuzz: $t for ${SECONDS_PER_TARGET} s"
  log="$BUILD/$t.log"
  if "$BUILD/$t" "$BUILD/corpus/$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=4096 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$BUILD/artifacts/$t-" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz: $t passed: ${runs:-?} runs, ${cov:-cov ?}, corpus $(ls "$BUILD/corpus/$t" | wc -l) inputs"
  else
    status=1
    echo "fuzz: $t FAILED; log $log, crashing input under $BUILD/artifacts/:"
    grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -20 || true
    tail -20 "$log"
  fi
done
exit $status
