// The TCP transport: ranks are threads in this process, each with its own transport, meeting
// through a MemoryStore. Every wait has a deadline, so a broken transport fails a test instead
// of hanging it.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/transport_ranks.hpp"
#include "store/memory_store.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;

Deadline after(Clock::duration d) {
  return Clock::now() + d;
}

TcpOptions testOptions() {
  TcpOptions o;
  o.connectTimeout = 10s;
  return o;
}

using test::Bytes;
using test::codeOf;
using test::errorOf;
using test::exchangeAll;
using test::firstWrong;
using test::makePayload;
using test::pattern;
using test::Rendezvous;

// Runs body(rank, transport) on `size` threads, each with its own TCP transport.
void runRanks(int size, const std::function<void(int, Transport&)>& body,
              const TcpOptions& options = testOptions()) {
  test::runTransportRanks(
      size, [&](Store& store, int r) { return createTcpTransport(store, r, size, options); }, body);
}

TEST(TcpTransport, PairSizes) {
  runRanks(2, [](int rank, Transport& t) {
    const int peer = 1 - rank;
    std::uint64_t tag = 100;
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64 << 10},
                              std::size_t{32 << 20}}) {
      // Ping from 0 to 1, then pong back: exercises both "recv posted first" and "data first".
      Bytes buf(bytes);
      Request req;
      if (rank == 0) {
        Bytes out = makePayload(0, 1, bytes);
        t.postSend(peer, out.data(), bytes, tag, req);
        t.wait(req, after(20s));
        t.postRecv(peer, buf.data(), bytes, tag + 1, req);
        t.wait(req, after(20s));
        EXPECT_EQ(firstWrong(buf, 1, 0), -1) << bytes;
      } else {
        t.postRecv(peer, buf.data(), bytes, tag, req);
        t.wait(req, after(20s));
        EXPECT_EQ(firstWrong(buf, 0, 1), -1) << bytes;
        Bytes out = makePayload(1, 0, bytes);
        t.postSend(peer, out.data(), bytes, tag + 1, req);
        t.wait(req, after(20s));
      }
      tag += 2;
    }
  });
}

TEST(TcpTransport, AllToAllSmall) {
  for (int size = 2; size <= 8; ++size) {
    SCOPED_TRACE("size " + std::to_string(size));
    runRanks(size, [](int rank, Transport& t) {
      std::uint64_t tag = 1;
      for (std::size_t bytes :
           {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64 << 10}})
        exchangeAll(rank, t, bytes, tag++);
    });
  }
}

TEST(TcpTransport, AllToAllLarge) {
  for (int size : {2, 3}) {
    SCOPED_TRACE("size " + std::to_string(size));
    runRanks(size, [](int rank, Transport& t) { exchangeAll(rank, t, 32 << 20, 9); });
  }
  runRanks(8, [](int rank, Transport& t) { exchangeAll(rank, t, 1 << 20, 9); });
}

TEST(TcpTransport, SimultaneousLargeExchangeDoesNotDeadlock) {
  // Both ranks post a 32 MiB send and a receive, then wait on the send first: neither send fits
  // in the socket buffers, so waiting on it must also drain the data coming the other way.
  runRanks(2, [](int rank, Transport& t) {
    const int peer = 1 - rank;
    const std::size_t bytes = 32 << 20;
    Bytes out = makePayload(rank, peer, bytes), in(bytes);
    Request send, recv;
    t.postSend(peer, out.data(), bytes, 3, send);
    t.postRecv(peer, in.data(), bytes, 3, recv);
    t.wait(send, after(20s));
    t.wait(recv, after(20s));
    EXPECT_EQ(firstWrong(in, peer, rank), -1);
  });
}

TEST(TcpTransport, ThousandSmallMessagesInOrder) {
  constexpr int kCount = 1000;
  auto sizeOf = [](int i) { return static_cast<std::size_t>((i * 37) % 300); };
  runRanks(2, [&](int rank, Transport& t) {
    std::vector<Request> reqs(kCount);
    std::vector<Bytes> bufs(kCount);
    if (rank == 1) {
      for (int i = 0; i < kCount; ++i) {
        bufs[static_cast<std::size_t>(i)] = makePayload(i, 1, sizeOf(i));
        t.postSend(0, bufs[static_cast<std::size_t>(i)].data(), sizeOf(i),
                   static_cast<std::uint64_t>(1000 + i), reqs[static_cast<std::size_t>(i)]);
      }
    } else {
      std::this_thread::sleep_for(20ms);  // let the data arrive before the receives are posted
      for (int i = 0; i < kCount; ++i) {
        bufs[static_cast<std::size_t>(i)].resize(sizeOf(i));
        t.postRecv(1, bufs[static_cast<std::size_t>(i)].data(), sizeOf(i),
                   static_cast<std::uint64_t>(1000 + i), reqs[static_cast<std::size_t>(i)]);
      }
    }
    const Deadline deadline = after(10s);
    for (int i = 0; i < kCount; ++i) {
      t.wait(reqs[static_cast<std::size_t>(i)], deadline);
      if (rank == 0) {
        EXPECT_EQ(firstWrong(bufs[static_cast<std::size_t>(i)], i, 1), -1) << "message " << i;
      }
    }
  });
}

// Rank 1 sends (tag 5, 8 bytes); rank 0 expects (expectTag, expectBytes).
void expectMismatch(std::uint64_t expectTag, std::size_t expectBytes, const std::string& want) {
  Rendezvous done(2);
  runRanks(2, [&](int rank, Transport& t) {
    Bytes buf(64);
    Request req;
    if (rank == 1) {
      t.postSend(0, buf.data(), 8, 5, req);
      t.wait(req, after(5s));
    } else {
      t.postRecv(1, buf.data(), expectBytes, expectTag, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::Mismatch);
      EXPECT_NE(message.find(want), std::string::npos) << message;
      EXPECT_NE(message.find("from rank 1 (127.0.0.1:"), std::string::npos) << message;
      // The connection is gone: later requests to that peer fail too.
      Request later;
      t.postSend(1, buf.data(), 1, 6, later);
      EXPECT_EQ(codeOf([&] { t.wait(later, after(5s)); }, message), ErrorCode::Mismatch);
    }
    done.arriveAndWait();  // rank 1 stays up until rank 0 has checked
  });
}

TEST(TcpTransport, TagMismatch) {
  expectMismatch(6, 8, "rank 0 expected tag 6 (8 bytes) from rank 1");
  expectMismatch(6, 8, "but received tag 5 (8 bytes)");
}

TEST(TcpTransport, SizeMismatch) {
  expectMismatch(5, 16, "rank 0 expected tag 5 (16 bytes) from rank 1");
  expectMismatch(5, 16, "but received tag 5 (8 bytes)");
}

TEST(TcpTransport, TagDescriberNamesTheOperation) {
  Rendezvous done(2);
  runRanks(2, [&](int rank, Transport& t) {
    t.setTagDescriber([](std::uint64_t tag) { return "allreduce #" + std::to_string(tag); });
    Bytes buf(8);
    Request req;
    if (rank == 1) {
      t.postSend(0, buf.data(), 8, 41, req);
      t.wait(req, after(5s));
    } else {
      t.postRecv(1, buf.data(), 8, 42, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::Mismatch);
      EXPECT_NE(message.find("expected allreduce #42 (8 bytes)"), std::string::npos) << message;
      EXPECT_NE(message.find("received allreduce #41 (8 bytes)"), std::string::npos) << message;
    }
    done.arriveAndWait();
  });
}

TEST(TcpTransport, PeerDestroyedMidWaitIsPeerLost) {
  for (int size : {2, 3}) {
    SCOPED_TRACE("size " + std::to_string(size));
    std::atomic<long long> destroyedAtNs{0};
    runRanks(size, [&](int rank, Transport& t) {
      if (rank == 1) {
        std::this_thread::sleep_for(200ms);
        destroyedAtNs = Clock::now().time_since_epoch().count();
        return;  // runRanks destroys the transport now
      }
      Bytes buf(1024);
      Request req;
      t.postRecv(1, buf.data(), buf.size(), 7, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(10s)); }, message), ErrorCode::PeerLost);
      const auto noticed = Clock::now().time_since_epoch().count();
      EXPECT_NE(message.find("rank " + std::to_string(rank) +
                             " lost its connection to rank 1 (127.0.0.1:"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("during recv of 1024 bytes"), std::string::npos) << message;
      EXPECT_LT(std::chrono::nanoseconds(noticed - destroyedAtNs.load()), 1s);
      // Later requests to the lost peer fail at once.
      Request later;
      t.postSend(1, buf.data(), 1, 8, later);
      EXPECT_EQ(codeOf([&] { t.wait(later, after(5s)); }, message), ErrorCode::PeerLost);
    });
  }
}

TEST(TcpTransport, SendToDestroyedPeerIsPeerLost) {
  runRanks(2, [&](int rank, Transport& t) {
    if (rank == 1) return;
    std::this_thread::sleep_for(100ms);
    // 32 MiB cannot fit in socket buffers: the send must notice the peer is gone.
    Bytes buf(32 << 20);
    Request req;
    t.postSend(1, buf.data(), buf.size(), 7, req);
    std::string message;
    EXPECT_EQ(codeOf([&] { t.wait(req, after(10s)); }, message), ErrorCode::PeerLost);
    EXPECT_NE(message.find("lost its connection to rank 1 (127.0.0.1:"), std::string::npos)
        << message;
  });
}

TEST(TcpTransport, UnmatchedRecvTimesOutAtDeadline) {
  Rendezvous done(2);
  runRanks(2, [&](int rank, Transport& t) {
    if (rank == 0) {
      Bytes buf(16);
      Request req;
      t.postRecv(1, buf.data(), buf.size(), 7, req);
      const auto start = Clock::now();
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, start + 300ms); }, message), ErrorCode::Timeout);
      const auto took = Clock::now() - start;
      EXPECT_GE(took, 300ms);
      EXPECT_LT(took, 1s);
      EXPECT_NE(message.find("rank 0 timed out waiting for a recv of 16 bytes from rank 1 "
                             "(127.0.0.1:"),
                std::string::npos)
          << message;
      // The transport is failed now: later requests fail with the same error.
      Request later;
      t.postSend(1, buf.data(), 1, 8, later);
      std::string again;
      EXPECT_EQ(codeOf([&] { t.wait(later, after(5s)); }, again), ErrorCode::Timeout);
      EXPECT_EQ(again, message);
    }
    done.arriveAndWait();
  });
}

// A timeout says what holds the receive up (tests/harness/transport_ranks.hpp).
TEST(TcpTransport, TimeoutSaysWhatHoldsTheReceiveUp) {
  test::checkTimeoutSaysWhatHoldsTheReceiveUp(
      [](const auto& body) { runRanks(2, body); },
      "(127.0.0.1:", "nothing for it has arrived from rank 1", "");
}

TEST(TcpTransport, RankThatNeverPublishesTimesOutNamingIt) {
  MemoryStore store;
  TcpOptions o = testOptions();
  o.connectTimeout = 300ms;
  const auto start = Clock::now();
  std::string message;
  EXPECT_EQ(codeOf([&] { createTcpTransport(store, 1, 2, o); }, message), ErrorCode::Timeout);
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_NE(message.find("rank 1 timed out after 300 ms waiting for rank 0 to publish"),
            std::string::npos)
      << message;
}

TEST(TcpTransport, RankThatNeverConnectsTimesOutNamingIt) {
  MemoryStore store;
  TcpOptions o = testOptions();
  o.connectTimeout = 300ms;
  const auto start = Clock::now();
  std::string message;
  EXPECT_EQ(codeOf([&] { createTcpTransport(store, 0, 3, o); }, message), ErrorCode::Timeout);
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_NE(message.find("waiting for ranks 1, 2 to connect"), std::string::npos) << message;
}

TEST(TcpTransport, UnreachableRankTimesOutNamingItsAddress) {
  MemoryStore store;
  // A port that was free a moment ago: nothing listens there.
  std::string address;
  {
    MemoryStore scratch;
    TcpOptions once = testOptions();
    auto lone = createTcpTransport(scratch, 0, 1, once);
    address = scratch.getString("tcp/addr/0", 1s);
  }
  store.setString("tcp/addr/0", address);
  TcpOptions o = testOptions();
  o.connectTimeout = 400ms;
  const auto start = Clock::now();
  std::string message;
  EXPECT_EQ(codeOf([&] { createTcpTransport(store, 1, 2, o); }, message), ErrorCode::Timeout);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 400ms);
  EXPECT_LT(took, 2s);
  EXPECT_NE(message.find("rank 1 could not connect to rank 0 at " + address +
                         " within 400 ms (last error: Connection refused)"),
            std::string::npos)
      << message;
}

TEST(TcpTransport, AbortWakesABlockedWait) {
  Rendezvous done(2);
  runRanks(2, [&](int rank, Transport& t) {
    if (rank == 0) {
      Bytes buf(16);
      Request req;
      t.postRecv(1, buf.data(), buf.size(), 7, req);
      std::thread aborter([&] {
        std::this_thread::sleep_for(150ms);
        t.abort("test abort: operator pressed stop");
      });
      const auto start = Clock::now();
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, start + 10s); }, message), ErrorCode::Aborted);
      EXPECT_LT(Clock::now() - start, 1s);
      EXPECT_NE(message.find("test abort: operator pressed stop"), std::string::npos) << message;
      aborter.join();
      Request later;
      t.postSend(1, buf.data(), 1, 8, later);
      EXPECT_EQ(codeOf([&] { t.wait(later, after(5s)); }, message), ErrorCode::Aborted);
    } else {
      // The aborted rank closed its connections: waiting on it reports it as lost.
      Bytes buf(16);
      Request req;
      t.postRecv(0, buf.data(), buf.size(), 9, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::PeerLost);
      EXPECT_NE(message.find("rank 0 (127.0.0.1:"), std::string::npos) << message;
    }
    done.arriveAndWait();
  });
}

TEST(TcpTransport, P2PMessageArrivesBeforeItsRecv) {
  Rendezvous sent(2);
  runRanks(2, [&](int rank, Transport& t) {
    const std::uint64_t a = kP2PTagBit | 7, b = kP2PTagBit | 8;
    if (rank == 1) {
      Bytes x = makePayload(1, 0, 100), y = makePayload(2, 0, 3000);
      Request rx, ry;
      t.postSend(0, x.data(), x.size(), a, rx);
      t.postSend(0, y.data(), y.size(), b, ry);
      t.wait(rx, after(5s));  // both complete although no receive is posted yet
      t.wait(ry, after(5s));
      sent.arriveAndWait();
    } else {
      sent.arriveAndWait();
      // Receive them in the other order: b was queued behind a.
      Bytes x(100), y(3000);
      Request rx, ry;
      t.postRecv(1, y.data(), y.size(), b, ry);
      t.wait(ry, after(5s));
      t.postRecv(1, x.data(), x.size(), a, rx);
      t.wait(rx, after(5s));
      EXPECT_EQ(firstWrong(x, 1, 0), -1);
      EXPECT_EQ(firstWrong(y, 2, 0), -1);
    }
  });
}

TEST(TcpTransport, P2PRecvPostedWhileTheMessageArrives) {
  runRanks(2, [&](int rank, Transport& t) {
    const std::uint64_t tag = kP2PTagBit | 1;
    const std::size_t bytes = 24 << 20;
    if (rank == 1) {
      Bytes x = makePayload(1, 0, bytes);
      Request req;
      t.postSend(0, x.data(), bytes, tag, req);
      t.wait(req, after(10s));
    } else {
      // Drive the connection (a collective recv that comes later) so the P2P message starts
      // arriving into the unexpected buffer, then post its receive.
      Bytes x(bytes), other(4);
      Request rother, rx;
      t.postRecv(1, other.data(), other.size(), 77, rother);
      EXPECT_FALSE(t.test(rother));
      std::this_thread::sleep_for(5ms);
      EXPECT_FALSE(t.test(rother));
      t.postRecv(1, x.data(), bytes, tag, rx);
      t.wait(rx, after(10s));
      EXPECT_EQ(firstWrong(x, 1, 0), -1);
      t.abort("done");  // rother is never sent
    }
  });
}

TEST(TcpTransport, SeveralTransportsInOneProcess) {
  std::vector<std::thread> groups;
  for (int g = 0; g < 3; ++g)
    groups.emplace_back([g] {
      runRanks(3 + g, [g](int rank, Transport& t) {
        for (int round = 0; round < 20; ++round)
          exchangeAll(rank, t, static_cast<std::size_t>(round * 1000 + g), 50 + round);
      });
    });
  for (auto& g : groups) g.join();
}

TEST(TcpTransport, TestAloneDrivesARequestToCompletion) {
  runRanks(2, [](int rank, Transport& t) {
    const std::size_t bytes = 4 << 20;
    Bytes buf = rank == 0 ? makePayload(0, 1, bytes) : Bytes(bytes);
    Request req;
    if (rank == 0)
      t.postSend(1, buf.data(), bytes, 4, req);
    else
      t.postRecv(0, buf.data(), bytes, 4, req);
    const Deadline deadline = after(5s);
    while (!t.test(req)) ASSERT_LT(Clock::now(), deadline) << "test() never completed";
    if (rank == 1) {
      EXPECT_EQ(firstWrong(buf, 0, 1), -1);
    }
  });
}

TEST(TcpTransport, RejectsInvalidArguments) {
  runRanks(2, [](int rank, Transport& t) {
    std::uint8_t byte = 0;
    Request req;
    std::string message;
    EXPECT_EQ(codeOf([&] { t.postSend(rank, &byte, 1, 1, req); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_EQ(codeOf([&] { t.postRecv(2, &byte, 1, 1, req); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_EQ(codeOf([&] { t.postRecv(1 - rank, nullptr, 1, 1, req); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_EQ(req.state.load(), Request::State::Idle);
    t.wait(req, after(1s));  // an idle request is not waited for
    EXPECT_TRUE(t.test(req));
  });
}

std::size_t openFileDescriptors() {
  return static_cast<std::size_t>(std::distance(
      std::filesystem::directory_iterator("/proc/self/fd"), std::filesystem::directory_iterator()));
}

TEST(TcpTransport, LeavesNoFileDescriptorsBehind) {
  const std::size_t before = openFileDescriptors();
  runRanks(4, [](int rank, Transport& t) { exchangeAll(rank, t, 1000, 1); });
  {
    MemoryStore store;  // a failed setup too
    TcpOptions o = testOptions();
    o.connectTimeout = 100ms;
    EXPECT_THROW(createTcpTransport(store, 0, 2, o), Error);
  }
  EXPECT_EQ(openFileDescriptors(), before);
}

TEST(TcpTransport, BackgroundThreadMovesDataNobodyWaitsFor) {
  const std::size_t bytes = 32 << 20;  // far more than the socket buffers hold
  // Rank 0 posts a large send and does not wait for 1.2 s; rank 1 must still receive it.
  {
    Rendezvous ready(2);
    runRanks(2, [&](int rank, Transport& t) {
      Bytes buf = rank == 0 ? makePayload(0, 1, bytes) : Bytes(bytes);
      Request req;
      ready.arriveAndWait();
      const auto start = Clock::now();
      if (rank == 0) {
        t.postSend(1, buf.data(), bytes, 1, req);
        std::this_thread::sleep_for(1200ms);
        EXPECT_TRUE(req.done());  // finished by the background thread
        t.wait(req, after(1s));
      } else {
        t.postRecv(0, buf.data(), bytes, 1, req);
        t.wait(req, start + 1000ms);
        EXPECT_EQ(firstWrong(buf, 0, 1), -1);
      }
    });
  }
  // Rank 1 posts a large receive and does not wait; rank 0's blocking send must complete.
  {
    Rendezvous ready(2);
    runRanks(2, [&](int rank, Transport& t) {
      Bytes buf = rank == 0 ? makePayload(0, 1, bytes) : Bytes(bytes);
      Request req;
      ready.arriveAndWait();
      const auto start = Clock::now();
      if (rank == 0) {
        t.postSend(1, buf.data(), bytes, 2, req);
        t.wait(req, start + 1000ms);
      } else {
        t.postRecv(0, buf.data(), bytes, 2, req);
        std::this_thread::sleep_for(1200ms);
        EXPECT_TRUE(req.done());
        t.wait(req, after(1s));
        EXPECT_EQ(firstWrong(buf, 0, 1), -1);
      }
    });
  }
}

// Ping-pong of 8-byte values: rank 0 sends, rank 1 echoes. Rank 0 stops after kRounds round
// trips or kLatencyBudget, whichever comes first (a loaded machine must not stretch the test),
// and tells rank 1 by setting kStop in the last value.
constexpr int kWarmupRounds = 200;
constexpr int kRounds = 3000;
constexpr auto kLatencyBudget = 1s;
constexpr std::uint64_t kStop = std::uint64_t{1} << 62;

// Runs the loop of rank 0; returns the one-way latency in microseconds (round trip / 2).
template <typename SendFn, typename RecvFn>
double pingPongInitiator(SendFn&& send, RecvFn&& recv) {
  const auto begin = Clock::now();
  Clock::time_point start = begin;
  int measured = 0;
  int rounds = 0;
  for (int i = 0;; ++i) {
    if (i == kWarmupRounds) start = Clock::now();
    const bool last = i + 1 == kWarmupRounds + kRounds || Clock::now() - begin > kLatencyBudget;
    send(static_cast<std::uint64_t>(i) | (last ? kStop : 0));
    const std::uint64_t echo = recv();
    EXPECT_EQ(echo & ~kStop, static_cast<std::uint64_t>(i));
    ++rounds;
    if (i >= kWarmupRounds) ++measured;
    if (last) break;
  }
  if (measured == 0) {  // the budget ran out during the warm-up: count every round
    measured = rounds;
    start = begin;
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / measured / 2;
}

template <typename SendFn, typename RecvFn>
void pingPongEchoer(SendFn&& send, RecvFn&& recv) {
  for (;;) {
    const std::uint64_t v = recv();
    send(v);
    if ((v & kStop) != 0) return;
  }
}

double pingPongMicros(std::chrono::microseconds spin) {
  std::atomic<double> oneWayUs{0};
  TcpOptions options = testOptions();
  options.spin = spin;
  runRanks(
      2,
      [&](int rank, Transport& t) {
        const int peer = 1 - rank;
        std::uint64_t out = 0, in = 0;
        Request send, recv;
        auto sendFn = [&](std::uint64_t v) {
          out = v;
          t.postSend(peer, &out, 8, 1, send);
          t.wait(send, after(5s));
        };
        auto recvFn = [&] {
          t.wait(recv, after(5s));
          const std::uint64_t v = in;
          t.postRecv(peer, &in, 8, 1, recv);  // the next one is posted before it can arrive
          return v;
        };
        t.postRecv(peer, &in, 8, 1, recv);
        if (rank == 0)
          oneWayUs = pingPongInitiator(sendFn, recvFn);
        else
          pingPongEchoer(sendFn, recvFn);
        t.abort("ping-pong finished");  // fails the receive posted for a round that never comes
      },
      options);
  return oneWayUs.load();
}

// The floor: the same exchange on a bare loopback TCP connection, busy-polling recv.
double rawSocketPingPongMicros() {
  std::uint16_t port = 0;
  tcp::Fd listener = tcp::listenOn("127.0.0.1", 0, port);
  std::string error;
  tcp::Fd client = tcp::connectTo({"127.0.0.1", port}, 0, after(5s), error);
  tcp::Fd server = tcp::acceptFrom(listener.get(), after(5s));
  if (!client || !server) {
    ADD_FAILURE() << "raw loopback connection: " << error;
    return 0;
  }
  tcp::setNoDelay(client.get());
  tcp::setNoDelay(server.get());
  auto sendOn = [](int fd) {
    return [fd](std::uint64_t v) {
      std::string e;
      EXPECT_TRUE(tcp::sendExactly(fd, &v, 8, after(5s), e)) << e;
    };
  };
  auto recvOn = [](int fd) {
    return [fd] {
      std::uint64_t v = 0;
      std::size_t got = 0;
      const Deadline deadline = after(5s);
      while (got < 8 && Clock::now() < deadline) {
        const ssize_t n = ::recv(fd, reinterpret_cast<char*>(&v) + got, 8 - got, MSG_DONTWAIT);
        if (n > 0) got += static_cast<std::size_t>(n);
        if (n == 0) break;
        if (n < 0) std::this_thread::yield();  // as the transport's spin does
      }
      EXPECT_EQ(got, 8u);
      return v;
    };
  };
  std::thread echoer([&] { pingPongEchoer(sendOn(server.get()), recvOn(server.get())); });
  const double us = pingPongInitiator(sendOn(client.get()), recvOn(client.get()));
  echoer.join();
  return us;
}

TEST(TcpTransport, PingPongLatency) {
  const double spinning = pingPongMicros(std::chrono::microseconds(50));
  const double sleeping = pingPongMicros(std::chrono::microseconds(0));
  const double patient = pingPongMicros(std::chrono::microseconds(1000));
  const double raw = rawSocketPingPongMicros();
  std::printf(
      "tcp ping-pong, 8 bytes, ranks as threads, one way (round trip / 2): %.2f us with the "
      "default 50 us spin, %.2f us spinning 1 ms, %.2f us sleeping at once; bare loopback "
      "socket busy-polling: %.2f us\n",
      spinning, patient, sleeping, raw);
}

}  // namespace
}  // namespace braid::transport
