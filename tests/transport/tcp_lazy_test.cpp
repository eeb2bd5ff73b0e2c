// The TCP transport with lazy connections (TcpOptions::lazyConnect, BRAID_CONNECT=lazy): ranks
// are threads of this process meeting through a MemoryStore. A pair connects on first use; a
// crossing dial leaves exactly one connection (the higher rank's); authentication, the
// whitelist, PeerLost, Timeout naming the peer and abort hold on connections made this way.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <latch>
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
using test::Bytes;
using test::codeOf;
using test::firstWrong;
using test::makePayload;
using test::Rendezvous;

Deadline after(Clock::duration d) {
  return Clock::now() + d;
}

TcpOptions lazyOptions() {
  TcpOptions o;
  o.connectTimeout = 10s;
  o.lazyConnect = true;
  return o;
}

void runRanks(int size, const std::function<void(int, Transport&)>& body,
              const TcpOptions& options = lazyOptions()) {
  test::runTransportRanks(
      size, [&](Store& store, int r) { return createTcpTransport(store, r, size, options); }, body);
}

// A view of a MemoryStore whose lookups of one key wait until open() (a Timeout meanwhile, as
// for a key not yet published): holds one rank's dial before it starts.
class GatedStore : public Store {
 public:
  GatedStore(Store& base, std::string gated) : base_(base), gated_(std::move(gated)) {}
  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool asked() const { return asked_.load(); }
  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    base_.set(key, value);
  }
  std::vector<std::uint8_t> get(const std::string& key,
                                std::chrono::milliseconds timeout) override {
    if (key == gated_) {
      asked_ = true;
      std::unique_lock<std::mutex> lk(mu_);
      if (!cv_.wait_for(lk, timeout, [&] { return open_; }))
        throw Error(ErrorCode::Timeout, "gated key " + key);
    }
    return base_.get(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return base_.add(key, delta);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    base_.wait(keys, timeout);
  }
  bool check(const std::vector<std::string>& keys) override { return base_.check(keys); }

 private:
  Store& base_;
  const std::string gated_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::atomic<bool> asked_{false};
};

// Exchanges one message each way between ranks 0 and 1 and checks it.
void exchange(int rank, Transport& t, std::size_t bytes) {
  const int peer = 1 - rank;
  const Bytes out = makePayload(rank, peer, bytes);
  Bytes in(bytes);
  Request send, recv;
  t.postRecv(peer, in.data(), in.size(), 5, recv);
  t.postSend(peer, out.data(), out.size(), 5, send);
  t.wait(send, after(10s));
  t.wait(recv, after(10s));
  EXPECT_EQ(firstWrong(in, peer, rank), -1);
}

TEST(TcpLazy, CreationConnectsNothingAndFirstUseConnectsOnePair) {
  Rendezvous created(4), exchanged(4);
  runRanks(4, [&](int rank, Transport& t) {
    EXPECT_EQ(t.connectionCount(), 0u);
    created.arriveAndWait();
    if (rank < 2) exchange(rank, t, 1000);
    exchanged.arriveAndWait();
    EXPECT_EQ(t.connectionCount(), rank < 2 ? 1u : 0u) << "rank " << rank;
  });
}

// The crossing dial, forced both ways. Each time one rank's dial is held (its lookup of the
// peer's address waits on a gate) while the other rank dials:
//  - the held rank is the LOWER one: the higher rank's dial arrives while the lower one is
//    dialing and is taken; the lower rank's dial, once released, is refused (already
//    connected).
//  - the held rank is the HIGHER one: the lower rank's dial arrives while the higher one is
//    dialing and is refused (the higher rank's dial wins), so nothing connects until the gate
//    opens; then the higher rank's dial connects.
// Either way exactly one connection per rank, and the data arrives.
TEST(TcpLazy, CrossingDialsLeaveOneConnectionTheHigherRanksDial) {
  for (int held : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(held) + "'s dial held");
    MemoryStore store;
    GatedStore gated(store, "tcp/addr/" + std::to_string(1 - held));
    std::unique_ptr<Transport> t[2];
    std::thread ranks[2];
    for (int r = 0; r < 2; ++r)
      ranks[r] = std::thread([&, r] {
        t[r] =
            createTcpTransport(r == held ? static_cast<Store&>(gated) : store, r, 2, lazyOptions());
      });
    for (auto& th : ranks) th.join();
    ASSERT_TRUE(t[0] && t[1]);
    const std::size_t bytes = 3000;
    Bytes out[2] = {makePayload(0, 1, bytes), makePayload(1, 0, bytes)};
    Bytes in[2] = {Bytes(bytes), Bytes(bytes)};
    Request send[2], recv[2];
    // The held rank posts first: it is dialing (held) when the other rank's dial arrives.
    t[held]->postRecv(1 - held, in[held].data(), bytes, 9, recv[held]);
    t[held]->postSend(1 - held, out[held].data(), bytes, 9, send[held]);
    const auto until = after(5s);
    while (!gated.asked() && Clock::now() < until) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(gated.asked());
    const int other = 1 - held;
    t[other]->postRecv(held, in[other].data(), bytes, 9, recv[other]);
    t[other]->postSend(held, out[other].data(), bytes, 9, send[other]);
    if (held == 0) {
      // Rank 1's dial is taken while rank 0 dials: connected with rank 0's dial still held.
      t[1]->wait(recv[1], after(10s));
      t[0]->wait(recv[0], after(10s));
      EXPECT_EQ(t[0]->connectionCount(), 1u);
      EXPECT_EQ(t[1]->connectionCount(), 1u);
      gated.open();  // rank 0's dial now goes out and is refused: rank 1 is connected
    } else {
      // Rank 0's dial is refused (rank 1 dials itself): nothing connects while rank 1 is held.
      std::this_thread::sleep_for(300ms);
      EXPECT_FALSE(t[0]->test(recv[0]));
      EXPECT_EQ(t[0]->connectionCount(), 0u);
      EXPECT_EQ(t[1]->connectionCount(), 0u);
      gated.open();
      t[0]->wait(recv[0], after(10s));
      t[1]->wait(recv[1], after(10s));
    }
    for (int r = 0; r < 2; ++r) {
      t[r]->wait(send[r], after(10s));
      EXPECT_EQ(firstWrong(in[r], 1 - r, r), -1);
    }
    // A second message each way uses the one connection; a released dial adds none.
    std::this_thread::sleep_for(100ms);
    std::thread again([&] { exchange(1, *t[1], 100); });
    exchange(0, *t[0], 100);
    again.join();
    EXPECT_EQ(t[0]->connectionCount(), 1u);
    EXPECT_EQ(t[1]->connectionCount(), 1u);
  }
}

// Every pair dialing at once, many times over: one connection per pair, no message lost.
TEST(TcpLazy, EveryPairDialingAtOnce) {
  for (int round = 0; round < 3; ++round)
    runRanks(5, [](int rank, Transport& t) {
      test::exchangeAll(rank, t, 2000, 3);
      EXPECT_EQ(t.connectionCount(), 4u);
    });
}

TEST(TcpLazy, MismatchedKeysFailTheFirstUseWithAuth) {
  MemoryStore store;
  std::unique_ptr<Transport> t[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread([&, r] {
      TcpOptions o = lazyOptions();
      o.security.authKey = r == 0 ? "key-zero" : "key-one";
      o.security.handshakeTimeout = 2s;
      t[r] = createTcpTransport(store, r, 2, o);
    });
  for (auto& th : ranks) th.join();
  Bytes buf(64);
  Request req;
  t[1]->postSend(0, buf.data(), buf.size(), 1, req);
  std::string message;
  EXPECT_EQ(codeOf([&] { t[1]->wait(req, after(10s)); }, message), ErrorCode::Auth);
  EXPECT_NE(message.find("rank 1 failed to authenticate with rank 0"), std::string::npos)
      << message;
  EXPECT_EQ(t[0]->connectionCount(), 0u);
  EXPECT_EQ(t[1]->connectionCount(), 0u);
}

TEST(TcpLazy, MatchingKeysConnect) {
  TcpOptions o = lazyOptions();
  o.security.authKey = "the-job-key";
  runRanks(
      3, [](int rank, Transport& t) { test::exchangeAll(rank, t, 5000, 2); }, o);
}

// A dial from outside the whitelist is dropped: the dialing rank times out naming the peer.
TEST(TcpLazy, WhitelistHoldsForLazyDials) {
  MemoryStore store;
  std::unique_ptr<Transport> t[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread([&, r] {
      TcpOptions o = lazyOptions();
      o.connectTimeout = 1s;
      if (r == 0) o.security.allowedPeers = {"198.18.0.0/15"};  // loopback is not in it
      t[r] = createTcpTransport(store, r, 2, o);
    });
  for (auto& th : ranks) th.join();
  Bytes buf(64);
  Request req;
  t[1]->postSend(0, buf.data(), buf.size(), 1, req);
  std::string message;
  EXPECT_EQ(codeOf([&] { t[1]->wait(req, after(10s)); }, message), ErrorCode::Timeout);
  EXPECT_NE(message.find("could not connect to rank 0 at 127.0.0.1:"), std::string::npos)
      << message;
  EXPECT_EQ(t[0]->connectionCount(), 0u);
}

// A peer gone before the pair ever connected: its listener is closed, the dial is refused.
TEST(TcpLazy, PeerGoneBeforeFirstUseIsPeerLost) {
  Rendezvous created(2);
  runRanks(2, [&](int rank, Transport& t) {
    created.arriveAndWait();
    if (rank == 1) return;  // destroyed now
    std::this_thread::sleep_for(200ms);
    Bytes buf(64);
    Request req;
    t.postRecv(1, buf.data(), buf.size(), 1, req);
    std::string message;
    const auto start = Clock::now();
    EXPECT_EQ(codeOf([&] { t.wait(req, after(10s)); }, message), ErrorCode::PeerLost);
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  });
}

// A rank that published an address but never answers (a silent listener stands in for a
// stopped process): the receive times out naming it and saying the dial is unanswered.
TEST(TcpLazy, PeerThatNeverAnswersTimesOutNamingIt) {
  MemoryStore store;
  std::uint16_t port = 0;
  braid::Fd silent = tcp::listenOn("127.0.0.1", 0, port, 0, 0);
  store.setString("tcp/addr/1", "127.0.0.1:" + std::to_string(port));
  auto t = createTcpTransport(store, 0, 2, lazyOptions());
  Bytes buf(64);
  Request req;
  t->postRecv(1, buf.data(), buf.size(), 1, req);
  std::string message;
  EXPECT_EQ(codeOf([&] { t->wait(req, after(500ms)); }, message), ErrorCode::Timeout);
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("has not answered the dial"), std::string::npos) << message;
}

// Dials run side by side: while rank 0's dial to rank 1 hangs in the handshake (a silent
// listener stands in for a stopped process, with setup bounds of 60 s), rank 0 and rank 2 still
// connect and exchange, and rank 1's receive is still pending. With one dial at a time the
// exchange would wait behind rank 1's dial for the whole minute. Destroying the transport
// stops the hanging dial.
TEST(TcpLazy, ASilentPeerDelaysOnlyItsOwnDial) {
  MemoryStore store;
  std::uint16_t port = 0;
  braid::Fd silent = tcp::listenOn("127.0.0.1", 0, port, 0, 0);
  store.setString("tcp/addr/1", "127.0.0.1:" + std::to_string(port));
  TcpOptions o = lazyOptions();
  o.connectTimeout = 60s;
  o.security.handshakeTimeout = 60s;
  std::unique_ptr<Transport> t[3];
  std::thread make2([&] { t[2] = createTcpTransport(store, 2, 3, o); });
  t[0] = createTcpTransport(store, 0, 3, o);
  make2.join();
  Bytes stuck(64);
  Request toSilent;
  t[0]->postRecv(1, stuck.data(), stuck.size(), 3, toSilent);
  std::this_thread::sleep_for(100ms);  // the dial to rank 1 is under way
  const auto start = Clock::now();
  const std::size_t bytes = 4000;
  Bytes out[2] = {makePayload(0, 2, bytes), makePayload(2, 0, bytes)};
  Bytes in[2] = {Bytes(bytes), Bytes(bytes)};
  Request send[2], recv[2];
  std::thread side([&] {
    t[2]->postRecv(0, in[1].data(), bytes, 4, recv[1]);
    t[2]->postSend(0, out[1].data(), bytes, 4, send[1]);
    t[2]->wait(recv[1], after(20s));
    t[2]->wait(send[1], after(20s));
  });
  t[0]->postRecv(2, in[0].data(), bytes, 4, recv[0]);
  t[0]->postSend(2, out[0].data(), bytes, 4, send[0]);
  t[0]->wait(recv[0], after(20s));
  t[0]->wait(send[0], after(20s));
  side.join();
  EXPECT_LT(Clock::now() - start, 20s);
  EXPECT_EQ(firstWrong(in[0], 2, 0), -1);
  EXPECT_EQ(firstWrong(in[1], 0, 2), -1);
  EXPECT_FALSE(t[0]->test(toSilent)) << "rank 1 never answers";
  t[0].reset();  // stops the dial that hangs (the pending receive goes with the transport)
  t[2].reset();
}

// Abort before any connection: the wait throws Aborted; the listener closes, so a peer's
// first use sees this rank lost. (Rank 0 waits on rank 2, so rank 1 never connected to it.)
TEST(TcpLazy, AbortBeforeFirstUse) {
  Rendezvous aborted(3);
  runRanks(3, [&](int rank, Transport& t) {
    Bytes buf(64);
    Request req;
    std::string message;
    if (rank == 0) {
      t.postRecv(2, buf.data(), buf.size(), 1, req);
      std::thread later([&] {
        std::this_thread::sleep_for(100ms);
        t.abort("test abort");
      });
      EXPECT_EQ(codeOf([&] { t.wait(req, after(10s)); }, message), ErrorCode::Aborted) << message;
      later.join();
      aborted.arriveAndWait();
      return;
    }
    aborted.arriveAndWait();
    if (rank == 2) return;
    std::this_thread::sleep_for(100ms);  // rank 0's acceptor has closed the listener
    t.postSend(0, buf.data(), buf.size(), 1, req);
    EXPECT_EQ(codeOf([&] { t.wait(req, after(10s)); }, message), ErrorCode::PeerLost);
    EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
    EXPECT_EQ(t.connectionCount(), 0u);
  });
}

// With several streams each stream connects lazily: small messages open stream 0 only, a
// striped one every stream.
// A lane closed on rank 0 before the pair ever connected: rank 1's first receive on it dials
// rank 0, which tells it on the new connection, so the receive fails with PeerLost at once (not
// at its 20 s deadline); another lane over the same connection works.
TEST(TcpLazy, ALaneClosedBeforeThePairConnectedIsToldOnConnecting) {
  std::latch closed(2);
  runRanks(2, [&](int rank, Transport& t) {
    constexpr std::uint64_t kLaneA = 0xa, kLaneB = 0xb;
    t.openLane(kLaneA);
    t.openLane(kLaneB);
    if (rank == 0) t.closeLane(kLaneA);
    closed.arrive_and_wait();
    Bytes got(100);
    const Bytes mine = makePayload(rank, 1 - rank, 100);
    Request r, s;
    if (rank == 1) {
      std::string message;
      EXPECT_EQ(codeOf(
                    [&] {
                      t.postRecvOnLane(kLaneA, 0, got.data(), got.size(), 5, r);
                      t.wait(r, after(20s));
                    },
                    message),
                ErrorCode::PeerLost)
          << message;
      EXPECT_NE(message.find("(it was destroyed there)"), std::string::npos) << message;
    }
    t.postSendOnLane(kLaneB, 1 - rank, mine.data(), mine.size(), 5, s);
    t.postRecvOnLane(kLaneB, 1 - rank, got.data(), got.size(), 5, r);
    t.wait(s, after(10s));
    t.wait(r, after(10s));
    EXPECT_EQ(got, makePayload(1 - rank, rank, 100));
    EXPECT_EQ(t.connectionCount(), 1u);
  });
}

TEST(TcpLazy, StreamsConnectOnFirstUse) {
  TcpOptions o = lazyOptions();
  o.socketThreads = 2;
  o.socketsPerThread = 2;
  o.stripeMinBytes = 4096;
  Rendezvous created(2);
  // Both have counted stream 0 alone before either dials the others: a rank that ran ahead into
  // the striped exchange would dial streams 1-3, and the peer's count includes what it accepted.
  Rendezvous counted(2);
  runRanks(
      2,
      [&](int rank, Transport& t) {
        EXPECT_EQ(t.connectionCount(), 0u);
        created.arriveAndWait();
        exchange(rank, t, 100);
        EXPECT_EQ(t.connectionCount(), 1u);
        counted.arriveAndWait();
        exchange(rank, t, 1 << 20);
        EXPECT_EQ(t.connectionCount(), 4u);
      },
      o);
}

}  // namespace
}  // namespace braid::transport
