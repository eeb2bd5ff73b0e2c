// Shared connections (docs/architecture.md, "Shared connections"): sub-communicators post over
// their parent's TCP connections, each on its own lane. A split among connected ranks opens no
// socket; parent and child run concurrently from two threads per rank with every element
// checked; mismatches, lost peers, aborts and a child outliving its parent behave as on
// connections of its own; lazy connections and several streams per peer are shared alike; groups
// made by their members alone (memberSubgroup) share them too. The same over UCX (SharedUcx):
// sub-communicators post over their parent's UCX worker and endpoints. And over shared memory
// (SharedMemory): sub-communicators post through their parent's segment and run the direct
// collectives in one of its lane groups, making no segment of their own (while one is free); a
// parent destroyed or aborted on one rank while its child lives on fails its peers' operations
// with that rank at once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "harness/checks.hpp"
#include "harness/errors.hpp"
#include "harness/ranks.hpp"
#include "harness/ucx_env.hpp"
#include "store/memory_store.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;

Options tcpOptions(bool share) {
  Options o = testOptions();
  o.shmDisable = true;  // every pair over TCP, so that there are sockets to share
  o.shareConnections = share;
  return o;
}

// The same with every pair connected at creation, so that socket counts do not depend on
// which pairs the parent's own operations happened to connect (lazily: the default).
Options eagerTcpOptions(bool share) {
  Options o = tcpOptions(share);
  o.lazyConnect = false;
  return o;
}

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

// Parent and child collectives at once, from two threads of every rank, every element checked
// (harness/checks.hpp); counts 0, 1, primes, and more than a chunk (testOptions: 64 B).
void concurrentParentAndChild(const Options& o) {
  runThreads(4, o, [](Comm& c) {
    auto sub = c.split(c.rank() / 2, -c.rank());  // {1, 0} and {3, 2}
    ASSERT_NE(sub, nullptr);
    const std::vector<std::size_t> counts = {0, 1, 13, 1031, 20011};
    std::thread child([&] {
      for (std::size_t n : counts) {
        checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, n, false);
        checkNonReducing(*sub, DataType::Int32, n);
        checkSendRecv(*sub, n);
      }
    });
    for (std::size_t n : counts) {
      checkAllreduce(c, DataType::Float32, ReduceOp::Sum, n, false);
      checkNonReducing(c, DataType::Int32, n);
      checkSendRecv(c, n);
    }
    child.join();
    // And the other way round: both still agree afterwards.
    std::int64_t one = 1, total = 0;
    sub->allreduce(&one, &total, 1, DataType::Int64, ReduceOp::Sum);
    EXPECT_EQ(total, 2);
    c.allreduce(&one, &total, 1, DataType::Int64, ReduceOp::Sum);
    EXPECT_EQ(total, 4);
  });
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

void mismatchOnTheChild(const Options& o) {
  std::atomic<int> mismatches{0};
  runThreads(4, o, [&](Comm& c) {
    auto sub = c.split(c.rank() % 2, 0);
    std::vector<float> buf(1024, 1.0f), out(2048);
    try {
      if (sub->rank() == 0)
        sub->allreduce(buf.data(), buf.data(), 1024, DataType::Float32, ReduceOp::Sum);
      else
        sub->allgather(buf.data(), out.data(), 1024, DataType::Float32);
      ADD_FAILURE() << "rank " << c.rank() << ": mismatched collectives did not fail";
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Mismatch) {
        ++mismatches;
        EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("allgather"), std::string::npos) << e.what();
      } else {
        EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
      }
    }
  });
  EXPECT_GE(mismatches.load(), 2);  // one per child at least
}

TEST(SharedConnections, MismatchedCollectivesOnTheChildFailWithMismatch) {
  mismatchOnTheChild(tcpOptions(true));
}

void childAbortLeavesTheParent(const Options& o) {
  runThreads(4, o, [](Comm& c) {
    auto sub = c.split(c.rank() % 2, 0);
    sub->barrier();
    std::vector<float> buf(16);
    if (sub->rank() == 0) {
      // Its peer never sends: the abort ends the receive, on this lane only.
      Work w = sub->recvAsync(buf.data(), buf.size(), DataType::Float32, 1);
      std::thread aborter([&] {
        std::this_thread::sleep_for(50ms);
        sub->abort();
      });
      std::string message;
      EXPECT_EQ(codeOf([&] { w.wait(); }, message), ErrorCode::Aborted) << message;
      aborter.join();
    }
    c.barrier();
    // The parent's traffic over the same connections goes on.
    checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkSendRecv(c, 13);
  });
}

TEST(SharedConnections, AbortOfTheChildLeavesTheParentWorking) {
  childAbortLeavesTheParent(tcpOptions(true));
}

// A child destroyed (or aborted) on one rank while its peer still waits on it: the peer is told
// over the shared connection (a control frame behind the child's last frames), so its pending
// receive fails with PeerLost naming what happened, at once rather than at the 30 s operation
// timeout (a Timeout would fail the code check); the child is then revoked on the peer (later
// operations fail too), and the parent goes on over the same connections.
void peerLeavesTheChild(bool abort, const Options& o) {
  runThreads(4, o, [abort](Comm& c) {
    auto sub = c.split(c.rank() % 2, c.rank());  // {0, 2} and {1, 3}
    sub->barrier();
    std::vector<float> buf(13);
    std::string message;
    if (sub->rank() == 1) {
      c.barrier();  // the child's rank 0 has posted a receive that nothing will match
      if (abort)
        sub->abort();
      else
        sub.reset();
      c.barrier();
    } else {
      Work pending = sub->recvAsync(buf.data(), buf.size(), DataType::Float32, 1, 7);
      c.barrier();
      c.barrier();  // the peer has left the child
      EXPECT_EQ(codeOf([&] { pending.wait(); }, message), ErrorCode::PeerLost) << message;
      EXPECT_NE(message.find(abort ? "(it was aborted there)" : "(it was destroyed there)"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("world rank " + std::to_string(c.rank() + 2)), std::string::npos)
          << message;
      EXPECT_EQ(codeOf([&] { sub->send(buf.data(), buf.size(), DataType::Float32, 1); }, message),
                ErrorCode::PeerLost)
          << message;
    }
    c.barrier();
    // The parent's traffic over the same connections goes on.
    checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkSendRecv(c, 13);
  });
}

TEST(SharedConnections, ChildDestroyedOnOneRankFailsItsPeerAtOnce) {
  peerLeavesTheChild(false, tcpOptions(true));
}

TEST(SharedConnections, ChildAbortedOnOneRankFailsItsPeerAtOnce) {
  peerLeavesTheChild(true, tcpOptions(true));
}

// ---- the same over UCX (BRAID_TRANSPORT=ucx, UCX_TLS=tcp): one worker and its endpoints ----

Options ucxOptions(bool share, bool lazy = true) {
  Options o = tcpOptions(share);
  o.interHostTransport = "ucx";
  o.lazyConnect = lazy;
  return o;
}

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

// ---- the same over shared memory: a sub-communicator on its parent's segment ----

// Every rank on this host's shared memory; with `direct`, the direct collectives are required
// (BRAID_ALGO_FORCE), so a child without a shared-memory group fails instead of running a ring.
Options shmOptions(bool share, bool direct = false) {
  Options o = testOptions();
  o.shareConnections = share;
  if (direct) {
    o.algo =
        "allreduce:shm_direct;allgather:shm_direct;broadcast:shm_direct;reduce:shm_direct;"
        "reducescatter:shm_direct;alltoall:shm_direct";
    o.algoForce = true;
  }
  return o;
}

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

// Runs fn(rank, world) on 4 ranks as threads, each with a world communicator it may destroy
// (runThreads keeps its own until every rank returned).
template <typename Fn>
void ownWorlds(const Options& o, Fn fn) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::thread> ranks;
  std::atomic<int> failures{0};
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto world = Comm::create(store, r, 4, o);
        fn(r, world);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        ++failures;
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
}

void childOutlivesItsParent(const Options& o) {
  ownWorlds(o, [](int, auto& world) {
    auto sub = world->split(world->rank() % 2, 0);
    world->barrier();
    world.reset();  // the parent is gone; its connections live on in the child
    checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkSendRecv(*sub, 13);
    sub->barrier();
  });
}

TEST(SharedConnections, ChildOutlivesItsParent) {
  childOutlivesItsParent(tcpOptions(true));
}

TEST(SharedMemory, ChildOutlivesItsParent) {
  childOutlivesItsParent(shmOptions(true, true));
}

// The world communicator destroyed (or aborted) on one rank while a child of it lives on there:
// the connections (the segment) stay, and the rank's peers are told, so their operations with it
// on the parent fail with PeerLost at once rather than at the 30 s operation timeout (a Timeout
// would fail the code check); the child goes on. `p2p`: rank 0 waits in a receive from it (told
// by a control message behind its last messages: over shared memory on lane 0, over TCP and UCX
// on the world's lane), then everyone but it runs a collective; else only the collective, whose
// error names rank 1 on every survivor where `named` (shared memory: the group names it, since a
// survivor that failed first posted its line before it failed). Over TCP and UCX a survivor
// that failed first aborts and tells its peers so, and a peer that hears that first names that
// survivor, adding the rank it found gone from its report when the report is in the store by
// then ("... had failed first, on finding rank 1 gone"), which a loaded machine does not promise.
void ownerLeavesOnOneRank(bool abort, bool p2p, bool named, const Options& o) {
  ownWorlds(o, [abort, p2p, named](int r, auto& world) {
    auto sub = world->split(0, r);  // every rank, on the world's segment
    std::vector<float> buf(13, 1.0f);
    std::string message;
    if (r == 1) {
      sub->barrier();  // rank 0 has posted a receive from this rank on the parent
      if (abort)
        world->abort();
      else
        world.reset();
      sub->barrier();
    } else {
      Work pending;
      if (p2p && r == 0)
        pending = world->recvAsync(buf.data(), buf.size(), DataType::Float32, 1, 7);
      sub->barrier();
      sub->barrier();  // rank 1's parent is gone
      if (p2p && r == 0) {
        EXPECT_EQ(codeOf([&] { pending.wait(); }, message), ErrorCode::PeerLost) << message;
        EXPECT_NE(message.find(abort ? "(it was aborted there)" : "(it was destroyed there)"),
                  std::string::npos)
            << message;
        EXPECT_EQ(
            codeOf([&] { world->send(buf.data(), buf.size(), DataType::Float32, 1); }, message),
            ErrorCode::PeerLost)
            << message;
      }
      EXPECT_EQ(codeOf(
                    [&] {
                      world->allreduce(buf.data(), buf.data(), buf.size(), DataType::Float32,
                                       ReduceOp::Sum);
                    },
                    message),
                ErrorCode::PeerLost)
          << "rank " << r << ": " << message;
      if (!p2p && named) {
        EXPECT_NE(message.find("rank 1 ("), std::string::npos) << "rank " << r << ": " << message;
      }
    }
    checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkSendRecv(*sub, 13);
    sub->barrier();
  });
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

TEST_F(SharedUcx, ParentDestroyedOnOneRankFailsItsPeersAtOnce) {
  for (bool abort : {false, true})
    for (bool p2p : {true, false}) {
      SCOPED_TRACE(std::string(abort ? "aborted" : "destroyed") + (p2p ? ", receive" : ""));
      ownerLeavesOnOneRank(abort, p2p, false, ucxOptions(true));
    }
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

// Rank 3's process ends: every survivor sees PeerLost within the timeouts, in the parent and in
// the child that contains rank 3; the other child ({0, 2}) goes on.
// Ranks as processes: after a 2 x 2 split ({2, 0} and {3, 1}) has run its collectives (each
// element checked), rank 3 dies without a word: its child's peer (rank 1) and every survivor's
// parent get PeerLost (the child's naming world rank 3, or the rank that revoked it), while the
// child {0, 2} still completes. With `noSegment`, the split must make no shared-memory segment
// in any process.
void killedRankIsPeerLostInParentAndChild(const Options& o, bool noSegment) {
  runProcesses(
      4, o,
      [noSegment](Comm& c) {
        c.barrier();
        const std::size_t before = transport::shmSegmentsMade();
        auto sub = c.split(c.rank() % 2, -c.rank());
        for (std::size_t n : {std::size_t{1}, std::size_t{1031}, std::size_t{70001}}) {
          checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, n, false);
          checkNonReducing(*sub, DataType::Int32, n);
          checkSendRecv(*sub, n);
        }
        if (noSegment) {
          EXPECT_EQ(transport::shmSegmentsMade(), before) << "rank " << c.rank();
        }
        c.barrier();
        if (c.rank() == 3) {
          // Late enough that every rank has left the barrier and the child {0, 2} is done.
          std::this_thread::sleep_for(300ms);
          std::fflush(stdout);
          _exit(0);  // gone without a word
        }
        std::vector<float> buf(1031, 1.0f);
        std::string message;
        if (c.rank() == 1) {
          EXPECT_EQ(codeOf(
                        [&] {
                          sub->allreduce(buf.data(), buf.data(), buf.size(), DataType::Float32,
                                         ReduceOp::Sum);
                        },
                        message),
                    ErrorCode::PeerLost)
              << message;
          EXPECT_TRUE(message.find("world rank 3") != std::string::npos ||
                      message.find("revoked by rank") != std::string::npos)
              << message;
        } else {
          sub->allreduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
          EXPECT_EQ(buf[0], 2.0f);
        }
        EXPECT_EQ(codeOf(
                      [&] {
                        c.allreduce(buf.data(), buf.data(), buf.size(), DataType::Float32,
                                    ReduceOp::Sum);
                      },
                      message),
                  ErrorCode::PeerLost)
            << message;
      },
      120s);
}

TEST(SharedConnections, KilledRankIsPeerLostInParentAndChild) {
  killedRankIsPeerLostInParentAndChild(tcpOptions(true), false);
}

// The same on shared memory: the children's direct collectives run in lane groups claimed
// across processes, and no process makes a segment for them.
TEST(SharedMemory, ProcessesShareTheSegmentAndAKilledRankIsPeerLostInParentAndChild) {
  killedRankIsPeerLostInParentAndChild(shmOptions(true, true), true);
}

}  // namespace
}  // namespace braid::test
