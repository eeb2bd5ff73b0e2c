// The low-latency shared-memory collectives ("shm_ll": data, tag and sequence number in one
// line per rank): every dtype x op at every count that fits a line (and the next counts,
// where the rule naming shm_ll is skipped and shm_direct runs), every world size, ranks as
// threads and as processes; chosen by default for tiny messages; 4 and 8 ranks as processes
// oversubscribed on 2 CPUs completing thousands of operations (no timing threshold, only the
// harness deadline); operations that disagree across ranks fail with Error(Mismatch) rather than a
// timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness/checks.hpp"
#include "harness/data.hpp"
#include "harness/machine.hpp"
#include "harness/ranks.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace braid::test {
namespace {

constexpr std::size_t kLine = transport::SharedMemoryGroup::kLineBytes;
constexpr Collective kLowLatency[] = {
    Collective::Allreduce, Collective::Broadcast,     Collective::Reduce,  Collective::Barrier,
    Collective::Allgather, Collective::ReduceScatter, Collective::Alltoall};

// Counts around the line capacity of dtype t: 0, 1, 2, 3, a prime below, the largest that
// fits, one more (shm_ll cannot run it: the BRAID_ALGO rule is skipped, shm_direct runs).
std::vector<std::size_t> lineCounts(DataType t) {
  const std::size_t fit = kLine / dataTypeSize(t);
  std::vector<std::size_t> counts = {0, 1, 2, 3, 5, 7, 11, fit - 1, fit, fit + 1};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  counts.erase(
      std::remove_if(counts.begin(), counts.end(), [&](std::size_t c) { return c > fit + 1; }),
      counts.end());
  return counts;
}

void sweepLines(Comm& c) {
  const int n = c.size();
  for (DataType t : kAllDataTypes) {
    for (std::size_t count : lineCounts(t)) {
      for (ReduceOp op : kAllReduceOps) {
        for (bool inPlace : {false, true}) checkAllreduce(c, t, op, count, inPlace);
        checkReduce(c, t, op, count, static_cast<int>((count + 1) % n), false);
        checkReduce(c, t, op, count, n - 1, true);
      }
      checkNonReducing(c, t, count);  // broadcast from every root, allgather (in place too)
      c.barrier();
    }
    // reduce_scatter and alltoall: the whole input (n blocks) in a line, up to one block more
    // than fits.
    const std::size_t fit = kLine / dataTypeSize(t) / static_cast<std::size_t>(n);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{2}, fit, fit + 1}) {
      if (count > fit + 1) continue;
      for (ReduceOp op : kAllReduceOps)
        for (bool inPlace : {false, true}) checkReduceScatter(c, t, op, count, inPlace);
      checkNonReducing(c, t, count);  // alltoall (and the others) at these counts
    }
  }
}

class ShmLowLatencyThreads : public ::testing::TestWithParam<int> {};

TEST_P(ShmLowLatencyThreads, ForcedSweep) {
  runThreads(GetParam(), testOptions("shm_ll"), [](Comm& c) {
    for (Collective k : kLowLatency) EXPECT_EQ(c.selectedAlgorithm(k, 8), "shm_ll");
    sweepLines(c);
  });
}

TEST_P(ShmLowLatencyThreads, ChosenByDefaultForTinyMessages) {
  runThreads(GetParam(), testOptions(), [](Comm& c) {
    // One rank needs no shared group: the rows run there too (a local copy).
    const auto n = static_cast<std::size_t>(c.size());
    for (Collective k : {Collective::Allreduce, Collective::Broadcast, Collective::Reduce,
                         Collective::ReduceScatter, Collective::Alltoall}) {
      EXPECT_EQ(c.selectedAlgorithm(k, 1), "shm_ll");
      EXPECT_EQ(c.selectedAlgorithm(k, kLine), "shm_ll");
      EXPECT_EQ(c.selectedAlgorithm(k, kLine + 1), "shm_direct");
    }
    EXPECT_EQ(c.selectedAlgorithm(Collective::Allgather, kLine * n), "shm_ll");
    EXPECT_EQ(c.selectedAlgorithm(Collective::Allgather, kLine * n + 1), "shm_direct");
    EXPECT_EQ(c.selectedAlgorithm(Collective::Barrier, 0), "shm_ll");
    // Mixed sizes in one sequence: line exchanges and staged collectives interleave.
    for (DataType t : {DataType::Float32, DataType::Int8, DataType::Float64}) {
      const std::size_t fit = kLine / dataTypeSize(t);
      for (std::size_t count : {std::size_t{1}, fit, fit + 1, std::size_t{1031}, fit}) {
        checkAllreduce(c, t, ReduceOp::Sum, count, false);
        checkNonReducing(c, t, count);
        checkReduce(c, t, ReduceOp::Max, count, 0, false);
        c.barrier();
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmLowLatencyThreads, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

class ShmLowLatencyProcesses : public ::testing::TestWithParam<int> {};

TEST_P(ShmLowLatencyProcesses, ForcedSweep) {
  runProcesses(
      GetParam(), testOptions("shm_ll"),
      [](Comm& c) {
        if (c.selectedAlgorithm(Collective::Allreduce, 8) != "shm_ll")
          throw Error(ErrorCode::Internal, "shm_ll not selected");
        sweepLines(c);
      },
      std::chrono::seconds(600));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmLowLatencyProcesses, ::testing::Values(2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

// 4 and 8 ranks as processes on 2 CPUs: waiters yield and then sleep on the futex, so the
// ranks holding a CPU are never the ones spinning for a descheduled peer. Thousands of tiny
// operations must complete within the harness deadline; the time is printed, not asserted.
class ShmLowLatencyOversubscribed : public ::testing::TestWithParam<int> {};

TEST_P(ShmLowLatencyOversubscribed, ProcessesOnTwoCpusMakeProgress) {
  const int n = GetParam();
  TwoCpus pin;
  constexpr int kIterations = 2000;
  const auto start = std::chrono::steady_clock::now();
  runProcesses(
      n, testOptions(),
      [](Comm& c) {
        const int n = c.size();
        const int me = c.rank();
        std::vector<double> v(4);
        std::vector<std::int32_t> gathered(static_cast<std::size_t>(n) * 2);
        for (int i = 0; i < kIterations; ++i) {
          v.assign(4, static_cast<double>(me + i));
          c.allreduce(v.data(), v.data(), v.size(), DataType::Float64, ReduceOp::Sum);
          const double want = n * static_cast<double>(i) + n * (n - 1) / 2.0;
          if (v[0] != want || v[3] != want)
            throw Error(ErrorCode::Internal, "allreduce " + std::to_string(i) + ": got " +
                                                 std::to_string(v[0]) + " want " +
                                                 std::to_string(want));
          const int root = i % n;
          std::int64_t b = me == root ? i * 7 : -1;
          c.broadcast(&b, 1, DataType::Int64, root);
          if (b != i * 7) throw Error(ErrorCode::Internal, "broadcast " + std::to_string(i));
          std::int32_t mine[2] = {me, i};
          c.allgather(mine, gathered.data(), 2, DataType::Int32);
          for (int r = 0; r < n; ++r)
            if (gathered[2 * r] != r || gathered[2 * r + 1] != i)
              throw Error(ErrorCode::Internal, "allgather " + std::to_string(i));
          float x = 1.0F;
          float sum = 0;
          c.reduce(&x, &sum, 1, DataType::Float32, ReduceOp::Sum, root);
          if (me == root && sum != static_cast<float>(n))
            throw Error(ErrorCode::Internal, "reduce " + std::to_string(i));
          c.barrier();
        }
      },
      std::chrono::seconds(900));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "oversubscribed on 2 CPUs: %d processes, %d x (allreduce, broadcast, allgather, "
      "reduce, barrier): %.3f s\n",
      n, kIterations, s);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmLowLatencyOversubscribed, ::testing::Values(4, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

// A rank that reads nothing (a broadcast root, a reduce non-root) runs ahead of its readers until
// it would overwrite a line one of them has not read, then waits for their published progress
// (GroupLine::linesEntered, every kLineHalf exchanges). Thousands of operations whose readers
// stall now and then, so that writers reach that limit; spin 0, so that every wait longer than
// a few microseconds sleeps on the futex and is woken by a writer, with the light wake-ups
// (membarrier, BRAID_SHM_LIGHT_WAKE=1) and with the writer's fence. Every value is checked: a
// line overwritten too early shows up as a wrong value, a missed wake-up as a run that only
// ends at the harness deadline.
class ShmLowLatencyRunAhead : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ShmLowLatencyRunAhead, WritersWaitForSlowReaders) {
  const auto [n, light] = GetParam();
  Options o = testOptions("shm_ll");
  o.spin = std::chrono::microseconds(0);
  o.shmLightWake = light;
  runProcesses(
      n, o,
      [](Comm& c) {
        constexpr int kOps = 3000;
        const int me = c.rank();
        const int n = c.size();
        auto stall = [] { std::this_thread::sleep_for(std::chrono::microseconds(300)); };
        for (int i = 0; i < kOps; ++i) {
          if (me != 0 && i % 101 == me * 13 % 101) stall();
          std::int64_t b = me == 0 ? 3 * i + 1 : -1;
          c.broadcast(&b, 1, DataType::Int64, 0);
          if (b != 3 * i + 1)
            throw Error(ErrorCode::Internal,
                        "broadcast " + std::to_string(i) + ": got " + std::to_string(b));
        }
        for (int i = 0; i < kOps; ++i) {
          if (me == 0 && i % 97 == 0) stall();
          std::int32_t x = me + i;
          std::int32_t sum = -1;
          c.reduce(&x, &sum, 1, DataType::Int32, ReduceOp::Sum, 0);
          if (me == 0 && sum != n * i + n * (n - 1) / 2)
            throw Error(ErrorCode::Internal,
                        "reduce " + std::to_string(i) + ": got " + std::to_string(sum));
        }
      },
      std::chrono::seconds(300));
}

INSTANTIATE_TEST_SUITE_P(RanksAndWakeUps, ShmLowLatencyRunAhead,
                         ::testing::Combine(::testing::Values(2, 3, 5), ::testing::Bool()),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_light" : "_fenced");
                         });

// BRAID_DEBUG=INFO's join line says how the host's ranks wake each other: light where every rank
// registered for the membarrier (and BRAID_SHM_LIGHT_WAKE is on), fenced otherwise.
TEST(ShmLowLatency, JoinLineNamesTheWakeUpMode) {
  for (bool light : {true, false}) {
    Options o = testOptions();
    o.shmLightWake = light;
    o.logLevel = 2;
    ::testing::internal::CaptureStderr();
    runThreads(2, o, [](Comm& c) { c.barrier(); });
    const std::string log = ::testing::internal::GetCapturedStderr();
    const bool offered = light && transport::shm::registerLightWake();
    const std::string want =
        std::string(", shm wake-ups ") + (offered ? "light (membarrier)" : "fenced");
    std::size_t found = 0;
    for (auto at = log.find(want); at != std::string::npos; at = log.find(want, at + 1)) ++found;
    EXPECT_EQ(found, 2u) << "light " << light << ", wanted '" << want << "' in:\n" << log;
  }
}

// Ranks that disagree fail with Error(Mismatch) naming both operations, whether both sides are
// in line exchanges, or one is in a line exchange and the other in a staged collective.
TEST(ShmLowLatency, DisagreeingRanksGetMismatch) {
  enum class Case { TwoLineCollectives, LineAgainstStaged };
  for (Case which : {Case::TwoLineCollectives, Case::LineAgainstStaged}) {
    std::atomic<int> mismatches{0};
    std::atomic<int> timeouts{0};
    Options o = testOptions();
    o.execTimeout = std::chrono::milliseconds(60000);
    runThreads(3, o, [&](Comm& c) {
      std::vector<float> v(300, 1.0F);
      try {
        if (c.rank() != 1) {
          c.allreduce(v.data(), v.data(), 2, DataType::Float32, ReduceOp::Sum);
        } else if (which == Case::TwoLineCollectives) {
          c.broadcast(v.data(), 2, DataType::Float32, 0);
        } else {
          c.allreduce(v.data(), v.data(), 300, DataType::Float32, ReduceOp::Sum);
        }
      } catch (const Error& e) {
        if (e.code() == ErrorCode::Mismatch) ++mismatches;
        if (e.code() == ErrorCode::Timeout) ++timeouts;
      }
    });
    EXPECT_GE(mismatches.load(), 1) << "case " << static_cast<int>(which);
    EXPECT_EQ(timeouts.load(), 0) << "case " << static_cast<int>(which);
  }
}

}  // namespace
}  // namespace braid::test
