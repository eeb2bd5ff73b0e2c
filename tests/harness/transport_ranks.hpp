// Transport tests: ranks as threads of this process, each with its own transport, meeting
// through a MemoryStore; the byte pattern every test message carries; an all-to-all exchange.
#pragma once

#include <gtest/gtest.h>

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
#include "store/memory_store.hpp"
#include "transport/transport.hpp"

namespace braid::test {

using Bytes = std::vector<std::uint8_t>;

/// Byte i of what rank `from` sends to rank `to` (`salt` tells messages of one pair apart).
inline std::uint8_t pattern(int from, int to, std::size_t i, std::size_t salt = 0) {
  return static_cast<std::uint8_t>(from * 131 + to * 31 + i * 7 + (i >> 8) + (i >> 16) + salt);
}

inline Bytes makePayload(int from, int to, std::size_t bytes, std::size_t salt = 0) {
  Bytes b(bytes);
  for (std::size_t i = 0; i < bytes; ++i) b[i] = pattern(from, to, i, salt);
  return b;
}

/// First index where `got` differs from what `from` sends to `to`, or -1.
inline long firstWrong(const Bytes& got, int from, int to, std::size_t salt = 0) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != pattern(from, to, i, salt)) return static_cast<long>(i);
  return -1;
}

// std::latch with a bound: a rank that failed before arriving fails the test instead of hanging it.
class Rendezvous {
 public:
  explicit Rendezvous(int count) : left_(count) {}
  void arriveAndWait() {
    std::unique_lock<std::mutex> lk(mu_);
    if (--left_ == 0) cv_.notify_all();
    if (!cv_.wait_for(lk, std::chrono::seconds(15), [this] { return left_ <= 0; }))
      ADD_FAILURE() << "rendezvous: another rank never arrived";
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
};

/// Runs body(rank, transport) on `size` threads, each with the transport make(store, rank)
/// returns; every exception is reported as a failure naming the rank.
inline void runTransportRanks(
    int size, const std::function<std::unique_ptr<transport::Transport>(Store&, int)>& make,
    const std::function<void(int, transport::Transport&)>& body) {
  MemoryStore store;
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      errors[static_cast<std::size_t>(r)] = errorOf([&] {
        auto t = make(store, r);
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

/// Every rank sends `bytes` to every other rank and receives from each, all posted at once
/// (sends staggered so not every rank hammers rank 0 first); checks what arrived.
inline void exchangeAll(int rank, transport::Transport& t, std::size_t bytes, std::uint64_t tag,
                        std::chrono::seconds bound = std::chrono::seconds(60)) {
  const int n = t.size();
  const auto un = static_cast<std::size_t>(n);
  std::vector<Bytes> out(un), in(un);
  std::vector<transport::Request> sends(un), recvs(un);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    in[static_cast<std::size_t>(p)].assign(bytes, 0xEE);
    t.postRecv(p, in[static_cast<std::size_t>(p)].data(), bytes, tag,
               recvs[static_cast<std::size_t>(p)]);
  }
  for (int k = 1; k < n; ++k) {
    const int p = (rank + k) % n;
    out[static_cast<std::size_t>(p)] = makePayload(rank, p, bytes);
    t.postSend(p, out[static_cast<std::size_t>(p)].data(), bytes, tag,
               sends[static_cast<std::size_t>(p)]);
  }
  const transport::Deadline deadline = transport::Clock::now() + bound;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    t.wait(sends[static_cast<std::size_t>(p)], deadline);
    t.wait(recvs[static_cast<std::size_t>(p)], deadline);
    EXPECT_EQ(firstWrong(in[static_cast<std::size_t>(p)], p, rank), -1)
        << bytes << " bytes from rank " << p << " to rank " << rank;
  }
}

/// What a receive's Timeout must say holds it up, on any transport. For each case rank 1 sends
/// nothing, 12 bytes of another point-to-point tag, or 12 bytes of a collective tag (5); then
/// rank 0 posts a 16-byte receive of point-to-point tag 10 and waits 300 ms. The message must
/// name the peer ("... from rank 1 " + peerStart) and the reason: `nothingSent`, the untaken
/// message, or the collective message ahead of it (`where`: " in the ring" or "").
/// run2(body) runs body on 2 ranks of the transport under test.
inline void checkTimeoutSaysWhatHoldsTheReceiveUp(
    const std::function<void(const std::function<void(int, transport::Transport&)>&)>& run2,
    const std::string& peerStart, const std::string& nothingSent, const std::string& where,
    bool holdsWhileOthersWait = false) {
  using namespace std::chrono_literals;
  struct Case {
    const char* what;
    std::uint64_t sentTag;  // 0: rank 1 sends nothing
    std::string expected;
  };
  const std::uint64_t wanted = transport::kP2PTagBit | 10;
  const std::uint64_t otherP2P = transport::kP2PTagBit | 9;
  const Case cases[] = {
      {"nothing sent", 0, nothingSent},
      {"another p2p tag", otherP2P,
       "messages from rank 1 that no receive has taken: tag " + std::to_string(otherP2P) +
           " (12 bytes)"},
      // A transport that holds a message aside once any receive is posted (TCP: so that lanes of
      // several communicators never wait behind each other) lists it as not taken.
      {"a collective message ahead", 5,
       holdsWhileOthersWait
           ? "messages from rank 1 that no receive has taken: tag 5 (12 bytes)"
           : "ahead of it" + where +
                 " from rank 1 waits tag 5 (12 bytes), which no posted receive of this rank "
                 "matches"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::latch sent(2), done(2);
    run2([&](int rank, transport::Transport& t) {
      Bytes buf(16, 1);
      transport::Request req;
      if (rank == 1) {
        if (c.sentTag != 0) {
          t.postSend(0, buf.data(), 12, c.sentTag, req);
          t.wait(req, std::chrono::steady_clock::now() + 5s);
        }
        sent.arrive_and_wait();
      } else {
        sent.arrive_and_wait();
        // Let the message arrive and be looked at before the receive is posted.
        std::this_thread::sleep_for(50ms);
        t.postRecv(1, buf.data(), 16, wanted, req);
        std::string message;
        EXPECT_EQ(codeOf([&] { t.wait(req, std::chrono::steady_clock::now() + 300ms); }, message),
                  ErrorCode::Timeout);
        EXPECT_NE(message.find("rank 0 timed out waiting for a recv of 16 bytes from rank 1 " +
                               peerStart),
                  std::string::npos)
            << message;
        EXPECT_NE(message.find(c.expected), std::string::npos) << message;
      }
      done.arrive_and_wait();
    });
  }
}

}  // namespace braid::test
