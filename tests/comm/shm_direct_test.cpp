// The direct shared-memory collectives ("shm_direct"): forced by rule and chosen by the default
// policy on one host, over ranks as threads and as processes, every collective x world size x
// count x dtype x op x in-place (harness/checks), multi-chunk messages (64-byte chunks, and
// large messages bounded by the 1 MiB staging half), rules naming it skipped and forced ones
// refused when there is no shared group, and an oversubscribed host (8 ranks on this machine's
// CPUs) making quick progress.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "harness/checks.hpp"
#include "harness/machine.hpp"
#include "harness/ranks.hpp"
#include "kernels/reduce.hpp"

namespace braid::test {
namespace {

constexpr Collective kDirect[] = {Collective::Allreduce,  Collective::Allgather,
                                  Collective::Broadcast,  Collective::ReduceScatter,
                                  Collective::Reduce,     Collective::Barrier,
                                  Collective::Alltoall,   Collective::Alltoallv,
                                  Collective::Allgatherv, Collective::ReduceScatterv};

class ShmDirectThreads : public ::testing::TestWithParam<int> {};

TEST_P(ShmDirectThreads, ForcedSweep) {
  runThreads(GetParam(), testOptions("shm_direct"), [](Comm& c) {
    for (Collective k : kDirect) EXPECT_EQ(c.selectedAlgorithm(k, 8), "shm_direct");
    sweepCollectives(c);
  });
}

TEST_P(ShmDirectThreads, ChosenByDefaultOnOneHost) {
  runThreads(GetParam(), testOptions(), [](Comm& c) {
    // Above one cache line per rank (shm_ll's range) every collective with a direct algorithm
    // runs it on one host; the barrier is always a line exchange.
    for (Collective k : kDirect) {
      const std::string want = k == Collective::Barrier ? "shm_ll" : "shm_direct";
      // One rank needs no shared group: the rows run there too (a local copy).
      for (std::size_t bytes : {std::size_t{8} << 10, std::size_t{64} << 20})
        EXPECT_EQ(c.selectedAlgorithm(k, bytes), want) << toString(k) << " " << bytes;
    }
    // Collectives without a direct algorithm keep their default.
    EXPECT_EQ(c.selectedAlgorithm(Collective::Gather, 8 << 10), "linear");
    const std::size_t counts[] = {1, 13};
    sweepCollectives(c, counts);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmDirectThreads, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

// Messages larger than the staging half (1 MiB per rank): several chunks of the default size,
// and of the staging bound when chunkBytes is larger.
TEST(ShmDirect, LargeMessagesSeveralChunks) {
  for (std::size_t chunk : {std::size_t{256} << 10, std::size_t{8} << 20}) {
    Options o = testOptions("shm_direct");
    o.chunkBytes = chunk;
    o.shmCmaThresholdBytes = SIZE_MAX;  // the staged paths (shm_single_copy_test: single copy)
    runThreads(3, o, [](Comm& c) {
      for (bool inPlace : {false, true}) {
        checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 700001, inPlace);
        checkReduceScatter(c, DataType::Float32, ReduceOp::Max, 100003, inPlace);
        checkReduce(c, DataType::BFloat16, ReduceOp::Sum, 300007, 1, inPlace);
      }
      checkNonReducing(c, DataType::Float32, 400003);  // alltoall: 3 x 1.6 MB blocks
      checkVariants(c, DataType::Float32, 300000);     // blocks larger than a staging slot
    });
  }
}

// Options::shmStagingBytes (BRAID_SHM_STAGING) bounds the chunks: at the 16 KiB minimum a
// large message takes many rounds (slots of 16 KiB / 2 / N for reduce-scatter and alltoall);
// at 0 there is no group, so neither shm_direct nor shm_ll is chosen and rules naming them are
// skipped.
TEST(ShmDirect, StagingSizeOption) {
  Options small = testOptions("shm_direct");
  small.chunkBytes = std::size_t{1} << 20;
  small.shmStagingBytes = 16 << 10;
  small.shmCmaDisable = true;  // large alltoall blocks through the staging slots, not single copy
  runThreads(3, small, [](Comm& c) {
    checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 100003, false);
    checkReduceScatter(c, DataType::Int32, ReduceOp::Max, 20011, true);
    checkNonReducing(c, DataType::Float64, 20011);
    checkVariants(c, DataType::Float32, 5000);
  });
  Options none = testOptions();
  none.shmStagingBytes = 0;
  runThreads(3, none, [](Comm& c) {
    for (Collective k : kDirect) {
      EXPECT_NE(c.selectedAlgorithm(k, 8), "shm_ll") << toString(k);
      EXPECT_NE(c.selectedAlgorithm(k, 1 << 20), "shm_direct") << toString(k);
    }
  });
  none.algo = "shm_ll;shm_direct";
  runThreads(3, none, [](Comm& c) {
    const std::size_t counts[] = {0, 7, 1031};
    sweepCollectives(c, counts);
  });
}

class ShmDirectProcesses : public ::testing::TestWithParam<int> {};

TEST_P(ShmDirectProcesses, ForcedSweep) {
  runProcesses(
      GetParam(), testOptions("shm_direct"),
      [](Comm& c) {
        if (c.selectedAlgorithm(Collective::Allreduce, 8) != "shm_direct")
          throw Error(ErrorCode::Internal, "shm_direct not selected");
        sweepCollectives(c);
        // 18751 chunks of 64 bytes, 2 barriers each: quick up to 4 ranks, minutes beyond on
        // 2 CPUs (LargeMessages covers every size with the default chunk).
        if (c.size() <= 4) checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 300007, false);
      },
      std::chrono::seconds(900));
}

// The added dtypes and ops (harness/checks.hpp, checkExtendedReductions) through the direct
// shared-memory collectives between processes, and through the default choice on one host
// (shm_ll for a line's worth, shm_direct above).
TEST(ShmDirectProcessesExtended, AddedDtypesAndOps) {
  for (const char* algo : {"shm_direct", ""})
    runProcesses(3, testOptions(algo), [](Comm& c) { checkExtendedReductions(c); });
}

// Large messages between processes with the default chunk size: allgather, alltoall and
// broadcast single-copy (process_vm_readv between processes, testOptions' 64 KiB threshold)
// where the kernel allows it, staged otherwise (always for allreduce, reduce, reduce-scatter
// and the v variants: several staging rounds).
TEST_P(ShmDirectProcesses, LargeMessages) {
  Options o = testOptions("shm_direct");
  o.chunkBytes = std::size_t{256} << 10;
  runProcesses(
      GetParam(), o,
      [](Comm& c) {
        checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 700001, true);
        checkReduceScatter(c, DataType::Float32, ReduceOp::Max, 100003, false);
        checkNonReducing(c, DataType::Int32, 300007);  // alltoall: 1.2 MB blocks
        checkVariants(c, DataType::Float32, 300000);   // blocks larger than a staging slot
      },
      std::chrono::seconds(900));
}

// Outputs that each reach the streaming threshold (half the last-level cache) on their own are
// written with non-temporal stores: allreduce (3 ranks, in place and not), reduce at 2 and 3 ranks
// (the root streams its reduction straight out, or sums through a stack block first), allgather and
// broadcast; odd counts, so that slices start unaligned. The test sets the cache the threshold
// derives from (512 KiB: streaming from 256 KiB), so the same bytes run on every machine: 1 MiB +
// 1031 floats per rank, past one staging half too.
TEST(ShmDirect, OutputsBeyondTheStreamingThreshold) {
  ScopedLastLevelCache cache(std::size_t{512} << 10);
  ASSERT_EQ(kernels::streamingThresholdBytes(), std::size_t{256} << 10);
  const std::size_t count = (std::size_t{1} << 20) / 4 + 1031;
  Options o = testOptions("shm_direct");
  o.shmCmaThresholdBytes = SIZE_MAX;  // staged copies stream; single copy leaves it to the kernel
  runThreads(3, o, [&](Comm& c) {
    for (bool inPlace : {false, true})
      checkAllreduce(c, DataType::Float32, ReduceOp::Sum, count, inPlace);
    checkReduce(c, DataType::Float32, ReduceOp::Max, count, 2, false);
  });
  runThreads(2, o, [&](Comm& c) {
    checkReduce(c, DataType::Float32, ReduceOp::Sum, count, 1, false);
    checkNonReducing(c, DataType::Float32, count);  // allgather, broadcast, alltoall, ...
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmDirectProcesses, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

// Without shared memory (BRAID_SHM_DISABLE) the shm_direct rows cannot run: a rule naming
// them is skipped (the default table's row runs, under its own name), a forced one
// (BRAID_ALGO_FORCE, braid-perf --algo) fails the operation with Error(InvalidArgument) naming
// the algorithm, the constraint, the operation and the rank; nothing else runs in its place.
TEST(ShmDirect, WithoutSharedMemoryRulesAreSkippedForcedOnesRefused) {
  Options o = testOptions("shm_direct");
  o.shmDisable = true;
  runThreads(3, o, [](Comm& c) {
    for (Collective k : kDirect) EXPECT_NE(c.selectedAlgorithm(k, 8 << 10), "shm_direct");
    const std::size_t counts[] = {0, 7, 1031};
    sweepCollectives(c, counts);
  });
  o.algoForce = true;
  runThreads(3, o, [](Comm& c) {
    std::vector<float> in(64, 1.0f), out(64, 0.0f);
    try {
      c.allreduce(in.data(), out.data(), 64, DataType::Float32, ReduceOp::Sum);
      ADD_FAILURE() << "a forced shm_direct ran without a shared group";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      const std::string w = e.what();
      EXPECT_NE(w.find("'shm_direct'"), std::string::npos) << w;
      EXPECT_NE(w.find("shared-memory group"), std::string::npos) << w;
      EXPECT_NE(w.find("allreduce"), std::string::npos) << w;
      EXPECT_NE(w.find("rank " + std::to_string(c.rank())), std::string::npos) << w;
    }
    // Collectives without a shm_direct row are not affected by the rule.
    c.gather(in.data(), out.data(), 1, DataType::Float32, 0);
  });
  Options d = testOptions();
  d.shmDisable = true;
  runThreads(2, d, [](Comm& c) {
    EXPECT_NE(c.selectedAlgorithm(Collective::Allreduce, 8), "shm_direct");
    EXPECT_NE(c.selectedAlgorithm(Collective::Barrier, 0), "shm_direct");
  });
}

// 8 ranks as threads on 2 CPUs: the barrier yields, then sleeps, so each
// small allreduce still completes (the time is printed, not asserted).
TEST(ShmDirect, OversubscribedEightRanksMakeProgress) {
  TwoCpus pin;  // oversubscribed on every machine
  const auto start = std::chrono::steady_clock::now();
  runThreads(8, testOptions("shm_direct"), [](Comm& c) {
    std::vector<float> v(2, 1.0F);
    for (int i = 0; i < 500; ++i) {
      v.assign(2, 1.0F);
      c.allreduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
      if (v[0] != 8.0F) throw Error(ErrorCode::Internal, "wrong sum");
      c.barrier();
    }
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("oversubscribed: 8 ranks, 500 x (8-byte allreduce + barrier): %.3f s\n", s);
}

}  // namespace
}  // namespace braid::test
