// The transport factory and the routed transport: ranks are threads of this process, given
// fake host identities so that some pairs share memory and others talk TCP, as on a cluster.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "common/machine.hpp"
#include "harness/errors.hpp"
#include "harness/transport_ranks.hpp"
#include "store/memory_store.hpp"
#include "transport/factory.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;

Deadline after(Clock::duration d) {
  return Clock::now() + d;
}

using test::Bytes;
using test::codeOf;
using test::errorOf;
using test::exchangeAll;
using test::firstWrong;
using test::makePayload;
using test::pattern;

TransportOptions baseOptions() {
  TransportOptions o;
  o.tcp.connectTimeout = 10s;
  return o;
}

// hosts[r] is rank r's fake host identity; tweak(r, options) adjusts one rank's options.
void runRanks(const std::vector<std::string>& hosts,
              const std::function<void(int, RoutedTransport&)>& body,
              const std::function<void(int, TransportOptions&)>& tweak = nullptr,
              MemoryStore* sharedStore = nullptr) {
  MemoryStore ownStore;
  MemoryStore& store = sharedStore != nullptr ? *sharedStore : ownStore;
  const int size = static_cast<int>(hosts.size());
  std::vector<std::string> errors(hosts.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      errors[static_cast<std::size_t>(r)] = errorOf([&] {
        TransportOptions o = baseOptions();
        o.hostIdentity = hosts[static_cast<std::size_t>(r)];
        if (tweak) tweak(r, o);
        auto t = createTransport(store, r, size, o);
        ASSERT_EQ(t->rank(), r);
        ASSERT_EQ(t->size(), size);
        body(r, *t);
      });
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r << " of " << size;
}

bool isShm(const std::string& path) {
  return path == "shm" || path == "shm+cma";
}

TEST(RoutedTransport, TwoHostsOfTwoRanks) {
  const std::vector<std::string> hosts{"hostA", "hostA", "hostB", "hostB"};
  runRanks(hosts, [&](int rank, RoutedTransport& t) {
    for (int p = 0; p < 4; ++p) {
      const std::string path = t.pathTo(p);
      if (p == rank) {
        EXPECT_EQ(path, "self");
      } else if (hosts[static_cast<std::size_t>(p)] == hosts[static_cast<std::size_t>(rank)]) {
        EXPECT_TRUE(isShm(path)) << rank << " -> " << p << ": " << path;
      } else {
        EXPECT_EQ(path, "tcp") << rank << " -> " << p;
      }
      EXPECT_EQ(pathTo(t, p), path);
    }
    EXPECT_EQ(t.pathTo(4), "");
    // Errors name the peer the way its transport does.
    const std::string same = t.describePeer(rank ^ 1);
    const std::string other = t.describePeer(rank ^ 2);
    EXPECT_NE(same.find("(pid "), std::string::npos) << same;
    EXPECT_NE(other.find("(127.0.0.1:"), std::string::npos) << other;
    std::uint64_t tag = 1;
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64 << 10},
                              std::size_t{(1 << 20) + 3}})
      exchangeAll(rank, t, bytes, tag++);
  });
}

TEST(RoutedTransport, UnevenHostsKeepPerPairOrder) {
  // One rank alone on its host (TCP only), two hosts of two.
  const std::vector<std::string> hosts{"a", "b", "b", "c", "c"};
  runRanks(hosts, [&](int rank, RoutedTransport& t) {
    if (rank == 0) {
      for (int p = 1; p < 5; ++p) EXPECT_EQ(t.pathTo(p), "tcp");
    }
    // 200 messages to every peer, mixed sizes, all posted at once: each pair stays in order.
    constexpr int kCount = 200;
    const int n = t.size();
    auto sizeOf = [](int i) { return static_cast<std::size_t>((i * 997) % 5000); };
    std::vector<std::vector<Bytes>> out(static_cast<std::size_t>(n)),
        in(static_cast<std::size_t>(n));
    std::vector<std::vector<Request>> sends(static_cast<std::size_t>(n)),
        recvs(static_cast<std::size_t>(n));
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      const auto up = static_cast<std::size_t>(p);
      out[up].resize(kCount);
      in[up].resize(kCount);
      sends[up] = std::vector<Request>(kCount);
      recvs[up] = std::vector<Request>(kCount);
      for (int i = 0; i < kCount; ++i) {
        const auto ui = static_cast<std::size_t>(i);
        in[up][ui].resize(sizeOf(i));
        t.postRecv(p, in[up][ui].data(), sizeOf(i), 100 + i, recvs[up][ui]);
        out[up][ui] = makePayload(rank + i, p, sizeOf(i));
        t.postSend(p, out[up][ui].data(), sizeOf(i), 100 + i, sends[up][ui]);
      }
    }
    const Deadline deadline = after(20s);
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      const auto up = static_cast<std::size_t>(p);
      for (int i = 0; i < kCount; ++i) {
        const auto ui = static_cast<std::size_t>(i);
        t.wait(sends[up][ui], deadline);
        t.wait(recvs[up][ui], deadline);
        EXPECT_EQ(firstWrong(in[up][ui], p + i, rank), -1) << p << " -> " << rank << " #" << i;
      }
    }
  });
}

TEST(RoutedTransport, SingleHostBuildsNoTcp) {
  MemoryStore store;
  runRanks(
      {"h", "h", "h"},
      [](int rank, RoutedTransport& t) {
        for (int p = 0; p < 3; ++p)
          if (p != rank) {
            EXPECT_TRUE(isShm(t.pathTo(p))) << t.pathTo(p);
          }
        exchangeAll(rank, t, 1000, 1);
      },
      nullptr, &store);
  EXPECT_FALSE(store.check({"tcp/addr/0"}));
  // Gathered through rank 0 (all_gather.hpp): the others' keys and rank 0's table.
  EXPECT_TRUE(store.check({"host/r/1", "host/r/2", "host/all"}));
}

TEST(RoutedTransport, ShmDisableMeansTcpEverywhere) {
  runRanks(
      {"h", "h", "h"},
      [](int rank, RoutedTransport& t) {
        for (int p = 0; p < 3; ++p)
          if (p != rank) {
            EXPECT_EQ(t.pathTo(p), "tcp");
          }
        exchangeAll(rank, t, 1000, 1);
      },
      [](int, TransportOptions& o) { o.shmDisable = true; });
}

TEST(RoutedTransport, OneRankWithShmDisabledTalksTcpToAll) {
  runRanks(
      {"h", "h", "h"},
      [](int rank, RoutedTransport& t) {
        if (rank == 1) {
          EXPECT_EQ(t.pathTo(0), "tcp");
          EXPECT_EQ(t.pathTo(2), "tcp");
        } else {
          EXPECT_EQ(t.pathTo(1), "tcp");
          EXPECT_TRUE(isShm(t.pathTo(2 - rank)));
        }
        exchangeAll(rank, t, 100000, 1);
      },
      [](int r, TransportOptions& o) { o.shmDisable = r == 1; });
}

TEST(RoutedTransport, CmaDisabledReportsTheRing) {
  runRanks(
      {"h", "h"},
      [](int rank, RoutedTransport& t) {
        EXPECT_EQ(t.pathTo(1 - rank), "shm");
        exchangeAll(rank, t, 3 << 20, 1);
      },
      [](int, TransportOptions& o) { o.shm.cmaDisable = true; });
}

TEST(TransportRegistry, KindsByPriorityShmThenUcxThenTcp) {
  const auto& kinds = transportKinds();
  ASSERT_EQ(kinds.size(), 3u);
  EXPECT_EQ(kinds[0].name, "shm");
  EXPECT_TRUE(kinds[0].sameHostOnly);
  EXPECT_EQ(kinds[1].name, "ucx");
  EXPECT_EQ(kinds[2].name, "tcp");
  for (std::size_t i = 1; i < kinds.size(); ++i)
    EXPECT_LT(kinds[i - 1].priority, kinds[i].priority);
}

TEST(TransportRegistry, AutoAndTcpChooseTcpBetweenHosts) {
  TransportOptions o = baseOptions();
  // auto: UCX only where the build has it and the kernel lists an RDMA device.
  const bool rdma = ucxAvailable() && !machine::rdmaDevices().empty();
  EXPECT_EQ(interHostKind(o).name, rdma ? "ucx" : "tcp");
  o.interHost = "tcp";
  EXPECT_EQ(interHostKind(o).name, "tcp");
}

TEST(TransportRegistry, UcxWithoutTheUcxTransportFailsAtCreationSayingWhy) {
  if (ucxAvailable()) GTEST_SKIP() << "this build has the UCX transport (ucx_less_build tests it)";
  TransportOptions o = baseOptions();
  o.interHost = "ucx";
  const Error e = [&] {
    try {
      interHostKind(o);
    } catch (const Error& err) {
      return err;
    }
    return Error(ErrorCode::Internal, "no error");
  }();
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("BRAID_TRANSPORT=ucx"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("no UCX transport"), std::string::npos) << e.what();
  // createTransport fails the same way at every world size, before touching the store.
  std::string message;
  for (int size : {1, 2}) {
    MemoryStore store;
    EXPECT_EQ(codeOf([&] { createTransport(store, 0, size, o); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_NE(message.find("no UCX transport"), std::string::npos) << message;
  }
  o.interHost = "shm";  // same-host only: not a choice between hosts
  EXPECT_EQ(codeOf([&] { interHostKind(o); }, message), ErrorCode::InvalidArgument);
  o.interHost = "rdma";
  EXPECT_EQ(codeOf([&] { interHostKind(o); }, message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("auto, ucx, tcp"), std::string::npos) << message;
}

TEST(TransportRegistry, UcxBetweenTwoHostsKeepsShmWithinEach) {
  if (!ucxAvailable()) GTEST_SKIP() << ucxUnavailableReason();
  runRanks(
      {"a", "a", "b"},
      [](int rank, RoutedTransport& t) {
        if (rank == 2) {
          EXPECT_EQ(t.pathTo(0), "ucx");
          EXPECT_EQ(t.pathTo(1), "ucx");
        } else {
          EXPECT_TRUE(isShm(t.pathTo(1 - rank)));
          EXPECT_EQ(t.pathTo(2), "ucx");
        }
        exchangeAll(rank, t, 70000, 1);
      },
      [](int, TransportOptions& o) { o.interHost = "ucx"; });
}

TEST(TransportRegistry, ExplicitTcpBetweenTwoHostsKeepsShmWithinEach) {
  runRanks(
      {"a", "a", "b"},
      [](int rank, RoutedTransport& t) {
        if (rank == 2) {
          EXPECT_EQ(t.pathTo(0), "tcp");
          EXPECT_EQ(t.pathTo(1), "tcp");
        } else {
          EXPECT_TRUE(isShm(t.pathTo(1 - rank)));
          EXPECT_EQ(t.pathTo(2), "tcp");
        }
        exchangeAll(rank, t, 70000, 1);
      },
      [](int, TransportOptions& o) { o.interHost = "tcp"; });
}

TEST(RoutedTransport, OneRankWorld) {
  MemoryStore store;
  auto t = createTransport(store, 0, 1, baseOptions());
  EXPECT_EQ(t->size(), 1);
  EXPECT_EQ(t->pathTo(0), "self");
  Bytes buf(4);
  Request req;
  std::string message;
  EXPECT_EQ(codeOf([&] { t->postSend(0, buf.data(), 4, 1, req); }, message),
            ErrorCode::InvalidArgument);
}

TEST(RoutedTransport, MismatchOnEitherLegNamesTheOperations) {
  std::latch done(4);
  runRanks({"A", "A", "B", "B"}, [&](int rank, RoutedTransport& t) {
    t.setTagDescriber([](std::uint64_t tag) { return "allreduce #" + std::to_string(tag); });
    Bytes buf(8);
    Request req;
    // Rank 1 sends tag 41 to rank 0 (shm), rank 2 sends tag 41 to rank 0 (tcp); rank 0 expects 42.
    if (rank == 1 || rank == 2) {
      t.postSend(0, buf.data(), 8, 41, req);
      t.wait(req, after(5s));
    } else if (rank == 0) {
      for (int peer : {1, 2}) {
        t.postRecv(peer, buf.data(), 8, 42, req);
        std::string message;
        EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::Mismatch);
        EXPECT_NE(message.find("expected allreduce #42 (8 bytes)"), std::string::npos) << message;
        EXPECT_NE(message.find("received allreduce #41 (8 bytes)"), std::string::npos) << message;
      }
    }
    done.arrive_and_wait();
  });
}

TEST(RoutedTransport, AbortReachesEveryLeg) {
  std::latch done(4);
  runRanks({"A", "A", "B", "B"}, [&](int rank, RoutedTransport& t) {
    if (rank == 0) {
      Bytes a(16), b(16);
      Request viaShm, viaTcp;
      t.postRecv(1, a.data(), a.size(), 7, viaShm);
      t.postRecv(2, b.data(), b.size(), 7, viaTcp);
      std::thread aborter([&] {
        std::this_thread::sleep_for(100ms);
        t.abort("routed abort");
      });
      std::string m1, m2;
      const auto start = Clock::now();
      EXPECT_EQ(codeOf([&] { t.wait(viaShm, after(10s)); }, m1), ErrorCode::Aborted);
      EXPECT_EQ(codeOf([&] { t.wait(viaTcp, after(10s)); }, m2), ErrorCode::Aborted);
      aborter.join();
      EXPECT_LT(Clock::now() - start, 2s);
    }
    done.arrive_and_wait();
  });
}

TEST(RoutedTransport, WaitingOnTcpDoesNotStallShmSends) {
  // Hosts {0, 1} and {2}; everything through the ring, which is much smaller than the message.
  // Rank 0 posts a large shm send to 1, then waits on TCP for 2; 2 waits for 1 over TCP; 1 only
  // sends to 2 after receiving all of 0's message. Without someone moving rank 0's send while
  // rank 0 sleeps in the TCP transport, this would deadlock. The same with the requests marked
  // as an algorithm's (Request::attended): a rank whose peers are on two legs keeps its
  // progress threads for them whatever its CPUs (createTransport's backgroundAttended).
  for (bool attended : {false, true}) {
    SCOPED_TRACE(attended ? "attended" : "not attended");
    runRanks(
        {"A", "A", "B"},
        [&](int rank, RoutedTransport& t) {
          const std::size_t bytes = 4 << 20;
          Bytes big = rank == 0 ? makePayload(0, 1, bytes) : Bytes(bytes);
          Bytes small(8, static_cast<std::uint8_t>(rank));
          Request a, b;
          a.attended = attended;
          b.attended = attended;
          if (rank == 0) {
            t.postSend(1, big.data(), bytes, 1, a);
            t.postRecv(2, small.data(), small.size(), 2, b);
            t.wait(b, after(20s));
            t.wait(a, after(20s));
            EXPECT_EQ(small[0], 2);
          } else if (rank == 1) {
            t.postRecv(0, big.data(), bytes, 1, a);
            t.wait(a, after(20s));
            EXPECT_EQ(firstWrong(big, 0, 1), -1);
            t.postSend(2, small.data(), small.size(), 3, b);
            t.wait(b, after(20s));
          } else {
            t.postRecv(1, small.data(), small.size(), 3, a);
            t.wait(a, after(20s));
            EXPECT_EQ(small[0], 1);
            small.assign(8, 2);
            t.postSend(0, small.data(), small.size(), 2, b);
            t.wait(b, after(20s));
          }
        },
        [](int, TransportOptions& o) {
          o.shm.cmaDisable = true;
          o.shm.slots = 2;
          o.shm.slotBytes = 4096;
        });
  }
}

TEST(RoutedTransport, HostThatNeverPublishesIsNamed) {
  MemoryStore store;
  TransportOptions o = baseOptions();
  o.tcp.connectTimeout = 300ms;
  std::string message;
  EXPECT_EQ(codeOf([&] { createTransport(store, 0, 3, o); }, message), ErrorCode::Timeout);
  EXPECT_NE(message.find("rank 0 timed out after 300 ms waiting for ranks 1, 2 to publish their "
                         "host"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace braid::transport
