// Shared connections over UCX (BRAID_TRANSPORT=ucx, UCX_TLS=tcp; docs/ucx.md): sub-communicators
// post over their parent's UCX worker and endpoints, each on its own lane; the scenarios of
// shared_lanes.hpp, as over TCP.
#include <gtest/gtest.h>

#include <atomic>
#include <braid/braid.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/ranks.hpp"
#include "harness/ucx_env.hpp"
#include "shared_lanes.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::test {
namespace {

class SharedUcx : public testing::Test {
 protected:
  void SetUp() override {
    if (!transport::ucxAvailable()) GTEST_SKIP() << transport::ucxUnavailableReason();
    useUcxTls("tcp");
  }
};

// Endpoints of the world and of a 2 x 2 split (eager, so that counts do not depend on which
// pairs the parent used): shared, the child counts the world's 3 endpoints and makes none; on
// its own it makes one (its single peer) on a worker of its own.
TEST_F(SharedUcx, SplitAmongConnectedRanksMakesNoEndpoint) {
  for (bool share : {true, false}) {
    SCOPED_TRACE(share ? "shared" : "own worker");
    std::atomic<std::size_t> before{0};
    runThreads(4, ucxOptions(share, false), [&](Comm& c) {
      c.barrier();
      if (c.rank() == 0) before = transport::ucxEndpointsMade();
      c.barrier();
      auto sub = c.split(c.rank() % 2, c.rank());
      std::int64_t mine = c.rank() + 1, sum = 0;
      sub->allreduce(&mine, &sum, 1, DataType::Int64, ReduceOp::Sum);
      EXPECT_EQ(sum, c.rank() % 2 == 0 ? 1 + 3 : 2 + 4);
      c.barrier();
      EXPECT_EQ(c.connectionCount(), 3u);
      EXPECT_EQ(sub->connectionCount(), share ? 3u : 1u);
      c.barrier();
      // Process-wide: the children made no endpoint (shared), or one per rank.
      if (c.rank() == 0) {
        EXPECT_EQ(transport::ucxEndpointsMade() - before.load(), share ? 0u : 4u);
      }
    });
  }
}

TEST_F(SharedUcx, ParentAndChildRunConcurrentlyFromTwoThreads) {
  concurrentParentAndChild(ucxOptions(true));
}

TEST_F(SharedUcx, MismatchedCollectivesOnTheChildFailWithMismatch) {
  mismatchOnTheChild(ucxOptions(true));
}

TEST_F(SharedUcx, AbortOfTheChildLeavesTheParentWorking) {
  childAbortLeavesTheParent(ucxOptions(true));
}

TEST_F(SharedUcx, ChildDestroyedOnOneRankFailsItsPeerAtOnce) {
  peerLeavesTheChild(false, ucxOptions(true));
}

TEST_F(SharedUcx, ChildAbortedOnOneRankFailsItsPeerAtOnce) {
  peerLeavesTheChild(true, ucxOptions(true));
}

TEST_F(SharedUcx, ParentDestroyedOnOneRankFailsItsPeersAtOnce) {
  for (bool abort : {false, true})
    for (bool p2p : {true, false}) {
      SCOPED_TRACE(std::string(abort ? "aborted" : "destroyed") + (p2p ? ", receive" : ""));
      ownerLeavesOnOneRank(abort, p2p, false, ucxOptions(true));
    }
}

}  // namespace
}  // namespace braid::test
