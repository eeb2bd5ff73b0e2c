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

TEST(TcpTransport, AllToAllLarge) {
  for (int size : {2, 3}) {
    SCOPED_TRACE("size " + std::to_string(size));
    runRanks(size, [](int rank, Transport& t) { exchangeAll(rank, t, 32 << 20, 9); });
  }
  runRanks(8, [](int rank, Transport& t) { exchangeAll(rank, t, 1 << 20, 9); });
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

// A timeout says what holds the receive up (tests/harness/transport_ranks.hpp).
TEST(TcpTransport, TimeoutSaysWhatHoldsTheReceiveUp) {
  test::checkTimeoutSaysWhatHoldsTheReceiveUp(
      [](const auto& body) { runRanks(2, body); },
      "(127.0.0.1:", "nothing for it has arrived from rank 1", "", true);
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
                         " within 400 ms (last error: ECONNREFUSED (Connection refused))"),
            std::string::npos)
      << message;
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

TEST(TcpTransport, AttendedRequestsAreLeftToTheirWaitsWithoutACpuToSpare) {
  // An algorithm's requests (Request::attended) are moved by the algorithm's own waits; the
  // background thread takes them over while nobody waits only with
  // TcpOptions::backgroundAttended (a CPU to spare for it). Rank 0 posts such a send, far more
  // than the socket buffers hold, and does not wait for 1.2 s (as in the test below: time
  // enough for the thread under the sanitizers). Rank 1 starts reading only once that post has
  // returned, so that only the thread, or the wait, can write the rest.
  const std::size_t bytes = 32 << 20;
  for (bool spare : {false, true}) {
    SCOPED_TRACE(spare ? "backgroundAttended" : "attended left to the waits");
    TcpOptions o = testOptions();
    o.backgroundAttended = spare;
    Rendezvous ready(2);
    Rendezvous posted(2);
    runRanks(
        2,
        [&](int rank, Transport& t) {
          Bytes buf = rank == 0 ? makePayload(0, 1, bytes) : Bytes(bytes);
          Request req;
          req.attended = true;
          ready.arriveAndWait();
          if (rank == 0) {
            t.postSend(1, buf.data(), bytes, 1, req);
            posted.arriveAndWait();
            std::this_thread::sleep_for(1200ms);
            EXPECT_EQ(req.done(), spare);
            t.wait(req, after(5s));  // the wait moves what is left
          } else {
            posted.arriveAndWait();
            t.postRecv(0, buf.data(), bytes, 1, req);
            t.wait(req, after(5s));
            EXPECT_EQ(firstWrong(buf, 0, 1), -1);
          }
        },
        o);
  }
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
  // Rank 0 posts a large send, waits for something else (which ends the wait long before the
  // send is written), then stops waiting: the background thread, idle while a thread waited,
  // must take the send over once nobody attends to it.
  {
    Rendezvous ready(2);
    runRanks(2, [&](int rank, Transport& t) {
      Bytes buf = rank == 0 ? makePayload(0, 1, bytes) : Bytes(bytes);
      std::uint64_t note = 7;
      Request req;
      Request other;
      ready.arriveAndWait();
      const auto start = Clock::now();
      if (rank == 0) {
        t.postSend(1, buf.data(), bytes, 3, req);
        t.postRecv(1, &note, sizeof note, 4, other);
        t.wait(other, after(1s));  // ends while the send is far from written
        std::this_thread::sleep_for(1200ms);
        EXPECT_TRUE(req.done());  // finished by the background thread
        t.wait(req, after(1s));
      } else {
        t.postSend(0, &note, sizeof note, 4, other);
        t.wait(other, after(1s));
        std::this_thread::sleep_for(100ms);  // rank 0 has left its wait by now
        t.postRecv(0, buf.data(), bytes, 3, req);
        t.wait(req, start + 1100ms);
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
  braid::Fd listener = tcp::listenOn("127.0.0.1", 0, port);
  std::string error;
  braid::Fd client = tcp::connectTo({"127.0.0.1", port}, 0, after(5s), error);
  braid::Fd server = tcp::acceptFrom(listener.get(), after(5s));
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
