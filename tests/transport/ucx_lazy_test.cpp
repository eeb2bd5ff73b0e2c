// The UCX transport with lazy connections (UcxOptions::lazyConnect, BRAID_CONNECT=lazy, the
// communicator's default) under UCX_TLS=tcp and UCX_TLS=sm,cma; ranks are threads of this
// process meeting through a MemoryStore. Creation makes no endpoint; a pair connects when a send
// or receive to the peer is first posted on either side, whichever side comes first, while the
// other waits on something else (its waiting thread answers) or is outside braid altogether (its
// connector thread answers); sends posted before the pair is authenticated keep their order;
// authentication, PeerLost, Timeout naming the peer and abort hold on pairs made this way. A
// silent peer (a stopped process) is a worker opened but never connected (openUcx).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/transport_ranks.hpp"
#include "harness/ucx_env.hpp"
#include "store/memory_store.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;
using test::Bytes;
using test::codeOf;
using test::firstWrong;
using test::makePayload;
using test::Rendezvous;

Deadline after(Clock::duration d) {
  return Clock::now() + d;
}

UcxOptions lazyOptions(std::chrono::milliseconds connect = 10000ms) {
  UcxOptions o;
  o.connectTimeout = connect;
  o.spin = 20us;
  o.lazyConnect = true;
  return o;
}

class UcxLazy : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!ucxAvailable()) GTEST_SKIP() << ucxUnavailableReason();
    test::useUcxTls(GetParam());
  }
  static void run(int size, const std::function<void(int, Transport&)>& body,
                  const UcxOptions& options = lazyOptions()) {
    test::runTransportRanks(
        size, [&](Store& s, int r) { return createUcxTransport(s, r, size, options); }, body);
  }

 public:
  // `size` transports created on threads (creation only reads addresses: nothing waits).
  static std::vector<std::unique_ptr<Transport>> create(
      int size, const std::function<UcxOptions(int)>& options) {
    MemoryStore store;
    std::vector<std::unique_ptr<Transport>> t(static_cast<std::size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        t[static_cast<std::size_t>(r)] = createUcxTransport(store, r, size, options(r));
      });
    for (auto& th : threads) th.join();
    return t;
  }
};

// Exchanges one message each way between ranks a and b (this rank is one of them).
void exchange(int rank, int peer, Transport& t, std::size_t bytes, std::uint64_t tag = 5) {
  const Bytes out = makePayload(rank, peer, bytes);
  Bytes in(bytes);
  Request send, recv;
  t.postRecv(peer, in.data(), in.size(), tag, recv);
  t.postSend(peer, out.data(), out.size(), tag, send);
  t.wait(send, after(10s));
  t.wait(recv, after(10s));
  EXPECT_EQ(firstWrong(in, peer, rank), -1) << bytes << " bytes from rank " << peer;
}

TEST_P(UcxLazy, CreationConnectsNothingAndFirstUseConnectsOnePair) {
  Rendezvous created(4), exchanged(4);
  run(4, [&](int rank, Transport& t) {
    EXPECT_EQ(t.connectionCount(), 0u);
    created.arriveAndWait();
    if (rank < 2) exchange(rank, 1 - rank, t, 1000);
    exchanged.arriveAndWait();
    EXPECT_EQ(t.connectionCount(), rank < 2 ? 1u : 0u) << "rank " << rank;
  });
}

// The pair is needed by one side only, while the other waits on another pair: rank `first`
// sends to rank `other`, which is busy receiving from rank 2 (sent 300 ms later). The send
// completes while `other` still waits there, so `other` answered the pair's handshake (a ring
// from the lower rank, a hello from the higher one) in that unrelated wait; the message is
// then received.
TEST_P(UcxLazy, ThePairConnectsWhileThePeerWaitsOnAnotherPair) {
  for (int first : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(first) + " needs the pair first");
    const int other = 1 - first;
    std::atomic<bool> otherPostedItsReceive{false};
    std::atomic<bool> sendDoneEarly{false};
    run(3, [&](int rank, Transport& t) {
      if (rank == first) {
        const Bytes out = makePayload(first, other, 3000);
        Request send;
        t.postSend(other, out.data(), out.size(), 5, send);
        t.wait(send, after(10s));
        sendDoneEarly = !otherPostedItsReceive.load();
      } else if (rank == other) {
        Bytes fromTwo(100);
        Request r2;
        t.postRecv(2, fromTwo.data(), fromTwo.size(), 6, r2);
        t.wait(r2, after(10s));
        otherPostedItsReceive = true;
        Bytes in(3000);
        Request recv;
        t.postRecv(first, in.data(), in.size(), 5, recv);
        t.wait(recv, after(10s));
        EXPECT_EQ(firstWrong(in, first, other), -1);
      } else {
        std::this_thread::sleep_for(300ms);
        const Bytes out(100, 7);
        Request send;
        t.postSend(other, out.data(), out.size(), 6, send);
        t.wait(send, after(10s));
      }
    });
    EXPECT_TRUE(sendDoneEarly.load());
  }
}

// Every pair at once, several rounds: one endpoint per peer, no message lost.
TEST_P(UcxLazy, EveryPairAtOnce) {
  for (int round = 0; round < 3; ++round)
    run(5, [](int rank, Transport& t) {
      test::exchangeAll(rank, t, 2000, 3);
      test::exchangeAll(rank, t, 20000, 4);
      EXPECT_EQ(t.connectionCount(), 4u);
    });
}

// Sends posted before the pair is authenticated wait, and go out in the order they were posted:
// small (inline) and large (rendezvous) ones mixed, collective and point-to-point tags.
TEST_P(UcxLazy, SendsPostedBeforeTheHandshakeKeepTheirOrder) {
  constexpr int kMessages = 40;
  auto sizeOf = [](int i) { return static_cast<std::size_t>(i % 3 == 0 ? 20000 + i : 100 + i); };
  run(2, [&](int rank, Transport& t) {
    std::vector<Bytes> bufs(kMessages);
    std::vector<Request> reqs(kMessages);
    if (rank == 1) {
      for (int i = 0; i < kMessages; ++i) {
        bufs[i] = makePayload(1, 0, sizeOf(i), static_cast<std::size_t>(i));
        t.postSend(0, bufs[i].data(), bufs[i].size(), 100 + static_cast<std::uint64_t>(i % 2),
                   reqs[i]);
      }
    } else {
      std::this_thread::sleep_for(200ms);  // every send is posted before the pair exists
      for (int i = 0; i < kMessages; ++i) {
        bufs[i].assign(sizeOf(i), 0);
        t.postRecv(1, bufs[i].data(), bufs[i].size(), 100 + static_cast<std::uint64_t>(i % 2),
                   reqs[i]);
      }
    }
    for (int i = 0; i < kMessages; ++i) t.wait(reqs[i], after(20s));
    if (rank == 0) {
      for (int i = 0; i < kMessages; ++i)
        EXPECT_EQ(firstWrong(bufs[i], 1, 0, static_cast<std::size_t>(i)), -1) << "message " << i;
    }
  });
}

// Keys differ: the initiating (higher) rank fails its requests with Auth naming the peer,
// whichever side needed the pair first; the other times out naming it (it never learns
// whether the stranger was the real rank).
TEST_P(UcxLazy, MismatchedKeysFailTheFirstUseWithAuth) {
  for (int first : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(first) + " posts first");
    auto t = create(2, [](int r) {
      UcxOptions o = lazyOptions(1500ms);
      o.security.authKey = r == 0 ? "key-zero" : "key-one";
      return o;
    });
    testing::internal::CaptureStderr();
    std::string messages[2];
    ErrorCode codes[2] = {ErrorCode::Internal, ErrorCode::Internal};
    std::thread ranks[2];
    for (int r = 0; r < 2; ++r)
      ranks[r] = std::thread([&, r] {
        if (r != first) std::this_thread::sleep_for(100ms);
        Bytes buf(64);
        Request req;
        t[r]->postRecv(1 - r, buf.data(), buf.size(), 1, req);
        codes[r] = codeOf([&] { t[r]->wait(req, after(10s)); }, messages[r]);
      });
    for (auto& th : ranks) th.join();
    testing::internal::GetCapturedStderr();
    EXPECT_EQ(codes[1], ErrorCode::Auth) << messages[1];
    EXPECT_NE(messages[1].find("rank 1 failed to authenticate with rank 0"), std::string::npos)
        << messages[1];
    EXPECT_EQ(codes[0], ErrorCode::Timeout) << messages[0];
    EXPECT_NE(messages[0].find("rank 1"), std::string::npos) << messages[0];
  }
}

TEST_P(UcxLazy, MatchingKeysConnect) {
  UcxOptions o = lazyOptions();
  o.security.authKey = "the-job-key";
  run(
      3, [](int rank, Transport& t) { test::exchangeAll(rank, t, 5000, 2); }, o);
}

// A peer gone before the pair ever connected: the first request to it fails with PeerLost
// naming it, well within the timeout.
TEST_P(UcxLazy, PeerGoneBeforeFirstUseIsPeerLost) {
  auto t = create(2, [](int) { return lazyOptions(); });
  t[1].reset();
  Bytes buf(64);
  Request req;
  t[0]->postRecv(1, buf.data(), buf.size(), 1, req);
  std::string message;
  const auto start = Clock::now();
  EXPECT_EQ(codeOf([&] { t[0]->wait(req, after(8s)); }, message), ErrorCode::PeerLost);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
}

// A peer whose process is alive but never drives its worker (a stopped process): its worker
// is opened (openUcx) and its address published, but it is never connected, so nothing answers
// there. Rank `live` is a lazy transport of the same 2-rank job.
struct SilentPeer {
  std::unique_ptr<UcxListening> silent;
  std::unique_ptr<Transport> live;
};
SilentPeer withSilentPeer(int live, const UcxOptions& options) {
  SilentPeer out;
  std::unique_ptr<UcxListening> opened[2] = {openUcx(0, 2, options), openUcx(1, 2, options)};
  const std::vector<std::string> entries = {opened[0]->entry(), opened[1]->entry()};
  out.live = createUcxTransport(std::move(opened[live]), entries, live, 2, options);
  out.silent = std::move(opened[1 - live]);
  return out;
}

// The requests to a silent peer time out naming it and saying the pair's handshake has not
// finished; a send held for the pair fails with them, and destroying both then is clean.
TEST_P(UcxLazy, APeerThatNeverAnswersTimesOutNamingIt) {
  for (int live : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(1 - live) + " is silent");
    SilentPeer p = withSilentPeer(live, lazyOptions());
    Transport& t = *p.live;
    Bytes out(64, 1), in(64);
    Request send, recv;
    t.postSend(1 - live, out.data(), out.size(), 1, send);
    t.postRecv(1 - live, in.data(), in.size(), 1, recv);
    std::string message;
    EXPECT_EQ(codeOf([&] { t.wait(recv, after(500ms)); }, message), ErrorCode::Timeout);
    const std::string peer = "rank " + std::to_string(1 - live);
    EXPECT_NE(message.find("handshake with " + peer + " (host"), std::string::npos) << message;
    EXPECT_NE(message.find("has not finished"), std::string::npos) << message;
    EXPECT_EQ(codeOf([&] { t.wait(send, after(1s)); }, message), ErrorCode::Timeout) << message;
  }
}

// Lazy pairs time out on their own bound (connectTimeout), not only the request's: a receive
// that may wait 30 s fails with Timeout "could not connect" once the pair's bound has passed.
TEST_P(UcxLazy, APairNotConnectedWithinTheConnectTimeoutFails) {
  SilentPeer p = withSilentPeer(1, lazyOptions(600ms));
  Bytes in(64);
  Request recv;
  p.live->postRecv(0, in.data(), in.size(), 1, recv);
  std::string message;
  const auto start = Clock::now();
  EXPECT_EQ(codeOf([&] { p.live->wait(recv, after(30s)); }, message), ErrorCode::Timeout);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_NE(message.find("rank 1 could not connect to rank 0"), std::string::npos) << message;
  EXPECT_NE(message.find("within 600 ms"), std::string::npos) << message;
}

// abort() while a pair is still connecting fails its held send and its receive with Aborted.
TEST_P(UcxLazy, AbortBeforeThePairConnects) {
  SilentPeer p = withSilentPeer(0, lazyOptions());
  Transport& t = *p.live;
  Bytes out(64, 1), in(64);
  Request send, recv;
  t.postSend(1, out.data(), out.size(), 1, send);
  t.postRecv(1, in.data(), in.size(), 1, recv);
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    t.abort("stopped by the test");
  });
  std::string message;
  EXPECT_EQ(codeOf([&] { t.wait(recv, after(10s)); }, message), ErrorCode::Aborted) << message;
  EXPECT_EQ(codeOf([&] { t.wait(send, after(10s)); }, message), ErrorCode::Aborted) << message;
  aborter.join();
  EXPECT_NE(message.find("stopped by the test"), std::string::npos) << message;
}

// A rank that is busy elsewhere (not in braid at all) still answers a pair's handshake (its
// connector thread), so a small send to it completes at once, as over TCP.
TEST_P(UcxLazy, ASmallSendCompletesWhileThePeerIsOutsideBraid) {
  for (int sender : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(sender) + " sends");
    Rendezvous sent(2);
    run(2, [&](int rank, Transport& t) {
      if (rank == sender) {
        const Bytes out = makePayload(sender, 1 - sender, 500);
        Request send;
        t.postSend(1 - sender, out.data(), out.size(), 5, send);
        t.wait(send, after(5s));
        EXPECT_EQ(t.connectionCount(), 1u);
        sent.arriveAndWait();
      } else {
        sent.arriveAndWait();  // outside braid until the send completed
        Bytes in(500);
        Request recv;
        t.postRecv(sender, in.data(), in.size(), 5, recv);
        t.wait(recv, after(5s));
        EXPECT_EQ(firstWrong(in, sender, rank), -1);
      }
    });
  }
}

// UCX's shared-memory transports without their error handling (no peer failure detection):
// the first use says what to set, as eager creation does.
TEST(UcxLazySetup, SharedMemoryWithoutErrorHandlingSaysWhatToSet) {
  if (!ucxAvailable()) GTEST_SKIP() << ucxUnavailableReason();
  ::setenv("UCX_TLS", "sm,cma", 1);
  ::unsetenv("UCX_POSIX_ERROR_HANDLING");
  ::unsetenv("UCX_SYSV_ERROR_HANDLING");
  testing::internal::CaptureStderr();  // UCX logs why it found no transport
  {
    auto t = UcxLazy::create(2, [](int) { return lazyOptions(); });
    Bytes buf(64);
    Request req;
    t[0]->postRecv(1, buf.data(), buf.size(), 1, req);
    std::string message;
    EXPECT_EQ(codeOf([&] { t[0]->wait(req, after(5s)); }, message), ErrorCode::InvalidArgument)
        << message;
    EXPECT_NE(message.find("UCX_POSIX_ERROR_HANDLING=y"), std::string::npos) << message;
  }
  testing::internal::GetCapturedStderr();
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxLazy, testing::Values("tcp", "sm,cma"), [](const auto& info) {
  return std::string(info.param) == "tcp" ? "tcp" : "sm_cma";
});

}  // namespace
}  // namespace braid::transport
