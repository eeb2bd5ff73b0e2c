// Reduction kernel throughput next to memcpy, at every instruction-set level this CPU supports
// (kernels::supportedIsas()), in cache (64 KiB) and out of cache (64 MiB):
//   Reduce/<isa>/<dtype>/<op>/<bytes>     reduceInto(isa, ...): dst = dst op src, cached stores
//   Memcpy/<bytes>                        memcpy of the same bytes
//   Store/<isa>/fp32/sum/<form>/<mode>/<bytes>   cached vs non-temporal (streaming) stores for
//                                          reduce3 into a distinct dst and reduceInto in place
// Bytes processed = bytes of dst (what an allreduce step reduces), so the GB/s of a kernel and
// of memcpy compare directly; a reduction also reads src, so it moves 1.5x memcpy's traffic per
// byte processed (2x with a distinct dst). Every combination is registered; docs/benchmarks.md
// gives the filter and the numbers of one run.
//
//   build/bin/kernels_bench --benchmark_filter='Memcpy|Store|Reduce/[a-z0-9]+/(fp32|[a-z0-9]+/sum)'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/reduce.hpp"

namespace {

using braid::DataType;
using braid::ReduceOp;
using braid::kernels::Isa;
using braid::kernels::StoreMode;

constexpr std::size_t kInCache = std::size_t{64} << 10;
constexpr std::size_t kOutOfCache = std::size_t{64} << 20;

// Every element = one (1.0 for floats): sums stay finite (fp16 stops growing at 2048, bf16 at
// 256), products stay 1, and no operand is ever denormal, so no value-dependent slow path is
// measured.
void fillOnes(std::vector<std::uint8_t>& v, DataType t) {
  const std::size_t es = braid::dataTypeSize(t);
  std::uint64_t one = 1;
  switch (t) {
    case DataType::Float16:
      one = 0x3c00;
      break;
    case DataType::BFloat16:
      one = 0x3f80;
      break;
    case DataType::Float32:
      one = 0x3f800000;
      break;
    case DataType::Float64:
      one = 0x3ff0000000000000ULL;
      break;
    default:
      break;
  }
  for (std::size_t i = 0; i + es <= v.size(); i += es) std::memcpy(v.data() + i, &one, es);
}

void setBytes(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}

void reduceBench(benchmark::State& state, Isa isa, DataType t, ReduceOp op, std::size_t bytes) {
  const std::size_t count = bytes / braid::dataTypeSize(t);
  std::vector<std::uint8_t> dst(bytes), src(bytes);
  fillOnes(dst, t);
  fillOnes(src, t);
  for (auto _ : state) {
    braid::kernels::reduceInto(isa, t, op, dst.data(), src.data(), count, StoreMode::Cached);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  setBytes(state, bytes);
}

void storeBench(benchmark::State& state, Isa isa, bool inPlace, StoreMode mode, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(float);
  std::vector<std::uint8_t> dst(bytes), a(bytes), b(bytes);
  fillOnes(dst, DataType::Float32);
  fillOnes(a, DataType::Float32);
  fillOnes(b, DataType::Float32);
  for (auto _ : state) {
    if (inPlace)
      braid::kernels::reduceInto(isa, DataType::Float32, ReduceOp::Sum, dst.data(), b.data(), count,
                                 mode);
    else
      braid::kernels::reduce3(isa, DataType::Float32, ReduceOp::Sum, dst.data(), a.data(), b.data(),
                              count, mode);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  setBytes(state, bytes);
}

void memcpyBench(benchmark::State& state, std::size_t bytes) {
  std::vector<std::uint8_t> dst(bytes), src(bytes);
  fillOnes(dst, DataType::Uint8);
  fillOnes(src, DataType::Uint8);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  setBytes(state, bytes);
}

std::string sizeName(std::size_t bytes) {
  return bytes >= (std::size_t{1} << 20) ? std::to_string(bytes >> 20) + "M"
                                         : std::to_string(bytes >> 10) + "K";
}

std::string lower(const char* s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

void registerAll() {
  for (std::size_t bytes : {kInCache, kOutOfCache}) {
    benchmark::RegisterBenchmark(("Memcpy/" + sizeName(bytes)).c_str(), memcpyBench, bytes)
        ->UseRealTime();
    for (Isa isa : braid::kernels::supportedIsas()) {
      for (DataType t :
           {DataType::Float32, DataType::Float16, DataType::BFloat16, DataType::Float64,
            DataType::Int8, DataType::Uint8, DataType::Int32, DataType::Int64})
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
          std::string name = std::string("Reduce/") + braid::kernels::toString(isa) + "/" +
                             braid::toString(t) + "/" + lower(braid::toString(op)) + "/" +
                             sizeName(bytes);
          benchmark::RegisterBenchmark(name.c_str(), reduceBench, isa, t, op, bytes)->UseRealTime();
        }
    }
  }
  for (Isa isa : braid::kernels::supportedIsas()) {
    if (isa == Isa::Scalar) continue;  // the scalar level has no non-temporal stores
    for (bool inPlace : {false, true})
      for (StoreMode mode : {StoreMode::Cached, StoreMode::Streaming}) {
        std::string name = std::string("Store/") + braid::kernels::toString(isa) + "/fp32/sum/" +
                           (inPlace ? "inplace" : "distinct") + "/" +
                           (mode == StoreMode::Cached ? "cached" : "streaming") + "/" +
                           sizeName(kOutOfCache);
        benchmark::RegisterBenchmark(name.c_str(), storeBench, isa, inPlace, mode, kOutOfCache)
            ->UseRealTime();
      }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  registerAll();
  benchmark::AddCustomContext("kernels.best", braid::kernels::toString(braid::kernels::bestIsa()));
  benchmark::AddCustomContext("kernels.streaming_threshold_bytes",
                              std::to_string(braid::kernels::streamingThresholdBytes()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
