// Shared connections over shared memory: sub-communicators post through their parent's segment
// and run the direct collectives in one of its lane groups, making no segment of their own
// (while one is free); the scenarios of shared_lanes.hpp, as over TCP; a parent destroyed or
// aborted on one rank while its child lives on fails its peers' operations with that rank at
// once.
#include <gtest/gtest.h>

#include <atomic>
#include <braid/braid.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/checks.hpp"
#include "harness/errors.hpp"
#include "harness/ranks.hpp"
#include "shared_lanes.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::test {
namespace {

// A 2 x 2 split on one host: shared, the children make no segment (each claims a lane group of
// the world's) and run the direct collectives over it, every element checked; on their own they
// make one segment each.
TEST(SharedMemory, SplitMakesNoSegmentAndRunsTheDirectCollectives) {
  for (bool share : {true, false}) {
    SCOPED_TRACE(share ? "shared" : "own segments");
    std::atomic<std::size_t> before{0};
    runThreads(4, shmOptions(share, true), [&](Comm& c) {
      c.barrier();
      if (c.rank() == 0) before = transport::shmSegmentsMade();
      c.barrier();
      auto sub = c.split(c.rank() % 2, -c.rank());  // {2, 0} and {3, 1}
      ASSERT_NE(sub, nullptr);
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{1031},
                            std::size_t{20011}}) {
        checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, n, false);
        checkAllreduce(*sub, DataType::Int32, ReduceOp::Max, n, true);
        checkNonReducing(*sub, DataType::Int32, n);
        checkSendRecv(*sub, n);
      }
      c.barrier();
      if (c.rank() == 0) {
        EXPECT_EQ(transport::shmSegmentsMade() - before.load(), share ? 0u : 2u);
      }
      c.barrier();
    });
  }
}

TEST(SharedMemory, ParentAndChildRunConcurrentlyFromTwoThreads) {
  concurrentParentAndChild(shmOptions(true));
}

TEST(SharedMemory, MismatchedCollectivesOnTheChildFailWithMismatch) {
  mismatchOnTheChild(shmOptions(true));
}

TEST(SharedMemory, AbortOfTheChildLeavesTheParentWorking) {
  childAbortLeavesTheParent(shmOptions(true));
}

TEST(SharedMemory, ChildDestroyedOnOneRankFailsItsPeerAtOnce) {
  peerLeavesTheChild(false, shmOptions(true));
}

TEST(SharedMemory, ChildAbortedOnOneRankFailsItsPeerAtOnce) {
  peerLeavesTheChild(true, shmOptions(true));
}

// More children alive at once than the segment has lane groups: a world of 2 ranks whose
// segment is bounded to 18 MiB has 3 (5.1 MiB for its own rings and group, 4.1 MiB per lane
// group). The first 3 children share the world's segment, the other 2 make segments of their
// own; all of them run the direct collectives. Once they are gone the lane groups are free
// again: 3 more make no segment.
TEST(SharedMemory, ChildrenBeyondTheLaneGroupsMakeTheirOwnSegment) {
  std::atomic<std::size_t> before{0}, afterFirst{0};
  Options o = shmOptions(true, true);
  o.shmMaxSegmentBytes = std::size_t{18} << 20;
  runThreads(2, o, [&](Comm& c) {
    c.barrier();
    if (c.rank() == 0) before = transport::shmSegmentsMade();
    c.barrier();
    {
      std::vector<std::unique_ptr<Comm>> children;
      for (int i = 0; i < 5; ++i) children.push_back(c.split(0, c.rank()));
      for (auto& child : children)
        checkAllreduce(*child, DataType::Float32, ReduceOp::Sum, 1031, false);
      c.barrier();
      if (c.rank() == 0) afterFirst = transport::shmSegmentsMade();
      c.barrier();
    }
    c.barrier();  // every child is gone on both ranks
    std::vector<std::unique_ptr<Comm>> again;
    for (int i = 0; i < 3; ++i) again.push_back(c.split(0, c.rank()));
    for (auto& child : again) checkNonReducing(*child, DataType::Int32, 1031);
    c.barrier();
    if (c.rank() == 0) {
      EXPECT_EQ(afterFirst.load() - before.load(), 2u);
      EXPECT_EQ(transport::shmSegmentsMade() - afterFirst.load(), 0u);
    }
    c.barrier();
  });
}

// The parent aborted (what a revoke does) while its children use its segment: the parent's own
// operations fail with Aborted, the children's lanes and lane groups go on.
TEST(SharedMemory, AbortedParentLeavesTheChildWorking) {
  runThreads(4, shmOptions(true, true), [](Comm& c) {
    auto sub = c.split(c.rank() % 2, c.rank());
    c.barrier();
    c.abort();
    std::vector<float> buf(13, 1.0f);
    std::string message;
    EXPECT_EQ(codeOf(
                  [&] {
                    c.allreduce(buf.data(), buf.data(), buf.size(), DataType::Float32,
                                ReduceOp::Sum);
                  },
                  message),
              ErrorCode::Aborted)
        << message;
    checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkNonReducing(*sub, DataType::Int32, 20011);
    checkSendRecv(*sub, 13);
  });
}

TEST(SharedMemory, ChildOutlivesItsParent) {
  childOutlivesItsParent(shmOptions(true, true));
}

TEST(SharedMemory, ParentDestroyedOnOneRankFailsItsPeersAtOnce) {
  for (bool p2p : {true, false}) {
    SCOPED_TRACE(p2p ? "receive, then collective" : "collective");
    ownerLeavesOnOneRank(false, p2p, true, shmOptions(true));
  }
}

TEST(SharedMemory, ParentAbortedOnOneRankFailsItsPeersAtOnce) {
  for (bool p2p : {true, false}) {
    SCOPED_TRACE(p2p ? "receive, then collective" : "collective");
    ownerLeavesOnOneRank(true, p2p, true, shmOptions(true));
  }
}

// The same on shared memory: the children's direct collectives run in lane groups claimed
// across processes, and no process makes a segment for them.
TEST(SharedMemory, ProcessesShareTheSegmentAndAKilledRankIsPeerLostInParentAndChild) {
  killedRankIsPeerLostInParentAndChild(shmOptions(true, true), true);
}

}  // namespace
}  // namespace braid::test
