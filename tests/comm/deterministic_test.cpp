// Deterministic mode (Options::deterministic, BRAID_DETERMINISTIC=1): allreduce, reduce,
// reduce_scatter and reduce_scatterv must give bitwise the rank-order reduction
// ((x0 op x1) op x2) ..., each step rounded to the dtype, on every rank, in every run, with every
// rank-ordered algorithm and over every transport (shared memory and TCP with ranks as threads,
// shared memory with ranks as processes, the in-process transport driving the algorithms
// directly). The data mixes +-big, 1, small values per element so that a different summation
// order gives different bits; the NonDeterministicOrdersDiffer test proves that it does, by
// finding differences with deterministic mode off. The reference is computed here, element by
// element, with the test's own arithmetic (not braid's kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "algo/algorithm.hpp"
#include "algo/rank_threads.hpp"
#include "harness/checks.hpp"
#include "harness/ranks.hpp"
#include "store/memory_store.hpp"

namespace braid::test {
namespace {

constexpr DataType kFloatTypes[] = {DataType::Float32, DataType::Float64, DataType::Float16,
                                    DataType::BFloat16};
constexpr Collective kReductions[] = {Collective::Allreduce, Collective::Reduce,
                                      Collective::ReduceScatter, Collective::ReduceScatterv};
// 1031 elements: many 64-byte chunks, and past shm_direct's 4 KiB one-step path for fp32/fp64.
constexpr std::size_t kCounts[] = {1, 7, 1031};

// ---- the data: per (rank, element) one of +big, -big, 1, -1, 3, small -------------------------

double bigOf(DataType t) {
  switch (t) {
    case DataType::Float16:
      return 2048;  // ulp 2: 2048 + 1 rounds back to 2048
    case DataType::BFloat16:
      return 512;  // ulp 4
    case DataType::Float32:
      return 1e8;  // ulp 8
    default:
      return 1e17;  // fp64: ulp 16
  }
}

double rawValue(DataType t, int rank, std::size_t i) {
  std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^
                    (static_cast<std::uint64_t>(rank) + 7) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const double big = bigOf(t);
  switch (h % 6) {
    case 0:
      return big;
    case 1:
      return -big;
    case 2:
      return 1;
    case 3:
      return -1;
    case 4:
      return 3;
    default:
      return 0.01 * static_cast<double>((h >> 8) % 7 + 1);
  }
}

// The test's own fp16/bf16 conversions (round to nearest even), independent of braid's kernels.
std::uint16_t toBf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
float fromBf16(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class T>
T combine(ReduceOp op, T acc, T x) {
  switch (op) {
    case ReduceOp::Prod:
      return acc * x;
    case ReduceOp::Min:
      return x < acc ? x : acc;
    case ReduceOp::Max:
      return acc < x ? x : acc;
    default:
      return acc + x;
  }
}

void storeValue(DataType t, double v, void* p) {
  switch (t) {
    case DataType::Float32: {
      float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case DataType::Float64:
      std::memcpy(p, &v, 8);
      return;
    case DataType::Float16: {
      _Float16 x = static_cast<_Float16>(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      return;
    }
    default: {
      std::uint16_t x = toBf16(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      return;
    }
  }
}

/// The rank-order reduction of element i over n ranks, in dtype t, stored at out.
void referenceElement(DataType t, ReduceOp op, int n, std::size_t i, void* out) {
  const bool avg = op == ReduceOp::Avg;
  switch (t) {
    case DataType::Float32: {
      float acc = static_cast<float>(rawValue(t, 0, i));
      for (int r = 1; r < n; ++r) acc = combine(op, acc, static_cast<float>(rawValue(t, r, i)));
      if (avg) acc = acc / static_cast<float>(n);
      std::memcpy(out, &acc, 4);
      return;
    }
    case DataType::Float64: {
      double acc = rawValue(t, 0, i);
      for (int r = 1; r < n; ++r) acc = combine(op, acc, rawValue(t, r, i));
      if (avg) acc = acc / static_cast<double>(n);
      std::memcpy(out, &acc, 8);
      return;
    }
    case DataType::Float16: {
      auto half = [](double v) { return static_cast<_Float16>(static_cast<float>(v)); };
      _Float16 acc = half(rawValue(t, 0, i));
      for (int r = 1; r < n; ++r)
        acc = static_cast<_Float16>(
            combine(op, static_cast<float>(acc), static_cast<float>(half(rawValue(t, r, i)))));
      if (avg) acc = static_cast<_Float16>(static_cast<float>(acc) / static_cast<float>(n));
      std::memcpy(out, &acc, 2);
      return;
    }
    default: {
      auto bf = [](double v) { return toBf16(static_cast<float>(v)); };
      std::uint16_t acc = bf(rawValue(t, 0, i));
      for (int r = 1; r < n; ++r)
        acc = toBf16(combine(op, fromBf16(acc), fromBf16(bf(rawValue(t, r, i)))));
      if (avg) acc = toBf16(fromBf16(acc) / static_cast<float>(n));
      std::memcpy(out, &acc, 2);
      return;
    }
  }
}

// ---- one case on one rank ---------------------------------------------------------------------

/// Runs collective k on this rank: (k, send, recv, count, counts, displs, dtype, op, root).
using RunFn =
    std::function<void(Collective, const void*, void*, std::size_t, std::span<const std::size_t>,
                       std::span<const std::size_t>, DataType, ReduceOp, int)>;

struct Case {
  Collective k;
  DataType t;
  ReduceOp op;
  std::size_t count;
  bool inPlace;
};

std::string describe(const Case& c, int rank, int n) {
  return std::string(toString(c.k)) + " " + toString(c.t) + " " + toString(c.op) + " count " +
         std::to_string(c.count) + (c.inPlace ? " in place" : "") + " on rank " +
         std::to_string(rank) + " of " + std::to_string(n);
}

/// Runs one case; returns how many result elements differ bitwise from the rank-order reference.
/// With `expectSame`, each difference is a test failure (the first one described).
std::size_t runCase(int rank, int n, const Case& c, const RunFn& run, bool expectSame) {
  const std::size_t es = dataTypeSize(c.t);
  // Per-rank counts of reduce_scatterv (some empty), packed.
  std::vector<std::size_t> counts(static_cast<std::size_t>(n)), displs(counts.size());
  std::size_t total = 0;
  for (int r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    switch (c.k) {
      case Collective::Allreduce:
      case Collective::Reduce:
        counts[ur] = r == 0 ? c.count : 0;
        break;
      case Collective::ReduceScatter:
        counts[ur] = c.count;
        break;
      default:
        counts[ur] = r % 3 == 1 ? 0 : c.count + static_cast<std::size_t>(r);
        break;
    }
    displs[ur] = total;
    total += counts[ur];
  }
  const int root = n - 1 - (static_cast<int>(c.count) % n);
  std::vector<std::uint8_t> send(total * es + 1);
  for (std::size_t i = 0; i < total; ++i) storeValue(c.t, rawValue(c.t, rank, i), &send[i * es]);

  // Which global elements this rank's result holds.
  std::size_t first = 0, mine = 0;
  switch (c.k) {
    case Collective::Allreduce:
      mine = c.count;
      break;
    case Collective::Reduce:
      mine = rank == root ? c.count : 0;
      break;
    default:
      first = displs[static_cast<std::size_t>(rank)];
      mine = counts[static_cast<std::size_t>(rank)];
      break;
  }
  std::vector<std::uint8_t> recvBuf(std::max(total, std::size_t{1}) * es + 1, 0xA5);
  const void* sendPtr = send.data();
  void* recvPtr = recvBuf.data();
  std::uint8_t* result = recvBuf.data();
  if (c.inPlace) {
    recvPtr = send.data() + first * es;
    result = send.data() + first * es;
  }
  run(c.k, sendPtr, recvPtr, c.count, counts, displs, c.t, c.op, root);

  std::size_t differ = 0;
  std::uint8_t want[8];
  for (std::size_t j = 0; j < mine; ++j) {
    referenceElement(c.t, c.op, n, first + j, want);
    if (std::memcmp(want, result + j * es, es) == 0) continue;
    if (expectSame && differ == 0)
      ADD_FAILURE() << describe(c, rank, n) << ": element " << j
                    << " differs bitwise from the rank-order reduction";
    ++differ;
  }
  return differ;
}

/// Every collective x float dtype x op x count x in-place on this rank.
std::size_t runAll(int rank, int n, const RunFn& run, bool withAvg, bool expectSame,
                   std::span<const Collective> colls = kReductions) {
  std::size_t differ = 0;
  for (Collective k : colls)
    for (DataType t : kFloatTypes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        if (op == ReduceOp::Avg && !withAvg) continue;
        for (std::size_t count : kCounts)
          for (bool inPlace : {false, true}) {
            if (inPlace && count == 7) continue;
            differ += runCase(rank, n, {k, t, op, count, inPlace}, run, expectSame);
          }
      }
  return differ;
}

RunFn commRunner(Comm& c) {
  return [&c](Collective k, const void* send, void* recv, std::size_t count,
              std::span<const std::size_t> counts, std::span<const std::size_t>, DataType t,
              ReduceOp op, int root) {
    switch (k) {
      case Collective::Allreduce:
        c.allreduce(send, recv, count, t, op);
        return;
      case Collective::Reduce:
        c.reduce(send, recv, count, t, op, root);
        return;
      case Collective::ReduceScatter:
        c.reduceScatter(send, recv, count, t, op);
        return;
      default:
        c.reduceScatterv(send, recv, counts, t, op);
        return;
    }
  };
}

Options detOptions(std::string algo, bool shm) {
  Options o = testOptions(std::move(algo));
  o.deterministic = true;
  o.shmDisable = !shm;
  return o;
}

// ---- deterministic mode over the communicator -------------------------------------------------

enum class Path { ShmAuto, ShmForcedRankOrdered, TcpAuto, TcpForcedShmDirect };
using Param = std::tuple<Path, int>;

class Deterministic : public ::testing::TestWithParam<Param> {};

TEST_P(Deterministic, EveryRankEveryRunMatchesRankOrder) {
  const auto [path, n] = GetParam();
  const bool shm = path == Path::ShmAuto || path == Path::ShmForcedRankOrdered;
  std::string algo;
  if (path == Path::ShmForcedRankOrdered) algo = "rank_ordered";
  if (path == Path::TcpForcedShmDirect) algo = "shm_direct";
  runThreads(
      n, detOptions(algo, shm),
      [&](Comm& c) {
        // shm_direct (rank-ordered, every reduction and reduce_scatterv) wherever it can run:
        // a shared group, or one rank; over TCP a rule naming it is skipped (it cannot run
        // there) and rank_ordered runs, under its own name.
        const std::string expectAlgo =
            path != Path::ShmForcedRankOrdered && (n == 1 || shm) ? "shm_direct" : "rank_ordered";
        EXPECT_EQ(c.selectedAlgorithm(Collective::Allreduce, 8), expectAlgo);
        EXPECT_EQ(c.selectedAlgorithm(Collective::ReduceScatterv, 8), expectAlgo);
        // Two runs: the second must repeat the first bit for bit (both equal the reference).
        for (int run = 0; run < 2; ++run) runAll(c.rank(), c.size(), commRunner(c), true, true);
      },
      std::chrono::seconds(240));
}

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  static const char* kNames[] = {"shm_auto", "shm_rank_ordered", "tcp_auto", "tcp_shm_direct"};
  return std::string(kNames[static_cast<int>(std::get<0>(info.param))]) + "_n" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    PathsAndSizes, Deterministic,
    ::testing::Combine(::testing::Values(Path::ShmAuto, Path::ShmForcedRankOrdered, Path::TcpAuto,
                                         Path::TcpForcedShmDirect),
                       ::testing::Values(2, 3, 4, 5, 7, 8)),
    paramName);

// Ranks as processes: shared memory across address spaces (and CMA), and TCP.
TEST(DeterministicProcesses, SharedMemoryAndTcp) {
  for (bool shm : {true, false})
    for (int n : {3, 5})
      runProcesses(
          n, detOptions("", shm),
          [](Comm& c) { runAll(c.rank(), c.size(), commRunner(c), true, true); },
          std::chrono::seconds(240));
}

// Larger messages: shm_direct's chunks bounded by the staging area, several scratch pieces.
TEST(Deterministic, LargeMessages) {
  for (bool shm : {true, false}) {
    Options o = detOptions("", shm);
    o.chunkBytes = 16 << 10;
    o.bufferBytes = 64 << 10;
    runThreads(
        3, o,
        [](Comm& c) {
          for (DataType t : {DataType::Float32, DataType::BFloat16})
            for (Collective k : kReductions)
              runCase(c.rank(), c.size(), {k, t, ReduceOp::Sum, 300007, k == Collective::Reduce},
                      commRunner(c), true);
        },
        std::chrono::seconds(240));
  }
}

// ---- every rank-ordered algorithm over the in-process transport -------------------------------

class DeterministicInproc : public ::testing::TestWithParam<int> {};

TEST_P(DeterministicInproc, EveryRankOrderedAlgorithm) {
  const int n = GetParam();
  int algorithms = 0;
  for (const algo::AlgoInfo& info : algo::registry()) {
    if (!info.rankOrdered) continue;
    // The shm_direct rows need a shared group, which the inproc transport has not
    // (tests/comm/shm_direct_test.cpp runs them over one).
    if (info.needs.sharedMemory) continue;
    ++algorithms;
    SCOPED_TRACE(std::string(toString(info.coll)) + " " + info.name);
    RankSetup setup;
    setup.size = n;
    setup.deadline = std::chrono::milliseconds(120000);
    auto errors = runRanks(setup, [&](algo::Context& ctx) {
      ctx.deterministic = true;
      const RunFn run = [&](Collective k, const void* send, void* recv, std::size_t count,
                            std::span<const std::size_t> counts,
                            std::span<const std::size_t> displs, DataType t, ReduceOp op,
                            int root) {
        algo::CollArgs a;
        a.coll = k;
        a.send = send;
        a.recv = recv;
        a.count = count;
        a.dtype = t;
        a.op = op;
        a.root = root;
        a.counts = counts;
        a.displs = displs;
        info.run(ctx, a);
        ++ctx.tag;  // every operation its own tag, as the communicator does
      };
      const Collective only[] = {info.coll};
      // Avg is the communicator's division after a Sum: not an algorithm's business.
      runAll(ctx.rank, n, run, false, true, only);
    });
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(errorText(errors[static_cast<std::size_t>(r)]), "") << "rank " << r;
  }
  EXPECT_EQ(algorithms, 4);  // rank_ordered x 4
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DeterministicInproc, ::testing::Values(2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

// ---- the data does expose order: without the mode, other orders give other bits ---------------

TEST(Deterministic, NonDeterministicOrdersDiffer) {
  // Per dtype and collective: elements that differ from the rank-order reduction, summed over
  // world sizes, ranks and the algorithms that reduce in other orders.
  std::atomic<std::size_t> differ[4][4] = {};
  const char* rules[] = {
      "allreduce:ring;reduce:binomial_tree;reducescatter:ring;reducescatterv:ring",
      "allreduce:recursive_doubling"};
  for (const char* r : rules)
    for (int n : {3, 4, 5, 7, 8}) {
      Options o = testOptions(r);
      o.shmDisable = true;
      runThreads(
          n, o,
          [&](Comm& c) {
            for (int ki = 0; ki < 4; ++ki)
              for (int ti = 0; ti < 4; ++ti)
                for (std::size_t count : kCounts)
                  differ[ki][ti] +=
                      runCase(c.rank(), c.size(),
                              {kReductions[ki], kFloatTypes[ti], ReduceOp::Sum, count, false},
                              commRunner(c), false);
          },
          std::chrono::seconds(240));
    }
  for (int ki = 0; ki < 4; ++ki)
    for (int ti = 0; ti < 4; ++ti)
      EXPECT_GT(differ[ki][ti].load(), 0u)
          << toString(kReductions[ki]) << " " << toString(kFloatTypes[ti])
          << ": no algorithm's order gave other bits than rank order, so this data would not "
             "catch a non-deterministic algorithm";
}

// ---- forcing a non-rank-ordered algorithm fails, naming it -------------------------------------

TEST(Deterministic, ForcedNonRankOrderedAlgorithmIsAnError) {
  for (const char* rule : {"allreduce:ring", "ring", "allreduce:0-1K:recursive_doubling",
                           "reduce:binomial_tree", "reducescatter:ring"}) {
    Options o = detOptions(rule, true);
    try {
      Comm::create(std::make_shared<MemoryStore>(), 0, 1, o);
      ADD_FAILURE() << "accepted BRAID_ALGO=" << rule << " in deterministic mode";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("BRAID_DETERMINISTIC"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank order"), std::string::npos) << e.what();
    }
  }
  // Rules for collectives that do not reduce, or naming rank-ordered algorithms, are fine.
  runThreads(3, detOptions("allgather:ring;broadcast:binomial_tree;allreduce:rank_ordered", true),
             [](Comm& c) {
               EXPECT_EQ(c.selectedAlgorithm(Collective::Allreduce, 8), "rank_ordered");
               EXPECT_EQ(c.selectedAlgorithm(Collective::Reduce, 8), "shm_direct");
               EXPECT_EQ(c.selectedAlgorithm(Collective::Allgather, 8), "ring");
               runCase(c.rank(), c.size(),
                       {Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 1031, false},
                       commRunner(c), true);
             });
}

// Deterministic mode keeps every collective correct (integer-valued data, every dtype and op,
// compared with double arithmetic by harness/checks), over shared memory and TCP.
TEST(Deterministic, RegularSweepStillCorrect) {
  const std::size_t counts[] = {0, 1, 13, 1031};
  for (bool shm : {true, false})
    runThreads(
        4, detOptions("", shm), [&](Comm& c) { sweepCollectives(c, counts); },
        std::chrono::seconds(240));
}

}  // namespace
}  // namespace braid::test
