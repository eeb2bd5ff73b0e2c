// braid-perf: nccl-tests-style benchmark of braid's collectives.
//
// Method (the same as the reference benchmarks in anchors/, so ratios mean something): for
// each size, W untimed operations, then K repetitions of [barrier; N back-to-back blocking
// operations timed on each rank; per-op mean; max over ranks]; the median repetition is
// reported. With -c 1 one more operation runs on fresh inputs and every output element on every
// rank is compared with an independently computed value.
#include <unistd.h>

#include <algorithm>
#include <braid/braid.hpp>
#include <braid/compress.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/reduce.hpp"
#include "perf_args.hpp"

namespace braid::perf {
namespace {

using tools::formatBytes;
using tools::jsonString;

constexpr int kExitBraidError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitWrong = 3;

/// Page-aligned memory, touched once so page faults stay out of the timings.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(std::size_t bytes) {
    constexpr std::size_t kAlign = 4096;
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    data_.reset(std::aligned_alloc(kAlign, rounded));
    if (!data_) throw std::bad_alloc();
    std::memset(data_.get(), 0, rounded);
  }
  void* get() const { return data_.get(); }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
};

struct Result {
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::string algo;
  int iters = 0;
  double seconds = 0;  // median over repetitions of the max over ranks of the per-op mean
  std::int64_t wrong = 0;
  // --compress only: bytes each rank sends (averaged over ranks), the same for a plain fp32
  // allreduce, and the relative 2-norm error of one compressed allreduce against the exact one.
  double wireBytes = 0;
  double denseWireBytes = 0;
  double relError = 0;
};

class Benchmark {
 public:
  Benchmark(const PerfArgs& args, Comm& comm)
      : args_(args),
        comm_(comm),
        send_(args.maxBytes),
        recv_(args.maxBytes),
        runner_(comm, send_.get(), recv_.get()) {}

  int run();
  /// --elastic: cases (sizes of every op, dtype, redop) completed; a rerun skips that many.
  std::size_t done = 0;
  std::size_t skip = 0;
  /// Milliseconds this rank spent creating the communicator (max over ranks in the JSON).
  double initMs = 0;

 private:
  Result measure(const BenchCase& c);
  Result measureCompressed(const BenchCase& c);
  std::string algorithmName(const BenchCase& c, std::size_t bytes) const;
  void printHeader() const;
  void printGroupHeader(const BenchOpInfo& op) const;
  void report(const BenchCase& c, const Result& r);
  bool openJson();
  /// --straggler: the straggler rank sleeps before each operation.
  void straggle() const {
    if (comm_.rank() == args_.stragglerRank)
      std::this_thread::sleep_for(std::chrono::microseconds(args_.stragglerMicros));
  }

  const PerfArgs& args_;
  Comm& comm_;
  AlignedBuffer send_;
  AlignedBuffer recv_;
  BenchRunner runner_;
  std::ofstream jsonFile_;
  std::ostream* json_ = nullptr;
  bool jsonEverywhere_ =
      false;                  // every rank: rank 0 writes JSON (the exchanges below are collective)
  bool initReduced_ = false;  // initMs is the max over ranks
  double busbwSum_ = 0;
  int busbwRows_ = 0;
  std::int64_t totalWrong_ = 0;
  std::unique_ptr<train::Compressor> compressor_;
  std::string stragglerText_;
};

double maxOverRanks(Comm& comm, double v) {
  double out = 0;
  comm.allreduce(&v, &out, 1, DataType::Float64, ReduceOp::Max);
  return out;
}

std::int64_t sumOverRanks(Comm& comm, std::int64_t v) {
  std::int64_t out = 0;
  comm.allreduce(&v, &out, 1, DataType::Int64, ReduceOp::Sum);
  return out;
}

std::string Benchmark::algorithmName(const BenchCase& c, std::size_t bytes) const {
  if (c.info->op == BenchOp::SendRecv) return "p2p";
  try {
    return comm_.selectedAlgorithm(c.info->coll, bytes);
  } catch (const std::exception&) {
    return args_.algo.empty() ? "?" : args_.algo;
  }
}

/// Rank r's input for --compress: uniform in [-1, 1) from a hash of (rank, index), with a scale
/// that changes every 1000 elements (real gradients are not uniform either).
float compressInput(int rank, std::size_t i) {
  std::uint64_t z = (static_cast<std::uint64_t>(rank) << 40) ^ i;
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
  z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ull;
  z ^= z >> 33;
  const double u = static_cast<double>(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
  return static_cast<float>(u * (1.0 + static_cast<double>((i / 1000) % 7)));
}

Result Benchmark::measureCompressed(const BenchCase& c) {
  using Clock = std::chrono::steady_clock;
  Result r;
  r.count = c.count;
  r.bytes = c.count * 4;
  r.algo = args_.compress->toString();
  r.iters = args_.iters > 0 ? args_.iters : itersForBytes(r.bytes);
  auto* in = static_cast<float*>(send_.get());
  auto* work = static_cast<float*>(recv_.get());
  for (std::size_t i = 0; i < c.count; ++i) in[i] = compressInput(comm_.rank(), i);
  auto once = [&] {
    straggle();
    std::memcpy(work, in, r.bytes);
    return compressor_->allreduce(comm_, work, c.count, c.redop);
  };
  for (int w = 0; w < args_.warmup; ++w) once();
  std::vector<double> reps;
  for (int k = 0; k < args_.reps; ++k) {
    straggle();
    comm_.barrier();
    const auto t0 = Clock::now();
    for (int it = 0; it < r.iters; ++it) once();
    const double perOp = std::chrono::duration<double>(Clock::now() - t0).count() / r.iters;
    straggle();
    reps.push_back(maxOverRanks(comm_, perOp));
  }
  std::sort(reps.begin(), reps.end());
  const std::size_t mid = reps.size() / 2;
  r.seconds = reps.size() % 2 == 1 ? reps[mid] : 0.5 * (reps[mid - 1] + reps[mid]);

  const train::CompressStats stats = once();
  r.wireBytes = stats.wireBytes;
  r.denseWireBytes = stats.denseWireBytes;
  std::vector<float> exact(in, in + c.count);
  straggle();
  comm_.allreduce(exact.data(), exact.data(), c.count, DataType::Float32, c.redop);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < c.count; ++i) {
    diff += (static_cast<double>(work[i]) - exact[i]) * (static_cast<double>(work[i]) - exact[i]);
    norm += static_cast<double>(exact[i]) * exact[i];
  }
  straggle();
  r.relError = maxOverRanks(comm_, norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff));
  return r;
}

Result Benchmark::measure(const BenchCase& c) {
  if (compressor_ && c.info->op == BenchOp::Allreduce) return measureCompressed(c);
  using Clock = std::chrono::steady_clock;
  Result r;
  r.count = c.count;
  r.bytes = c.count * dataTypeSize(c.dtype);
  r.algo = algorithmName(c, r.bytes);
  r.iters = args_.iters > 0 ? args_.iters : itersForBytes(r.bytes);

  runner_.prepare(c);
  for (int w = 0; w < args_.warmup; ++w) {
    straggle();
    runner_.run(c);
  }
  std::vector<double> reps;
  for (int k = 0; k < args_.reps; ++k) {
    straggle();
    comm_.barrier();
    const auto t0 = Clock::now();
    for (int it = 0; it < r.iters; ++it) {
      straggle();
      runner_.run(c);
    }
    const double perOp = std::chrono::duration<double>(Clock::now() - t0).count() / r.iters;
    straggle();
    reps.push_back(maxOverRanks(comm_, perOp));
  }
  std::sort(reps.begin(), reps.end());
  const std::size_t mid = reps.size() / 2;
  r.seconds = reps.size() % 2 == 1 ? reps[mid] : 0.5 * (reps[mid - 1] + reps[mid]);

  if (args_.check) {
    runner_.prepare(c);
    straggle();
    runner_.run(c);
    straggle();
    r.wrong = sumOverRanks(comm_, runner_.verify(c));
  }
  return r;
}

void Benchmark::printHeader() const {
  std::string launch = "?";
  try {
    launch = LaunchInfo::fromEnv().source;
  } catch (const std::exception&) {
  }
  const Options& o = comm_.options();
  std::printf("# braid-perf (braid %s)\n", braid::version());
  std::printf("# nranks %d, launch %s, isa %s\n", comm_.size(), launch.c_str(),
              kernels::selectedIsa());
  std::printf("# minBytes %zu maxBytes %zu step %zu(factor) warmup %d iters %s reps %d check %d\n",
              args_.minBytes, args_.maxBytes, args_.stepFactor, args_.warmup,
              args_.iters > 0 ? std::to_string(args_.iters).c_str() : "by-size", args_.reps,
              args_.check ? 1 : 0);
  std::printf("# options: chunk %s buffer %s small %s algo '%s'\n",
              formatBytes(o.chunkBytes).c_str(), formatBytes(o.bufferBytes).c_str(),
              formatBytes(o.smallMessageBytes).c_str(), o.algo.c_str());
  std::printf(
      "# time: per-op mean of back-to-back blocking ops, max over ranks, median of %d reps\n",
      args_.reps);
}

void Benchmark::printGroupHeader(const BenchOpInfo& op) const {
  std::printf("#\n# %s\n", op.name);
  if (compressor_) {
    std::printf("# %10s %12s %6s %6s %5s %20s %10s %8s %8s %12s %12s %10s\n", "size", "count",
                "type", "redop", "root", "compress", "time", "algbw", "busbw", "wire", "dense",
                "relerr");
    std::printf("# %10s %12s %6s %6s %5s %20s %10s %8s %8s %12s %12s\n", "(B)", "(elements)", "",
                "", "", "", "(us)", "(GB/s)", "(GB/s)", "(B/rank)", "(B/rank)");
    std::fflush(stdout);
    return;
  }
  std::printf("# %10s %12s %6s %6s %5s %20s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
              "root", "algo", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s %12s %6s %6s %5s %20s %10s %8s %8s\n", "(B)", "(elements)", "", "", "", "",
              "(us)", "(GB/s)", "(GB/s)");
  std::fflush(stdout);
}

void Benchmark::report(const BenchCase& c, const Result& r) {
  totalWrong_ += r.wrong;
  // Read before the exchanges below (collectives themselves, which may open connections).
  double connections = static_cast<double>(comm_.connectionCount());
  if (jsonEverywhere_) {
    connections = maxOverRanks(comm_, connections);
    if (!initReduced_) {
      initMs = maxOverRanks(comm_, initMs);
      initReduced_ = true;
    }
  }
  if (comm_.rank() != 0) return;
  const double algbw = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0;
  const double busbw = algbw * busFactor(c.info->op, comm_.size());
  if (r.bytes > 0) {
    busbwSum_ += busbw;
    ++busbwRows_;
  }
  const std::string redop = c.info->reduces ? toString(c.redop) : "none";
  const int root = c.info->rooted ? c.root : -1;
  const std::string wrong = args_.check ? std::to_string(r.wrong) : "N/A";
  if (compressor_) {
    std::printf("  %10zu %12zu %6s %6s %5d %20s %10.2f %8.3f %8.3f %12.0f %12.0f %10.3e\n", r.bytes,
                r.count, toString(c.dtype), redop.c_str(), root, r.algo.c_str(), r.seconds * 1e6,
                algbw, busbw, r.wireBytes, r.denseWireBytes, r.relError);
  } else {
    std::printf("  %10zu %12zu %6s %6s %5d %20s %10.2f %8.3f %8.3f %7s\n", r.bytes, r.count,
                toString(c.dtype), redop.c_str(), root, r.algo.c_str(), r.seconds * 1e6, algbw,
                busbw, wrong.c_str());
  }
  std::fflush(stdout);
  if (json_ != nullptr) {
    char nums[160];
    std::snprintf(nums, sizeof nums, "\"time_us\":%.3f,\"algbw\":%.6f,\"busbw\":%.6f",
                  r.seconds * 1e6, algbw, busbw);
    *json_ << "{\"collective\":" << jsonString(c.info->name) << ",\"nranks\":" << comm_.size()
           << ",\"size\":" << r.bytes << ",\"count\":" << r.count
           << ",\"dtype\":" << jsonString(toString(c.dtype)) << ",\"redop\":" << jsonString(redop)
           << ",\"root\":" << root << ",\"algo\":" << jsonString(r.algo) << "," << nums
           << ",\"wrong\":" << (args_.check && !compressor_ ? std::to_string(r.wrong) : "null");
    if (compressor_) {
      char extra[200];
      std::snprintf(extra, sizeof extra,
                    ",\"compress\":%s,\"wire_bytes\":%.1f,\"dense_wire_bytes\":%.1f,"
                    "\"rel_error\":%.6e",
                    jsonString(r.algo).c_str(), r.wireBytes, r.denseWireBytes, r.relError);
      *json_ << extra;
    }
    char setup[96];
    std::snprintf(setup, sizeof setup, ",\"connections\":%.0f,\"init_ms\":%.3f", connections,
                  initMs);
    *json_ << setup << ",\"iters\":" << r.iters << ",\"reps\":" << args_.reps << "}\n";
    json_->flush();
  }
}

/// Rank 0 opens the JSON file; every rank learns whether that worked, so all exit together.
bool Benchmark::openJson() {
  double failed = 0;
  if (comm_.rank() == 0 && args_.jsonPath) {
    if (*args_.jsonPath == "-") {
      json_ = &std::cout;
    } else {
      jsonFile_.open(*args_.jsonPath, std::ios::out | std::ios::trunc);
      if (jsonFile_) {
        json_ = &jsonFile_;
      } else {
        std::fprintf(stderr, "braid-perf: cannot write --json file '%s': %s\n",
                     args_.jsonPath->c_str(), std::strerror(errno));
        failed = 1;
      }
    }
  }
  jsonEverywhere_ = args_.jsonPath.has_value();
  return maxOverRanks(comm_, failed) == 0;
}

int Benchmark::run() {
  if (!openJson()) return kExitUsage;
  if (args_.compress) compressor_ = train::Compressor::create(*args_.compress);
  if (comm_.rank() == 0 && skip == 0) printHeader();
  const int n = comm_.size();
  for (const BenchOpInfo* op : args_.ops) {
    if (comm_.rank() == 0) printGroupHeader(*op);
    const std::vector<ReduceOp> redops =
        op->reduces ? args_.redops : std::vector<ReduceOp>{ReduceOp::Sum};
    for (DataType dtype : args_.dtypes) {
      for (ReduceOp redop : redops) {
        if (op->reduces && !isSupported(dtype, redop)) {
          // -d all / -o all cross every dtype with every op: skip what braid rejects.
          if (comm_.rank() == 0)
            std::printf("# %s: %s is not supported for %s, skipped\n", op->name, toString(redop),
                        toString(dtype));
          continue;
        }
        for (std::size_t size : sizeSteps(args_)) {
          std::size_t count = size / dataTypeSize(dtype);
          if (op->perRankSplit) count = count / static_cast<std::size_t>(n) * n;
          const BenchCase c{op, dtype, redop, args_.root, count};
          if (done < skip) {
            ++done;
            continue;
          }
          report(c, measure(c));
          ++done;
          // Exchange the waits while the flight recorder still holds this size's collectives.
          if (args_.stragglerRank >= 0) stragglerText_ = comm_.stragglerReport();
        }
      }
    }
  }
  if (comm_.rank() == 0) {
    std::printf("#\n# avg bus bandwidth: %.3f GB/s\n",
                busbwRows_ > 0 ? busbwSum_ / busbwRows_ : 0.0);
    if (args_.check)
      std::printf("# wrong elements: %lld (%s)\n", static_cast<long long>(totalWrong_),
                  totalWrong_ == 0 ? "OK" : "FAILED");
    if (args_.stragglerRank >= 0) {
      std::printf("#\n# injected: rank %d sleeps %ld us before every operation\n",
                  args_.stragglerRank, args_.stragglerMicros);
      std::istringstream lines(stragglerText_);
      for (std::string line; std::getline(lines, line);) std::printf("# %s\n", line.c_str());
    }
    std::fflush(stdout);
  }
  return totalWrong_ == 0 ? 0 : kExitWrong;
}

int run(int argc, char** argv) {
  PerfArgs args;
  try {
    args = parsePerfArgs(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "braid-perf: %s\n(braid-perf --help shows the usage)\n", e.what());
    return kExitUsage;
  }
  if (args.help) {
    std::fputs(kPerfUsage, stdout);
    return 0;
  }
  // The two buffers must fit this host's memory: a size that does not is a usage error, before
  // anything is allocated (an allocation that overcommit lets through would be killed while it
  // is zeroed).
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long pageBytes = ::sysconf(_SC_PAGESIZE);
  const std::size_t memory = static_cast<std::size_t>(std::max(pages, 0L)) *
                             static_cast<std::size_t>(std::max(pageBytes, 0L));
  if (memory > 0 && args.maxBytes > memory / 2) {
    std::fprintf(stderr,
                 "braid-perf: -e %zu: cannot allocate two buffers of that size (this host has "
                 "%s of memory)\n(braid-perf --help shows the usage)\n",
                 args.maxBytes, formatBytes(memory).c_str());
    return kExitUsage;
  }
  int rank = -1;
  try {
    Options options = Options::fromEnv();
    if (!args.algo.empty()) {
      // Forced: a size the named algorithm cannot run fails naming the constraint, instead of
      // measuring another algorithm under its name.
      options.algo = args.algo;
      options.algoForce = true;
    }
    if (args.stragglerRank >= 0) {
      // Every collective of a size stays in the flight recorder until that size's exchange.
      options.stragglerSample = 1;
      options.flightRecorderOps = std::max<std::size_t>(options.flightRecorderOps, 8192);
    }
    const auto initStart = std::chrono::steady_clock::now();
    std::unique_ptr<Comm> comm = Comm::fromEnv(options);
    const double initMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - initStart)
            .count();
    rank = comm->rank();
    if (args.stragglerRank >= comm->size()) {
      if (rank == 0)
        std::fprintf(stderr, "braid-perf: --straggler %d: the rank must be below nranks (%d)\n",
                     args.stragglerRank, comm->size());
      return kExitUsage;
    }
    if (args.root >= comm->size()) {
      if (rank == 0)
        std::fprintf(stderr, "braid-perf: -r %d: the root must be below nranks (%d)\n", args.root,
                     comm->size());
      return kExitUsage;
    }
    std::optional<Benchmark> bench;
    try {
      bench.emplace(args, *comm);
      bench->initMs = initMs;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr,
                   "braid-perf: rank %d: -e %zu: cannot allocate two buffers of that size\n", rank,
                   args.maxBytes);
      return kExitUsage;
    }
    if (!args.elastic) return bench->run();
    // --elastic: a lost rank shrinks the communicator; the sweep goes on from the failed size.
    for (;;) {
      try {
        return bench->run();
      } catch (const Error& e) {
        if (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Timeout) throw;
        std::int64_t done = static_cast<std::int64_t>(bench->done);
        bench.reset();
        if (rank == 0) std::fprintf(stderr, "braid-perf: %s\n", e.what());
        const auto shrinkStart = std::chrono::steady_clock::now();
        comm = comm->shrink();
        const double shrinkMs = std::chrono::duration<double, std::milli>(
                                    std::chrono::steady_clock::now() - shrinkStart)
                                    .count();
        rank = comm->rank();
        // Go on from the first case some survivor did not finish.
        comm->allreduce(&done, &done, 1, DataType::Int64, ReduceOp::Min);
        if (rank == 0) {
          std::printf("# shrunk to %d ranks\n", comm->size());
          std::fflush(stdout);
        }
        bench.emplace(args, *comm);
        bench->initMs = shrinkMs;  // the shrunk communicator's creation
        bench->skip = static_cast<std::size_t>(done);
      }
    }
  } catch (const std::exception& e) {
    if (rank >= 0)
      std::fprintf(stderr, "braid-perf: rank %d: %s\n", rank, e.what());
    else
      std::fprintf(stderr, "braid-perf: %s\n", e.what());
    return kExitBraidError;
  }
}

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) {
  return braid::perf::run(argc, argv);
}
