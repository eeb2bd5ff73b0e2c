// braid-perf's command line: the nccl-tests flags plus --algo, --json and --reps.
#pragma once

#include <braid/compress.hpp>
#include <braid/types.hpp>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bench_ops.hpp"
#include "common/text.hpp"

namespace braid::perf {

// The operations and their checks live in tools/common, shared with braid-check.
using tools::BenchCase;
using tools::BenchOp;
using tools::BenchOpInfo;
using tools::benchOps;
using tools::BenchRunner;
using tools::busFactor;
using tools::findBenchOp;
using tools::parseByteSize;

struct PerfArgs {
  std::vector<const BenchOpInfo*> ops;
  std::size_t minBytes = 8;
  std::size_t maxBytes = 256u << 20;
  std::size_t stepFactor = 4;
  int iters = 0;  // 0: by size, as the anchors (200 up to 64K ... 2 above 64M)
  int warmup = 5;
  bool check = true;
  bool elastic = false;  // --elastic: shrink on a lost rank and go on (docs/reliability.md)
  std::vector<DataType> dtypes{DataType::Float32};
  std::vector<ReduceOp> redops{ReduceOp::Sum};
  int root = 0;
  std::string algo;  // sets Options::algo when not empty
  std::optional<std::string> jsonPath;
  int reps = 7;
  /// --compress: allreduce runs through this compressor (fp32, sum or avg).
  std::optional<train::CompressionSpec> compress;
  /// --straggler RANK:MICROSECONDS: that rank sleeps this long before every operation, and the
  /// straggler report is printed at the end.
  int stragglerRank = -1;
  long stragglerMicros = 0;
  bool help = false;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The largest -b / -e: two page-rounded buffers of this size still fit a size_t (1 EiB).
inline constexpr std::size_t kMaxPerfBytes = std::size_t{1} << 60;

/// Throws UsageError naming the offending argument.
PerfArgs parsePerfArgs(int argc, char** argv);

/// minBytes, minBytes*f, ... up to maxBytes, and maxBytes itself (as the anchor benchmarks).
std::vector<std::size_t> sizeSteps(const PerfArgs& args);

/// Iterations per repetition when -n is not given: ~ a constant amount of data per repetition.
int itersForBytes(std::size_t bytes);

extern const char* const kPerfUsage;

}  // namespace braid::perf
