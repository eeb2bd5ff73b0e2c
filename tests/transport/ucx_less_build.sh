#!/usr/bin/env bash
# A build of braid without UCX (-DBRAID_WITH_UCX=OFF, as on a machine without libucx-dev):
# configures a separate build tree, builds the transport library, and checks that it has no
# UCX in it and that createUcxTransport is the one that says the build has no UCX
# (src/transport/ucx_absent.cpp; its behaviour is tested by braid_transport_ucx_absent_test).
# Usage: ucx_less_build.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
out=$2/ucx-less
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# What is checked is what the library links, not its speed: built unoptimised and without debug
# information, which takes a fraction of the -O2 -g build's time (docs/testing.md).
cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DCMAKE_C_FLAGS_DEBUG=-O0 -DBRAID_WITH_UCX=OFF \
  -DBRAID_BUILD_TESTS=OFF -DBRAID_BUILD_BENCH=OFF "${launcher[@]}" >"$out.configure.log" 2>&1 ||
  { cat "$out.configure.log"; exit 1; }
grep -q "BRAID_HAVE_UCX:INTERNAL=OFF\|^BRAID_WITH_UCX:BOOL=OFF" "$out/CMakeCache.txt"
if grep -q "UCX .* found: the UCX transport is built" "$out.configure.log"; then
  echo "ucx_less_build: the UCX transport was configured although BRAID_WITH_UCX=OFF"; exit 1
fi
cmake --build "$out" -j2 --target braid_transport >"$out.build.log" 2>&1 || { tail -50 "$out.build.log"; exit 1; }
lib=$out/libbraid_transport.a
# The symbol tables into variables first: `nm | grep -q` under pipefail fails when grep's early
# exit makes nm die of SIGPIPE.
undefined=$(nm "$lib" | grep " U ucp_" || true)
if [ -n "$undefined" ]; then
  echo "ucx_less_build: $lib refers to UCX:"; echo "$undefined" | head; exit 1
fi
symbols=$(nm -C "$lib")
grep -q "T braid::transport::createUcxTransport" <<<"$symbols" ||
  { echo "ucx_less_build: $lib lacks createUcxTransport"; exit 1; }
grep -q "ucxUnavailableReason" <<<"$symbols" ||
  { echo "ucx_less_build: $lib lacks ucxUnavailableReason"; exit 1; }
echo "ucx_less_build: braid_transport builds without UCX; createUcxTransport reports its absence"
