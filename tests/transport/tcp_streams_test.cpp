// Multi-stream TCP (BRAID_SOCKET_NTHREADS x BRAID_NSOCKS_PERTHREAD sockets per peer, large
// messages striped across them): ranks are threads, each with its own transport, meeting
// through a MemoryStore; then whole communicators over TCP only. Every wait has a deadline, so a
// broken transport fails a test instead of hanging it; errors are checked by code (PeerLost,
// Mismatch) so a failure noticed only at the deadline (Timeout) fails the test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/checks.hpp"
#include "harness/errors.hpp"
#include "harness/ranks.hpp"
#include "harness/transport_ranks.hpp"
#include "store/memory_store.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;

struct Streams {
  int threads;
  int perThread;
};
constexpr Streams kStreams[] = {{2, 2}, {4, 1}};

std::string describe(const Streams& s) {
  return std::to_string(s.threads) + "x" + std::to_string(s.perThread) + " streams";
}

TcpOptions streamOptions(const Streams& s, std::size_t stripeMin = 256 * 1024) {
  TcpOptions o;
  o.connectTimeout = 30s;
  o.socketThreads = s.threads;
  o.socketsPerThread = s.perThread;
  o.stripeMinBytes = stripeMin;
  return o;
}

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

// Runs body(rank, transport) on `size` threads, each with its own transport.
void runRanks(int size, const TcpOptions& options,
              const std::function<void(int, Transport&)>& body) {
  test::runTransportRanks(
      size, [&](Store& store, int r) { return createTcpTransport(store, r, size, options); }, body);
}

TEST(TcpStreams, StripedSizesArriveIntact) {
  // Around the stripe threshold (1000 bytes here, so pieces of every size run) and far above
  // it: odd and prime sizes, so pieces differ by one byte.
  for (const Streams& s : kStreams) {
    for (int size : {2, 3}) {
      SCOPED_TRACE(describe(s) + ", " + std::to_string(size) + " ranks");
      runRanks(size, streamOptions(s, 1000), [&](int rank, Transport& t) {
        std::uint64_t tag = 1;
        for (std::size_t bytes :
             {0, 1, 3, 999, 1000, 1001, 1003, 4099, 65537, 262147, 1000003, (8 << 20) + 13})
          exchangeAll(rank, t, bytes, tag++);
      });
      if (HasFailure()) return;
    }
  }
}

TEST(TcpStreams, DefaultThresholdStripesOnlyLargeMessages) {
  runRanks(2, streamOptions({2, 2}), [&](int rank, Transport& t) {
    std::uint64_t tag = 1;
    for (std::size_t bytes : {7, 262143, 262144, 262145, 1048573})
      exchangeAll(rank, t, bytes, tag++);
  });
}

TEST(TcpStreams, SmallAndLargeMessagesKeepTheirOrder) {
  // One tag, small and striped messages interleaved, all posted at once on both sides: each
  // receive gets the message posted in the same position. Then user (P2P) messages that arrive
  // before their receives are posted.
  const std::size_t sizes[] = {7, 300007, 0, 1000003, 13, 262144, 5, 2000, 999983};
  for (const Streams& s : kStreams) {
    SCOPED_TRACE(describe(s));
    runRanks(2, streamOptions(s, 1000), [&](int rank, Transport& t) {
      const int peer = 1 - rank;
      for (std::uint64_t tag : {std::uint64_t{42}, kP2PTagBit | 42}) {
        const std::size_t n = std::size(sizes);
        std::vector<Bytes> bufs(n);
        std::vector<Request> reqs(n);
        if (rank == 0) {
          for (std::size_t i = 0; i < n; ++i) {
            bufs[i] = makePayload(0, 1, sizes[i], i);
            t.postSend(peer, bufs[i].data(), sizes[i], tag, reqs[i]);
          }
        } else {
          // P2P: let the messages arrive first (held until their receives are posted).
          if ((tag & kP2PTagBit) != 0) std::this_thread::sleep_for(300ms);
          for (std::size_t i = 0; i < n; ++i) {
            bufs[i].assign(sizes[i], 0xEE);
            t.postRecv(peer, bufs[i].data(), sizes[i], tag, reqs[i]);
          }
        }
        for (std::size_t i = n; i-- > 0;) t.wait(reqs[i], after(60s));  // last first
        if (rank == 1) {
          for (std::size_t i = 0; i < n; ++i)
            EXPECT_EQ(firstWrong(bufs[i], 0, 1, i), -1) << "message " << i << " of " << sizes[i];
        }
      }
    });
  }
}

TEST(TcpStreams, TestAloneCompletesAStripedMessage) {
  runRanks(2, streamOptions({2, 2}, 1000), [&](int rank, Transport& t) {
    Bytes buf = rank == 0 ? makePayload(0, 1, 500009) : Bytes(500009, 0);
    Request req;
    if (rank == 0)
      t.postSend(1, buf.data(), buf.size(), 9, req);
    else
      t.postRecv(0, buf.data(), buf.size(), 9, req);
    const Deadline deadline = after(60s);
    while (!t.test(req)) {
      ASSERT_LT(Clock::now(), deadline) << "test() never completed the request";
      std::this_thread::yield();
    }
    if (rank == 1) {
      EXPECT_EQ(firstWrong(buf, 0, 1), -1);
    }
  });
}

TEST(TcpStreams, SizeMismatchIsAMismatchNotAHang) {
  // Sizes that differ in one byte (striped both sides), and striped against not striped.
  for (auto [sent, expected] :
       {std::pair<std::size_t, std::size_t>{300001, 300000}, {300000, 1000}, {1000, 300000}}) {
    SCOPED_TRACE(std::to_string(sent) + " bytes sent, " + std::to_string(expected) + " expected");
    // The sender stays until the receiver has seen the mismatch: were it to leave at once, its
    // closed streams could reach the receiver before the mismatched header does, and the receiver
    // would rightly report the lost peer instead (a 1000-byte send completes at once).
    test::Rendezvous checked(2);
    runRanks(2, streamOptions({2, 2}, 4096), [&](int rank, Transport& t) {
      if (rank == 0) {
        Bytes buf = makePayload(0, 1, sent);
        Request req;
        t.postSend(1, buf.data(), buf.size(), 5, req);
        // The receiver fails and closes every stream: the send completes or sees it lost.
        try {
          t.wait(req, after(60s));
        } catch (const Error& e) {
          EXPECT_NE(e.code(), ErrorCode::Timeout) << e.what();
        }
        checked.arriveAndWait();
        return;
      }
      Bytes buf(expected);
      Request req;
      t.postRecv(0, buf.data(), buf.size(), 5, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(60s)); }, message), ErrorCode::Mismatch) << message;
      checked.arriveAndWait();
    });
  }
}

TEST(TcpStreams, PeerLossFailsEverySurvivorOnEveryStream) {
  // Rank 1 goes away while the others wait on it: striped and small receives, and a striped
  // send too large for the socket buffers; each survivor gets PeerLost (not its deadline).
  for (const Streams& s : kStreams) {
    SCOPED_TRACE(describe(s));
    runRanks(3, streamOptions(s, 4096), [&](int rank, Transport& t) {
      if (rank == 1) {
        std::this_thread::sleep_for(300ms);
        return;  // runRanks destroys the transport now
      }
      Bytes big(1 << 20), small(64), huge(64 << 20);
      Request bigReq, smallReq, hugeReq;
      t.postRecv(1, small.data(), small.size(), 7, smallReq);
      t.postRecv(1, big.data(), big.size(), 8, bigReq);
      t.postSend(1, huge.data(), huge.size(), 9, hugeReq);
      for (Request* req : {&bigReq, &smallReq, &hugeReq}) {
        std::string message;
        EXPECT_EQ(codeOf([&] { t.wait(*req, after(60s)); }, message), ErrorCode::PeerLost)
            << message;
        EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
      }
      // The transport is failed: later requests fail at once instead of waiting.
      Request later;
      t.postSend(rank == 0 ? 2 : 0, small.data(), small.size(), 10, later);
      std::string message;
      EXPECT_NE(codeOf([&] { t.wait(later, after(60s)); }, message), ErrorCode::Timeout) << message;
    });
  }
}

TEST(TcpStreams, OneBrokenStreamFailsTheWholeTransport) {
  // Rank 1 is two plain transports wired like stream 0 and stream 1 of rank 0's 2x1 striped
  // transport; it closes stream 1 only and keeps stream 0 open and silent. Rank 0, waiting on a
  // striped message whose first piece (stream 0) never comes, must still fail with PeerLost:
  // the broken stream fails every stream.
  MemoryStore store;
  std::string error0, error1;
  std::atomic<bool> done{false};
  std::thread r0([&] {
    error0 = errorOf([&] {
      auto t = createTcpTransport(store, 0, 2, streamOptions({2, 1}, 4096));
      Bytes buf(1 << 20);
      Request req;
      t->postRecv(1, buf.data(), buf.size(), 3, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t->wait(req, after(60s)); }, message), ErrorCode::PeerLost) << message;
      EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
      done = true;
    });
  });
  std::thread r1([&] {
    error1 = errorOf([&] {
      TcpOptions one = streamOptions({1, 1});
      auto stream0 = createTcpTransport(store, 1, 2, one);
      std::shared_ptr<Store> base(&store, [](Store*) {});
      PrefixStore prefixed(base, "tcp/stream1");
      auto stream1 = createTcpTransport(prefixed, 1, 2, one);
      std::this_thread::sleep_for(300ms);
      stream1.reset();  // stream 1 breaks; stream 0 stays open
      const Deadline deadline = after(90s);
      while (!done && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    });
  });
  r0.join();
  r1.join();
  EXPECT_EQ(error0, "");
  EXPECT_EQ(error1, "");
}

TEST(TcpStreams, PiecesTravelOnTheirStreams) {
  // The wire format, seen from plain transports wired as stream 0 and stream 1 of the other
  // rank's 2x1 striped transport (threshold 4096): 10001 bytes travel as 5001 bytes on stream 0
  // and 5000 on stream 1, both with the message's tag; 100 bytes go whole on stream 0. Both
  // directions.
  MemoryStore store;
  std::string error0, error1;
  const Bytes big = makePayload(0, 1, 10001);
  const Bytes small = makePayload(0, 1, 100, 3);
  std::thread r0([&] {
    error0 = errorOf([&] {
      auto t = createTcpTransport(store, 0, 2, streamOptions({2, 1}, 4096));
      Request a, b;
      t->postSend(1, big.data(), big.size(), 5, a);
      t->postSend(1, small.data(), small.size(), 6, b);
      t->wait(a, after(60s));
      t->wait(b, after(60s));
      Bytes back(10001), backSmall(100);
      t->postRecv(1, back.data(), back.size(), 7, a);
      t->postRecv(1, backSmall.data(), backSmall.size(), 8, b);
      t->wait(a, after(60s));
      t->wait(b, after(60s));
      EXPECT_EQ(back, big);
      EXPECT_EQ(backSmall, small);
    });
  });
  std::thread r1([&] {
    error1 = errorOf([&] {
      TcpOptions one = streamOptions({1, 1});
      auto stream0 = createTcpTransport(store, 1, 2, one);
      std::shared_ptr<Store> base(&store, [](Store*) {});
      PrefixStore prefixed(base, "tcp/stream1");
      auto stream1 = createTcpTransport(prefixed, 1, 2, one);
      Bytes got(10001, 0), gotSmall(100, 0);
      Request a, b, c;
      stream1->postRecv(0, got.data() + 5001, 5000, 5, b);
      stream0->postRecv(0, got.data(), 5001, 5, a);
      stream0->postRecv(0, gotSmall.data(), 100, 6, c);
      for (Request* r : {&a, &c}) stream0->wait(*r, after(60s));
      stream1->wait(b, after(60s));
      EXPECT_EQ(got, big);
      EXPECT_EQ(gotSmall, small);
      // Back, piece by piece.
      stream1->postSend(0, got.data() + 5001, 5000, 7, b);
      stream0->postSend(0, got.data(), 5001, 7, a);
      stream0->postSend(0, gotSmall.data(), 100, 8, c);
      for (Request* r : {&a, &c}) stream0->wait(*r, after(60s));
      stream1->wait(b, after(60s));
      std::this_thread::sleep_for(100ms);
    });
  });
  r0.join();
  r1.join();
  EXPECT_EQ(error0, "");
  EXPECT_EQ(error1, "");
}

TEST(TcpStreams, EveryStreamIsAuthenticated) {
  // With a job key, every stream's sockets run the authenticated handshake: a keyed job
  // works, and a peer whose stream 1 holds another key fails that stream with Error(Auth) (its
  // stream 0, with the right key, got through), while the striped rank times out naming it.
  TcpOptions keyed = streamOptions({2, 2}, 4096);
  keyed.security.authKey = "job key";
  runRanks(3, keyed, [&](int rank, Transport& t) { exchangeAll(rank, t, 100003, 1); });

  MemoryStore store;
  std::string error0, error1;
  std::thread r0([&] {
    TcpOptions o = streamOptions({2, 1}, 4096);
    o.security.authKey = "job key";
    o.connectTimeout = 5s;
    std::string message;
    EXPECT_EQ(codeOf([&] { createTcpTransport(store, 0, 2, o); }, message), ErrorCode::Timeout)
        << message;
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  });
  std::thread r1([&] {
    TcpOptions o = streamOptions({1, 1});
    o.connectTimeout = 5s;
    o.security.authKey = "job key";
    auto stream0 = createTcpTransport(store, 1, 2, o);
    std::shared_ptr<Store> base(&store, [](Store*) {});
    PrefixStore prefixed(base, "tcp/stream1");
    o.security.authKey = "another key";
    std::string message;
    EXPECT_EQ(codeOf([&] { createTcpTransport(prefixed, 1, 2, o); }, message), ErrorCode::Auth)
        << message;
  });
  r0.join();
  r1.join();
}

TEST(TcpStreams, AbortWakesAWaitOnAnyStream) {
  runRanks(2, streamOptions({2, 2}, 4096), [&](int rank, Transport& t) {
    if (rank == 1) {
      std::this_thread::sleep_for(500ms);  // keeps its streams open, sends nothing
      return;
    }
    Bytes buf(1 << 20);
    Request req;
    t.postRecv(1, buf.data(), buf.size(), 3, req);
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      t.abort("test abort");
    });
    std::string message;
    EXPECT_EQ(codeOf([&] { t.wait(req, after(60s)); }, message), ErrorCode::Aborted) << message;
    EXPECT_NE(message.find("test abort"), std::string::npos) << message;
    aborter.join();
  });
}

TEST(TcpStreams, RejectsTooManySocketsNamingTheVariables) {
  MemoryStore store;
  for (Streams s : {Streams{4, 8}, Streams{0, 1}, Streams{1, 0}, Streams{17, 1}}) {
    std::string message;
    EXPECT_EQ(codeOf([&] { createTcpTransport(store, 0, 1, streamOptions(s)); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_NE(message.find("BRAID_SOCKET_NTHREADS"), std::string::npos) << message;
    EXPECT_NE(message.find("BRAID_NSOCKS_PERTHREAD"), std::string::npos) << message;
  }
  std::string message;
  EXPECT_EQ(codeOf(
                [&] {
                  createTcpTransport(store, 0, 1, streamOptions({2, 2}, 0));
                },
                message),
            ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("BRAID_SOCKET_STRIPE_MIN"), std::string::npos) << message;
}

TEST(TcpStreams, EnvironmentIsReadAndBounded) {
  setenv("BRAID_SOCKET_NTHREADS", "2", 1);
  setenv("BRAID_NSOCKS_PERTHREAD", "4", 1);
  setenv("BRAID_SOCKET_STRIPE_MIN", "64K", 1);
  Options o = Options::fromEnv();
  EXPECT_EQ(o.socketThreads, 2);
  EXPECT_EQ(o.socketsPerThread, 4);
  EXPECT_EQ(o.socketStripeMinBytes, 64u * 1024);
  setenv("BRAID_NSOCKS_PERTHREAD", "9", 1);
  std::string message;
  EXPECT_EQ(codeOf([&] { Options::fromEnv(); }, message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("BRAID_SOCKET_NTHREADS=2"), std::string::npos) << message;
  EXPECT_NE(message.find("BRAID_NSOCKS_PERTHREAD=9"), std::string::npos) << message;
  setenv("BRAID_NSOCKS_PERTHREAD", "0", 1);
  EXPECT_EQ(codeOf([&] { Options::fromEnv(); }, message), ErrorCode::InvalidArgument);
  unsetenv("BRAID_NSOCKS_PERTHREAD");
  setenv("BRAID_SOCKET_STRIPE_MIN", "0", 1);
  EXPECT_EQ(codeOf([&] { Options::fromEnv(); }, message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("BRAID_SOCKET_STRIPE_MIN"), std::string::npos) << message;
  unsetenv("BRAID_SOCKET_NTHREADS");
  unsetenv("BRAID_SOCKET_STRIPE_MIN");
  o = Options::fromEnv();
  EXPECT_EQ(o.socketThreads, 1);
  EXPECT_EQ(o.socketsPerThread, 1);
}

// Whole communicators over TCP only (no shared memory), every collective checked element by
// element; a 1000-byte stripe threshold so chunks of every size are striped (odd piece sizes
// from the odd counts).
void sweepOverStreams(const Streams& s, int n) {
  const std::size_t counts[] = {0, 1, 1031, 65537};
  SCOPED_TRACE(describe(s) + ", " + std::to_string(n) + " ranks");
  Options o = test::testOptions();
  o.shmDisable = true;
  o.socketThreads = s.threads;
  o.socketsPerThread = s.perThread;
  o.socketStripeMinBytes = 1000;
  test::runThreads(
      n, o, [&](Comm& c) { test::sweepCollectives(c, counts); }, std::chrono::seconds(280));
}

TEST(TcpStreams, EveryCollectiveOver2x2Streams) {
  sweepOverStreams({2, 2}, 3);
}

TEST(TcpStreams, EveryCollectiveOver4x1Streams) {
  sweepOverStreams({4, 1}, 3);
}

}  // namespace
}  // namespace braid::transport
