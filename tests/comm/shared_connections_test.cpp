// Shared connections over TCP (docs/architecture.md, "Shared connections"): sub-communicators
// post over their parent's TCP connections, each on its own lane. A split among connected ranks
// opens no socket; parent and child run concurrently from two threads per rank with every
// element checked; mismatches, lost peers, aborts and a child outliving its parent behave as on
// connections of its own; lazy connections and several streams per peer are shared alike; groups
// made by their members alone (memberSubgroup) share them too; the world destroyed or aborted on
// one rank while its child lives on fails its peers' operations with that rank at once. The
// scenarios shared with UCX and shared memory are in shared_lanes.hpp.
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
#include "transport/tcp/tcp_transport.hpp"

namespace braid::test {
namespace {

// Sockets opened by this process's TCP transports while `fn` runs on 4 ranks (threads): the
// world's full mesh first, then a split into 2 x 2 that runs an allreduce on the child.
struct SplitCount {
  std::size_t world = 0;  // sockets of the world communicators (all ranks)
  std::size_t split = 0;  // sockets opened by the split and the child's collective
  std::vector<std::size_t> childConnections, parentConnections;
};

SplitCount countSplit(const Options& o) {
  SplitCount out;
  out.childConnections.resize(4);
  out.parentConnections.resize(4);
  std::atomic<std::size_t> before{0};
  const std::size_t start = transport::tcpSocketsOpened();
  runThreads(4, o, [&](Comm& c) {
    c.barrier();  // every rank's transport is up
    if (c.rank() == 0) before = transport::tcpSocketsOpened();
    c.barrier();
    auto sub = c.split(c.rank() % 2, c.rank());
    ASSERT_NE(sub, nullptr);
    std::int64_t mine = c.rank() + 1, sum = 0;
    sub->allreduce(&mine, &sum, 1, DataType::Int64, ReduceOp::Sum);
    EXPECT_EQ(sum, c.rank() % 2 == 0 ? 1 + 3 : 2 + 4);
    c.barrier();  // every child is up and used
    const auto r = static_cast<std::size_t>(c.rank());
    out.childConnections[r] = sub->connectionCount();
    out.parentConnections[r] = c.connectionCount();
    c.barrier();
  });
  out.world = before - start;
  out.split = transport::tcpSocketsOpened() - before;
  return out;
}

TEST(SharedConnections, SplitAmongConnectedRanksOpensNoSocket) {
  const SplitCount shared = countSplit(eagerTcpOptions(true));
  EXPECT_EQ(shared.world, 4u * 3u);  // each rank opened or accepted one socket per peer
  EXPECT_EQ(shared.split, 0u);
  for (int r = 0; r < 4; ++r) {
    // Child and parent count the same (shared) sockets.
    EXPECT_EQ(shared.parentConnections[static_cast<std::size_t>(r)], 3u) << "rank " << r;
    EXPECT_EQ(shared.childConnections[static_cast<std::size_t>(r)], 3u) << "rank " << r;
  }
  // The switch off: the child connects its own pair (one socket on each of its two ranks).
  const SplitCount own = countSplit(eagerTcpOptions(false));
  EXPECT_EQ(own.world, 4u * 3u);
  EXPECT_EQ(own.split, 4u * 1u);
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(own.childConnections[static_cast<std::size_t>(r)], 1u) << "rank " << r;
}

TEST(SharedConnections, ParentAndChildRunConcurrentlyFromTwoThreads) {
  concurrentParentAndChild(tcpOptions(true));
}

TEST(SharedConnections, ParentAndChildConcurrentlyOverTwoStreamsPerPeer) {
  Options o = tcpOptions(true);
  o.socketThreads = 2;
  o.socketStripeMinBytes = 4096;  // the larger counts are striped over both streams
  concurrentParentAndChild(o);
}

TEST(SharedConnections, LazyPairsAreDialedOnceAndSharedAfterwards) {
  Options o = tcpOptions(true);
  o.lazyConnect = true;
  std::atomic<std::size_t> afterFirst{0};
  runThreads(4, o, [&](Comm& c) {
    // The child's pairs: whatever the parent never used is dialed now, once.
    auto sub = c.split(c.rank() % 2, 0);
    checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 1031, false);
    c.barrier();
    if (c.rank() == 0) afterFirst = transport::tcpSocketsOpened();
    c.barrier();
    EXPECT_EQ(sub->connectionCount(), c.connectionCount());
    // A second split of the same ranks and the same collectives: no new socket.
    auto again = c.split(c.rank() % 2, 0);
    checkAllreduce(*again, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 1031, false);
    c.barrier();
    if (c.rank() == 0) {
      EXPECT_EQ(transport::tcpSocketsOpened(), afterFirst.load());
    }
    c.barrier();
  });
}

TEST(SharedConnections, MismatchedCollectivesOnTheChildFailWithMismatch) {
  mismatchOnTheChild(tcpOptions(true));
}

TEST(SharedConnections, AbortOfTheChildLeavesTheParentWorking) {
  childAbortLeavesTheParent(tcpOptions(true));
}

TEST(SharedConnections, ChildDestroyedOnOneRankFailsItsPeerAtOnce) {
  peerLeavesTheChild(false, tcpOptions(true));
}

TEST(SharedConnections, ChildAbortedOnOneRankFailsItsPeerAtOnce) {
  peerLeavesTheChild(true, tcpOptions(true));
}

TEST(SharedConnections, ChildOutlivesItsParent) {
  childOutlivesItsParent(tcpOptions(true));
}

// A survivor whose operation failed on finding a rank gone (rank 1 aborted the world, its child
// keeps the connections) aborts its own communicator, and peers that wait only on it hear that
// first: their errors still name rank 1, from the survivor's report (or from the revoke it
// published, which quotes its error).
TEST(SharedConnections, PeersOfASurvivorThatFailedFirstHearWhichRankLeft) {
  ownWorlds(tcpOptions(true), [](int r, auto& world) {
    auto sub = world->split(0, r);
    std::vector<float> buf(13, 1.0f);
    std::string message;
    if (r == 1) {
      sub->barrier();
      world->abort();
      sub->barrier();
    } else {
      Work pending = world->recvAsync(buf.data(), buf.size(), DataType::Float32, r == 0 ? 1 : 0, 7);
      sub->barrier();
      sub->barrier();
      EXPECT_EQ(codeOf([&] { pending.wait(); }, message), ErrorCode::PeerLost) << message;
      EXPECT_TRUE(message.find("rank 1 (") != std::string::npos ||
                  message.find("on finding rank 1 gone") != std::string::npos)
          << "rank " << r << ": " << message;
    }
    checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, 1031, false);
    sub->barrier();
  });
}

// Over TCP and UCX the world posts on a lane of its own: the ordinary lane case, the same rule.
TEST(SharedConnections, ParentDestroyedOnOneRankFailsItsPeersAtOnce) {
  for (bool abort : {false, true})
    for (bool p2p : {true, false}) {
      SCOPED_TRACE(std::string(abort ? "aborted" : "destroyed") + (p2p ? ", receive" : ""));
      ownerLeavesOnOneRank(abort, p2p, false, tcpOptions(true));
    }
}

// Groups made by their members alone (Comm::memberSubgroup, what torch's new_group needs): the
// non-members never call. {3, 1} (in that order: rank 3 is the child's rank 0) and {0, 2} are
// made at once by their members, among connected ranks: no socket; each child's collectives and
// point-to-point give the right values while the parent keeps working afterwards.
TEST(SharedConnections, MemberSubgroupOpensNoSocketAndOnlyMembersCall) {
  std::atomic<std::size_t> before{0};
  std::vector<std::size_t> childConnections(4), parentConnections(4);
  runThreads(4, eagerTcpOptions(true), [&](Comm& c) {
    c.barrier();
    if (c.rank() == 0) before = transport::tcpSocketsOpened();
    c.barrier();
    const std::vector<int> odd = {3, 1}, even = {0, 2};
    const bool isOdd = c.rank() % 2 == 1;
    auto sub = c.memberSubgroup(isOdd ? odd : even, isOdd ? "odd" : "even");
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), isOdd ? (c.rank() == 3 ? 0 : 1) : c.rank() / 2);
    // The child's rank 0 is its first listed rank: a broadcast from it carries that rank.
    std::int64_t root = c.rank();
    sub->broadcast(&root, 1, DataType::Int64, 0);
    EXPECT_EQ(root, isOdd ? 3 : 0);
    checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkSendRecv(*sub, 13);
    const auto r = static_cast<std::size_t>(c.rank());
    childConnections[r] = sub->connectionCount();
    parentConnections[r] = c.connectionCount();
    c.barrier();
    if (c.rank() == 0) {
      EXPECT_EQ(transport::tcpSocketsOpened(), before.load());
    }
    // A group of everyone, and the parent, still agree afterwards.
    auto all = c.memberSubgroup(std::vector<int>{0, 1, 2, 3}, "all");
    std::int64_t one = 1, total = 0;
    all->allreduce(&one, &total, 1, DataType::Int64, ReduceOp::Sum);
    EXPECT_EQ(total, 4);
    c.allreduce(&one, &total, 1, DataType::Int64, ReduceOp::Sum);
    EXPECT_EQ(total, 4);
  });
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(parentConnections[r], 3u) << "rank " << r;
    EXPECT_EQ(childConnections[r], 3u) << "rank " << r;  // the shared sockets
  }
}

TEST(SharedConnections, MemberSubgroupRejectsBadArguments) {
  Options o = tcpOptions(true);
  o.storeCleanup = false;  // rank 0's list stays readable after its one-rank group is made
  runThreads(3, o, [&](Comm& c) {
    std::string m;
    const auto bad = [&](std::vector<int> ranks, const std::string& name) {
      return codeOf([&] { (void)c.memberSubgroup(ranks, name); }, m);
    };
    EXPECT_EQ(bad({0, 1, 2}, ""), ErrorCode::InvalidArgument);
    EXPECT_NE(m.find("name is empty"), std::string::npos) << m;
    EXPECT_EQ(bad({0, 3}, "x"), ErrorCode::InvalidArgument);
    EXPECT_NE(m.find("ranks[1] = 3 is outside [0, 3)"), std::string::npos) << m;
    EXPECT_EQ(bad({0, 1, 2, 1}, "x"), ErrorCode::InvalidArgument);
    EXPECT_NE(m.find("rank 1 appears twice"), std::string::npos) << m;
    const int other = (c.rank() + 1) % 3;
    EXPECT_EQ(bad({other}, "x"), ErrorCode::InvalidArgument);
    EXPECT_NE(m.find("rank " + std::to_string(c.rank()) + " of communicator"), std::string::npos)
        << m;
    EXPECT_NE(m.find("this rank is not in ranks"), std::string::npos) << m;
    // Rank 0 makes group "y" of itself alone; ranks 1 and 2 list 0 first but with themselves.
    if (c.rank() == 0) {
      auto solo = c.memberSubgroup(std::vector<int>{0}, "y");
      EXPECT_EQ(solo->size(), 1);
      EXPECT_EQ(bad({0}, "y"), ErrorCode::InvalidArgument);  // a name is used once
      EXPECT_NE(m.find("name was used already"), std::string::npos) << m;
    } else {
      EXPECT_EQ(bad({0, 1, 2}, "y"), ErrorCode::InvalidArgument);
      EXPECT_NE(m.find("the first listed rank (0) passed a different rank list"), std::string::npos)
          << m;
    }
    c.barrier();  // the parent is untouched by all of it
  });
}

// Ranks 1 and 2 each list themselves first: the second to publish learns it at once and says
// so in the group's namespace, so the other one fails at once too (not at the connect timeout:
// 20 s here, a Timeout would fail the code check); rank 0 is not involved.
TEST(SharedConnections, MemberSubgroupWithTwoFirstRanksFailsOnBoth) {
  std::atomic<int> second{0}, told{0};
  runThreads(3, tcpOptions(true), [&](Comm& c) {
    if (c.rank() == 0) return;
    std::string m;
    const std::vector<int> ranks = c.rank() == 1 ? std::vector<int>{1, 2} : std::vector<int>{2, 1};
    EXPECT_EQ(codeOf([&] { (void)c.memberSubgroup(ranks, "z"); }, m), ErrorCode::InvalidArgument)
        << m;
    EXPECT_NE(m.find("another member also listed itself first"), std::string::npos) << m;
    if (m.find("another member failed to create the group") != std::string::npos)
      ++told;
    else
      ++second;
  });
  EXPECT_EQ(second.load(), 1);
  EXPECT_EQ(told.load(), 1);
}

// A member that is not listed first passes a different list: it says so, and every member
// (the first listed one and the one that agreed) fails at once with InvalidArgument naming it,
// instead of waiting out the connect timeout for a partner that will not come.
TEST(SharedConnections, MemberSubgroupDisagreementFailsEveryMemberAtOnce) {
  runThreads(3, tcpOptions(true), [&](Comm& c) {
    std::string m;
    const std::vector<int> ranks =
        c.rank() == 2 ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2};
    EXPECT_EQ(codeOf([&] { (void)c.memberSubgroup(ranks, "w"); }, m), ErrorCode::InvalidArgument)
        << m;
    EXPECT_NE(m.find("the first listed rank (0) passed a different rank list"), std::string::npos)
        << m;
    if (c.rank() != 2) {
      EXPECT_NE(m.find("another member failed to create the group: memberSubgroup 'w' on rank 2"),
                std::string::npos)
          << m;
    }
    c.barrier();  // the parent is untouched
  });
}

TEST(SharedConnections, KilledRankIsPeerLostInParentAndChild) {
  killedRankIsPeerLostInParentAndChild(tcpOptions(true), false);
}

}  // namespace
}  // namespace braid::test
