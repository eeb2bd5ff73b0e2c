// The inproc transport (threads as ranks) against the contract of transport.hpp: per-pair FIFO,
// exact tag and size matching, deadlines, abort, and point-to-point messages held aside.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "transport/inproc/inproc_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;

Deadline in(std::chrono::milliseconds d) {
  return Clock::now() + d;
}

template <typename F>
ErrorCode codeOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no braid::Error thrown";
  return ErrorCode::Internal;
}

TEST(Inproc, RankAndSizeAndPeerNames) {
  InprocFabric f(3);
  auto ep = f.endpoint(2);
  EXPECT_EQ(ep->rank(), 2);
  EXPECT_EQ(ep->size(), 3);
  EXPECT_EQ(ep->describePeer(1), "rank 1 (inproc)");
  EXPECT_THROW(f.endpoint(2), Error);
  EXPECT_THROW(f.endpoint(3), Error);
  Request r;
  int x = 0;
  EXPECT_EQ(codeOf([&] { ep->postSend(2, &x, 4, 1, r); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([&] { ep->postRecv(5, &x, 4, 1, r); }), ErrorCode::InvalidArgument);
}

TEST(Inproc, SendBeforeOrAfterReceiveCopiesTheData) {
  InprocFabric f(2);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  std::vector<int> src(100), dst(100, -1);
  std::iota(src.begin(), src.end(), 0);
  Request s, r;
  a->postSend(1, src.data(), 400, 7, s);
  EXPECT_FALSE(a->test(s));  // waits for the receive to be posted
  b->postRecv(0, dst.data(), 400, 7, r);
  EXPECT_TRUE(a->test(s));
  EXPECT_TRUE(b->test(r));
  EXPECT_EQ(dst, src);

  std::fill(dst.begin(), dst.end(), -1);
  b->postRecv(0, dst.data(), 400, 8, r);
  EXPECT_FALSE(b->test(r));
  a->postSend(1, src.data(), 400, 8, s);
  b->wait(r, in(1s));
  a->wait(s, in(1s));
  EXPECT_EQ(dst, src);
}

TEST(Inproc, ZeroByteMessagesMatch) {
  InprocFabric f(2);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  Request s, r;
  a->postSend(1, nullptr, 0, 3, s);
  b->postRecv(0, nullptr, 0, 3, r);
  a->wait(s, in(1s));
  b->wait(r, in(1s));
}

TEST(Inproc, MessagesBetweenAPairArriveInPostingOrder) {
  InprocFabric f(2, 0us);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  constexpr int kN = 2000;
  std::thread sender([&] {
    Request s;
    for (int i = 0; i < kN; ++i) {
      a->postSend(1, &i, sizeof i, 42, s);
      a->wait(s, in(5s));
    }
  });
  Request r;
  for (int i = 0; i < kN; ++i) {
    int got = -1;
    b->postRecv(0, &got, sizeof got, 42, r);
    b->wait(r, in(5s));
    ASSERT_EQ(got, i);
  }
  sender.join();
}

TEST(Inproc, TagMismatchFailsBothSidesAndBreaksThePair) {
  InprocFabric f(2);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  int x = 1, y = 0;
  Request s, r;
  a->postSend(1, &x, 4, 1, s);
  b->postRecv(0, &y, 4, 2, r);
  try {
    b->wait(r, in(1s));
    FAIL() << "no mismatch";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Mismatch);
    EXPECT_NE(std::string(e.what()).find("tag 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(codeOf([&] { a->wait(s, in(1s)); }), ErrorCode::Mismatch);
  // The pair stays broken; the other direction is unaffected.
  EXPECT_EQ(codeOf([&] {
              a->postSend(1, &x, 4, 1, s);
              a->wait(s, in(1s));
            }),
            ErrorCode::Mismatch);
  b->postSend(0, &x, 4, 5, s);
  a->postRecv(1, &y, 4, 5, r);
  a->wait(r, in(1s));
  b->wait(s, in(1s));
  EXPECT_EQ(y, 1);
}

TEST(Inproc, SizeMismatchFails) {
  InprocFabric f(2);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  int x[2] = {1, 2}, y[2] = {};
  Request s, r;
  b->postRecv(0, y, 4, 9, r);
  a->postSend(1, x, 8, 9, s);
  EXPECT_EQ(codeOf([&] { b->wait(r, in(1s)); }), ErrorCode::Mismatch);
  EXPECT_EQ(codeOf([&] { a->wait(s, in(1s)); }), ErrorCode::Mismatch);
  EXPECT_EQ(y[0], 0);
}

TEST(Inproc, DeadlineThrowsTimeoutAndWithdrawsTheRequest) {
  InprocFabric f(2);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  int x = 5, y = 0;
  Request r;
  b->postRecv(0, &y, 4, 1, r);
  const auto t0 = Clock::now();
  EXPECT_EQ(codeOf([&] { b->wait(r, in(50ms)); }), ErrorCode::Timeout);
  EXPECT_GE(Clock::now() - t0, 50ms);
  // The withdrawn receive no longer matches: the next send pairs with a new receive.
  Request s;
  a->postSend(1, &x, 4, 1, s);
  b->postRecv(0, &y, 4, 1, r);
  b->wait(r, in(1s));
  a->wait(s, in(1s));
  EXPECT_EQ(y, 5);
}

TEST(Inproc, PointToPointMessagesAreHeldUntilReceived) {
  InprocFabric f(2);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  const std::uint64_t tag = kP2PTagBit | 4;
  int x = 11;
  Request s1, s2;
  a->postSend(1, &x, 4, tag, s1);
  EXPECT_TRUE(a->test(s1));  // completes without a receive
  x = 12;                    // the sender may reuse its buffer at once
  a->postSend(1, &x, 4, tag, s2);
  a->wait(s2, in(1s));
  int y = 0;
  Request r;
  b->postRecv(0, &y, 4, tag, r);
  b->wait(r, in(1s));
  EXPECT_EQ(y, 11);
  b->postRecv(0, &y, 4, tag, r);
  b->wait(r, in(1s));
  EXPECT_EQ(y, 12);
}

TEST(Inproc, AbortFailsOwnRequestsWithAbortedAndPeersWithPeerLost) {
  InprocFabric f(3);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  auto c = f.endpoint(2);
  int x = 0, y = 0;
  Request rb, sb, rc, sc;
  b->postRecv(0, &y, 4, 1, rb);  // rank 1 waits on rank 0, which will abort
  a->postRecv(2, &x, 4, 1, rc);
  std::thread aborter([&] {
    std::this_thread::sleep_for(20ms);
    a->abort("test abort");
  });
  try {
    a->wait(rc, in(5s));
    ADD_FAILURE() << "abort did not fail the receive";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Aborted);
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos);
  }
  aborter.join();
  EXPECT_EQ(codeOf([&] { b->wait(rb, in(1s)); }), ErrorCode::PeerLost);
  c->postSend(0, &y, 4, 1, sc);
  EXPECT_EQ(codeOf([&] { c->wait(sc, in(1s)); }), ErrorCode::PeerLost);
  // Ranks other than the aborted one still talk to each other.
  b->postSend(2, &x, 4, 3, sb);
  c->postRecv(1, &y, 4, 3, rc);
  c->wait(rc, in(1s));
  b->wait(sb, in(1s));
  EXPECT_EQ(codeOf([&] {
              a->postSend(2, &x, 4, 1, sc);
              a->wait(sc, in(1s));
            }),
            ErrorCode::Aborted);
}

TEST(Inproc, AbortWakesAPeerWaitingOnTheAbortedRank) {
  InprocFabric f(2);
  auto a = f.endpoint(0);
  auto b = f.endpoint(1);
  int y = 0;
  Request r;
  b->postRecv(0, &y, 4, 1, r);
  std::thread aborter([&] {
    std::this_thread::sleep_for(20ms);
    a->abort("gone");
  });
  const auto t0 = Clock::now();
  EXPECT_EQ(codeOf([&] { b->wait(r, in(10s)); }), ErrorCode::PeerLost);
  EXPECT_LT(Clock::now() - t0, 5s);
  aborter.join();
}

TEST(Inproc, ManyThreadsExchangeConcurrently) {
  constexpr int kRanks = 6;
  constexpr int kRounds = 200;
  InprocFabric f(kRanks, 0us);
  std::vector<std::unique_ptr<Transport>> eps;
  for (int r = 0; r < kRanks; ++r) eps.push_back(f.endpoint(r));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Transport& t = *eps[r];
      std::vector<Request> sends(kRanks), recvs(kRanks);
      std::vector<int> out(kRanks), got(kRanks);
      for (int round = 0; round < kRounds; ++round) {
        for (int p = 0; p < kRanks; ++p) {
          if (p == r) continue;
          out[p] = round * 1000 + r * 10 + p;
          t.postRecv(p, &got[p], sizeof(int), 77, recvs[p]);
          t.postSend(p, &out[p], sizeof(int), 77, sends[p]);
        }
        for (int p = 0; p < kRanks; ++p) {
          if (p == r) continue;
          t.wait(recvs[p], in(10s));
          t.wait(sends[p], in(10s));
          if (got[p] != round * 1000 + p * 10 + r) bad.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace braid::transport
