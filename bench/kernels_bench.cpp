// Reduction kernel throughput next to memcpy: kernels::reduceInto (dst = dst + src) for fp32,
// bf16, fp16 and int32 sum at 4 KiB (L1), 256 KiB (L2) and 8 MiB (memory), and memcpy of the
// same size. Bytes processed = bytes of dst (what an allreduce step reduces), so the GB/s of a
// kernel and of memcpy compare directly; a reduction also reads src, so it moves 1.5x memcpy's
// traffic per byte processed.
//
//   build-*/bin/kernels_bench --benchmark_filter=Reduce
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/reduce.hpp"

namespace {

using braid::DataType;
using braid::ReduceOp;

void fillBytes(std::vector<std::uint8_t>& v, std::uint8_t seed) {
  // Small finite values for every dtype (exponent bits never all ones).
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<std::uint8_t>((i * 7 + seed) & 0x3f);
}

void reduceBench(benchmark::State& state, DataType t) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / braid::dataTypeSize(t);
  std::vector<std::uint8_t> dst(bytes), src(bytes);
  fillBytes(dst, 1);
  fillBytes(src, 2);
  for (auto _ : state) {
    braid::kernels::reduceInto(t, ReduceOp::Sum, dst.data(), src.data(), count);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
  state.SetLabel(braid::kernels::selectedIsa());
}

void memcpyBench(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint8_t> dst(bytes), src(bytes);
  fillBytes(src, 2);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}

#define BRAID_SIZES Arg(4 << 10)->Arg(256 << 10)->Arg(8 << 20)

BENCHMARK_CAPTURE(reduceBench, ReduceSumFp32, DataType::Float32)->BRAID_SIZES;
BENCHMARK_CAPTURE(reduceBench, ReduceSumBf16, DataType::BFloat16)->BRAID_SIZES;
BENCHMARK_CAPTURE(reduceBench, ReduceSumFp16, DataType::Float16)->BRAID_SIZES;
BENCHMARK_CAPTURE(reduceBench, ReduceSumInt32, DataType::Int32)->BRAID_SIZES;
BENCHMARK(memcpyBench)->Name("Memcpy")->BRAID_SIZES;

}  // namespace

BENCHMARK_MAIN();
