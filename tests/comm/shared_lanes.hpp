// Scenarios shared by the shared-connection tests of each transport (docs/architecture.md,
// "Shared connections"): sub-communicators posting over their parent's TCP connections
// (shared_connections_test.cpp), UCX worker and endpoints (shared_ucx_test.cpp) or shared-memory
// segment (shared_segment_test.cpp), each on its own lane. Every scenario runs the same on each;
// what differs per transport (sockets, endpoints, segments counted) stays in its file.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/checks.hpp"
#include "harness/errors.hpp"
#include "harness/ranks.hpp"
#include "store/memory_store.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::test {

using namespace std::chrono_literals;

inline Options tcpOptions(bool share) {
  Options o = testOptions();
  o.shmDisable = true;  // every pair over TCP, so that there are sockets to share
  o.shareConnections = share;
  return o;
}

// The same with every pair connected at creation, so that socket counts do not depend on
// which pairs the parent's own operations happened to connect (lazily: the default).
inline Options eagerTcpOptions(bool share) {
  Options o = tcpOptions(share);
  o.lazyConnect = false;
  return o;
}

// Parent and child collectives at once, from two threads of every rank, every element checked
// (harness/checks.hpp); counts 0, 1, primes, and more than a chunk (testOptions: 64 B).
inline void concurrentParentAndChild(const Options& o) {
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

inline void mismatchOnTheChild(const Options& o) {
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

inline void childAbortLeavesTheParent(const Options& o) {
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

// A child destroyed (or aborted) on one rank while its peer still waits on it: the peer is told
// over the shared connection (a control frame behind the child's last frames), so its pending
// receive fails with PeerLost naming what happened, at once rather than at the 30 s operation
// timeout (a Timeout would fail the code check); the child is then revoked on the peer (later
// operations fail too), and the parent goes on over the same connections.
inline void peerLeavesTheChild(bool abort, const Options& o) {
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

inline Options ucxOptions(bool share, bool lazy = true) {
  Options o = tcpOptions(share);
  o.interHostTransport = "ucx";
  o.lazyConnect = lazy;
  return o;
}

// Every rank on this host's shared memory; with `direct`, the direct collectives are required
// (BRAID_ALGO_FORCE), so a child without a shared-memory group fails instead of running a ring.
inline Options shmOptions(bool share, bool direct = false) {
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

// Runs fn(rank, world) on 4 ranks as threads, each with a world communicator it may destroy
// (runThreads keeps its own until every rank returned).
template <typename Fn>
inline void ownWorlds(const Options& o, Fn fn) {
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

inline void childOutlivesItsParent(const Options& o) {
  ownWorlds(o, [](int, auto& world) {
    auto sub = world->split(world->rank() % 2, 0);
    world->barrier();
    world.reset();  // the parent is gone; its connections live on in the child
    checkAllreduce(*sub, DataType::Float32, ReduceOp::Sum, 1031, false);
    checkSendRecv(*sub, 13);
    sub->barrier();
  });
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
inline void ownerLeavesOnOneRank(bool abort, bool p2p, bool named, const Options& o) {
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

// Rank 3's process ends: every survivor sees PeerLost within the timeouts, in the parent and in
// the child that contains rank 3; the other child ({0, 2}) goes on.
// Ranks as processes: after a 2 x 2 split ({2, 0} and {3, 1}) has run its collectives (each
// element checked), rank 3 dies without a word: its child's peer (rank 1) and every survivor's
// parent get PeerLost (the child's naming world rank 3, or the rank that revoked it), while the
// child {0, 2} still completes. With `noSegment`, the split must make no shared-memory segment
// in any process.
inline void killedRankIsPeerLostInParentAndChild(const Options& o, bool noSegment) {
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

}  // namespace braid::test
