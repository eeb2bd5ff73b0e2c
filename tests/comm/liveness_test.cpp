// Liveness over a TCP store is one hub per process and server (core/liveness.cpp,
// docs/reliability.md): however many communicators the ranks of a process hold, the process
// has two connections to the server for liveness (and one watcher thread); a revoke reaches
// only its communicator. Ranks as threads of this process, each with a store client of its own.
// (The process side, a killed process revoking every communicator it was in, is in
// tests/multiproc/elastic_test.cpp: Elastic.AKilledProcessRevokesEveryCommunicatorItWasIn.)
#include <gtest/gtest.h>

#include <barrier>
#include <braid/braid.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.hpp"

namespace braid {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Options tcpOptions() {
  Options o = test::testOptions();
  o.shmDisable = true;
  o.execTimeout = 30s;
  return o;
}

// Waits until the server counts `want` connections (it accepts asynchronously), at most 10 s;
// returns what it counts then.
std::size_t connectionsReach(const TcpStoreServer& server, std::size_t want) {
  const auto until = Clock::now() + 10s;
  while (server.connectionCount() != want && Clock::now() < until) std::this_thread::sleep_for(5ms);
  return server.connectionCount();
}

// Runs fn(rank, store) on `size` threads, each with a client of its own; reports exceptions.
template <typename Fn>
void runOnTcpStore(TcpStoreServer& server, int size, Fn fn) {
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 20000ms);
        fn(rank, store);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST(LivenessHub, OneHubPerProcessWhateverTheCommunicators) {
  constexpr int kSize = 3;
  TcpStoreServer server("127.0.0.1", 0);
  std::barrier sync(kSize);
  std::size_t clients = 0, withOne = 0, withMany = 0, afterAll = 0;
  runOnTcpStore(server, kSize, [&](int rank, std::shared_ptr<TcpStore> store) {
    sync.arrive_and_wait();
    if (rank == 0) clients = connectionsReach(server, kSize);
    sync.arrive_and_wait();
    {
      auto comm = Comm::create(store, rank, kSize, tcpOptions());
      comm->barrier();
      sync.arrive_and_wait();
      if (rank == 0) withOne = connectionsReach(server, kSize + 2);
      sync.arrive_and_wait();
      // Six more: splits, a subgroup, a second top-level communicator, a child of a child.
      std::vector<std::unique_ptr<Comm>> more;
      more.push_back(comm->split(0, rank));
      more.push_back(comm->split(rank % 2, rank));
      const int pair[] = {0, 1};
      more.push_back(comm->subgroup(pair));  // rank 2 gets nullptr
      more.push_back(Comm::create(store, rank, kSize, tcpOptions()));
      more.push_back(more[0]->split(0, kSize - rank));
      more.push_back(more[3]->split(0, rank));
      for (auto& c : more) {
        if (!c) continue;
        std::int32_t v = 1;
        c->allreduce(&v, &v, 1, DataType::Int32, ReduceOp::Sum);
        if (v != c->size()) throw Error(ErrorCode::Internal, "allreduce gave " + std::to_string(v));
      }
      comm->barrier();
      sync.arrive_and_wait();
      // A connection the server has not accepted yet would still answer the requests it made
      // (every hub's liveness connection has registered before its communicator was made).
      if (rank == 0) withMany = connectionsReach(server, kSize + 2);
      sync.arrive_and_wait();
    }
    sync.arrive_and_wait();
    if (rank == 0) afterAll = connectionsReach(server, kSize);
    sync.arrive_and_wait();
  });
  EXPECT_EQ(clients, static_cast<std::size_t>(kSize));
  EXPECT_EQ(withOne, static_cast<std::size_t>(kSize + 2)) << "a communicator: the clients + 2";
  EXPECT_EQ(withMany, static_cast<std::size_t>(kSize + 2))
      << "seven communicators: still the clients + 2";
  EXPECT_EQ(afterAll, static_cast<std::size_t>(kSize)) << "the hub closes with the last one";
}

// Rank 0 revokes a child; ranks 1 and 2 wait on each other in it. Nothing of theirs talks to
// rank 0, so only the shared watcher can end their waits before the 30 s timeout: each fails
// with PeerLost at once, saying the child was revoked by rank 0 or, when the other's revoke
// aborted its lane first, that the other left it. The parent and a sibling child keep working.
TEST(LivenessHub, ARevokeReachesOnlyItsCommunicator) {
  constexpr int kSize = 3;
  TcpStoreServer server("127.0.0.1", 0);
  std::vector<std::string> seen(kSize);
  runOnTcpStore(server, kSize, [&](int rank, std::shared_ptr<TcpStore> store) {
    auto comm = Comm::create(store, rank, kSize, tcpOptions());
    auto child = comm->split(0, rank);
    auto sibling = comm->split(0, rank);
    if (rank == 0) {
      std::this_thread::sleep_for(200ms);
      child->revoke();
    } else {
      const auto t0 = Clock::now();
      try {
        std::int32_t x = 0;
        child->recv(&x, 1, DataType::Int32, 3 - rank);
        seen[rank] = "no error";
      } catch (const Error& e) {
        seen[rank] = std::string(e.what()) + " after " +
                     std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) +
                     " s";
        EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
        // A hang guard, not a speed threshold: the alternative is the 30 s timeout.
        EXPECT_LT(Clock::now() - t0, 20s) << seen[rank];
      }
    }
    for (Comm* c : {comm.get(), sibling.get()}) {
      std::int32_t v = rank + 1;
      c->allreduce(&v, &v, 1, DataType::Int32, ReduceOp::Sum);
      if (v != 6) throw Error(ErrorCode::Internal, "allreduce gave " + std::to_string(v));
    }
  });
  for (int r = 1; r < kSize; ++r) std::printf("[ liveness ] rank %d: %s\n", r, seen[r].c_str());
}

// The first cause of a revoke stays in the store: rank 1 revokes; rank 0, once it sees the
// key, revokes too; the key still names rank 1 (kept after the communicator for the check).
TEST(LivenessHub, TheFirstRevokeTextStays) {
  TcpStoreServer server("127.0.0.1", 0);
  Options o = tcpOptions();
  o.storeCleanup = false;
  std::string id;
  runOnTcpStore(server, 2, [&](int rank, std::shared_ptr<TcpStore> store) {
    auto comm = Comm::create(store, rank, 2, o);
    if (rank == 1) {
      comm->revoke();
    } else {
      id = comm->id();
      PrefixStore ns(store, "braid/" + id + "/");
      ns.get("revoked", 20s);
      comm->revoke();
    }
  });  // the destructors wait for their revokes' publication
  auto reader = std::make_shared<TcpStore>("127.0.0.1", server.port(), 5000ms);
  PrefixStore ns(reader, "braid/" + id + "/");
  EXPECT_EQ(ns.getString("revoked", 5000ms), "rank 1 (Comm::revoke)");
}

// Over one server, communicators of two different stores' clients in the same process share the
// hub; after the server is replaced by a new one on another port, a communicator over it gets a
// hub of its own and revokes still reach it.
TEST(LivenessHub, ANewServerGetsANewHub) {
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    TcpStoreServer server("127.0.0.1", 0);
    runOnTcpStore(server, 2, [&](int rank, std::shared_ptr<TcpStore> store) {
      auto comm = Comm::create(store, rank, 2, tcpOptions());
      if (rank == 1) comm->revoke();
      try {
        std::int32_t x = 0;
        if (rank == 0) comm->recv(&x, 1, DataType::Int32, 1);
        comm->barrier();
        throw Error(ErrorCode::Internal, "no error after the revoke");
      } catch (const Error& e) {
        if (e.code() != ErrorCode::PeerLost) throw;
      }
    });
    EXPECT_EQ(connectionsReach(server, 0), 0u);
  }
}

}  // namespace
}  // namespace braid
