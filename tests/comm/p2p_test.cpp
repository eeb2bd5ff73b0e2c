// Point-to-point progress (core/comm.cpp, "Progress model"): async send/recv posted inline or by
// the worker behind queued collectives, driven by whoever waits, tests or drains them; many of
// them interleaved across peers and tags with async collectives in between; timeouts, abort and
// lost peers while a thread waits; a Work that outlives its communicator.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/ranks.hpp"
#include "store/memory_store.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;

// The value of element i of the m-th message from `src` to `dst` with `tag` in `round`.
std::int32_t p2pValue(int src, int dst, int tag, int round, int m, std::size_t i) {
  return static_cast<std::int32_t>(src * 1000003 + dst * 10007 + tag * 101 + round * 7919 + m * 31 +
                                   static_cast<std::int64_t>(i) * 3);
}

// Counts of the messages, in elements: empty, tiny, odd, and past the shm single-copy threshold.
constexpr std::size_t kCounts[] = {0, 1, 7, 257, 20000};

struct Message {
  std::vector<std::int32_t> buf;
  Work work;
  int src = 0, dst = 0, tag = 0, round = 0, m = 0;
  bool isRecv = false;
};

// Waits for `w` in one of four ways: wait(), bounded waits, test() polling, or from a helper
// thread.
void waitSomehow(Work& w, int how) {
  switch (how % 4) {
    case 0:
      w.wait();
      break;
    case 1:
      while (!w.wait(2ms)) {
      }
      break;
    case 2:
      while (!w.test()) std::this_thread::yield();
      w.wait();  // rethrows its error, if any
      break;
    default: {
      std::thread t([&] { w.wait(); });
      t.join();
      w.wait();
      break;
    }
  }
}

// Rounds of: every rank posts, in a rank-specific random order, async sends to and receives from
// every peer with several tags (two messages per tag, which must arrive in posting order), then
// an async allreduce and an async broadcast. The collectives of round r are waited for only after
// round r+1's send/recv were issued, so those queue behind them and the worker posts them.
// Send/recv are waited for in a random order, in random ways; every result is checked.
void interleaved(Comm& c, int rounds) {
  const int n = c.size(), me = c.rank();
  std::mt19937 rng(1234u + static_cast<unsigned>(me));
  std::vector<std::unique_ptr<std::vector<std::int32_t>>> reduceBufs;
  std::vector<Work> collectives;
  int collectivesRound = -1;
  auto finishCollectives = [&] {
    if (collectivesRound < 0) return;
    for (auto& w : collectives) w.wait();
    const int r = collectivesRound;
    const std::int32_t expectSum = n * r + n * (n - 1) / 2;
    for (std::int32_t v : *reduceBufs[0]) EXPECT_EQ(v, expectSum) << "round " << r;
    for (std::int32_t v : *reduceBufs[1]) EXPECT_EQ(v, r * 11) << "round " << r;
    collectives.clear();
    reduceBufs.clear();
    collectivesRound = -1;
  };
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::unique_ptr<Message>> msgs;
    struct Post {
      bool isRecv;
      int peer, tag, m;
    };
    std::vector<Post> posts;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      for (int tag = 0; tag < 3; ++tag)
        for (int m = 0; m < 2; ++m) {
          posts.push_back({false, peer, tag, m});
          posts.push_back({true, peer, tag, m});
        }
    }
    std::shuffle(posts.begin(), posts.end(), rng);
    // Messages with the same (peer, tag, direction) must be posted in m order.
    for (std::size_t i = 0; i < posts.size(); ++i)
      for (std::size_t j = i + 1; j < posts.size(); ++j)
        if (posts[i].isRecv == posts[j].isRecv && posts[i].peer == posts[j].peer &&
            posts[i].tag == posts[j].tag && posts[i].m > posts[j].m)
          std::swap(posts[i].m, posts[j].m);
    for (const Post& p : posts) {
      auto msg = std::make_unique<Message>();
      msg->isRecv = p.isRecv;
      msg->src = p.isRecv ? p.peer : me;
      msg->dst = p.isRecv ? me : p.peer;
      msg->tag = p.tag;
      msg->round = round;
      msg->m = p.m;
      // Sender and receiver agree on the count: it depends on the message only.
      const std::size_t count =
          kCounts[static_cast<std::size_t>(msg->src + msg->dst + p.tag + round + p.m) %
                  std::size(kCounts)];
      msg->buf.resize(count, -1);
      if (p.isRecv) {
        msg->work = c.recvAsync(msg->buf.data(), count, DataType::Int32, p.peer,
                                static_cast<std::uint32_t>(p.tag));
      } else {
        for (std::size_t i = 0; i < count; ++i)
          msg->buf[i] = p2pValue(me, p.peer, p.tag, round, p.m, i);
        msg->work = c.sendAsync(msg->buf.data(), count, DataType::Int32, p.peer,
                                static_cast<std::uint32_t>(p.tag));
      }
      msgs.push_back(std::move(msg));
    }
    finishCollectives();  // the previous round's
    // Async collectives after this round's send/recv (every rank issues them at the same
    // point): they wait for the send/recv before them.
    auto sum = std::make_unique<std::vector<std::int32_t>>(5, me + round);
    collectives.push_back(
        c.allreduceAsync(sum->data(), sum->data(), sum->size(), DataType::Int32, ReduceOp::Sum));
    auto bc = std::make_unique<std::vector<std::int32_t>>(3, me == round % n ? round * 11 : -5);
    collectives.push_back(c.broadcastAsync(bc->data(), bc->size(), DataType::Int32, round % n));
    reduceBufs.push_back(std::move(sum));
    reduceBufs.push_back(std::move(bc));
    collectivesRound = round;
    std::vector<std::size_t> order(msgs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t k = 0; k < order.size(); ++k)
      waitSomehow(msgs[order[k]]->work, static_cast<int>(k + static_cast<std::size_t>(round)));
    for (const auto& msg : msgs) {
      if (!msg->isRecv) continue;
      for (std::size_t i = 0; i < msg->buf.size(); ++i)
        ASSERT_EQ(msg->buf[i], p2pValue(msg->src, msg->dst, msg->tag, msg->round, msg->m, i))
            << "rank " << me << " of " << n << ": message " << msg->m << " from " << msg->src
            << " tag " << msg->tag << " round " << round << " element " << i;
    }
  }
  finishCollectives();
}

class P2PThreads : public ::testing::TestWithParam<int> {};

TEST_P(P2PThreads, InterleavedSendRecvAcrossPeersAndTagsWithCollectives) {
  runThreads(
      GetParam(), testOptions(), [](Comm& c) { interleaved(c, 6); }, 240s);
}

INSTANTIATE_TEST_SUITE_P(Sizes, P2PThreads, ::testing::Values(2, 3, 4, 5, 7, 8));

TEST(P2PProcesses, InterleavedOverSharedMemory) {
  runProcesses(
      4, testOptions(), [](Comm& c) { interleaved(c, 3); }, 240s);
}

TEST(P2PProcesses, InterleavedOverTcp) {
  Options o = testOptions();
  o.shmDisable = true;
  runProcesses(
      3, o, [](Comm& c) { interleaved(c, 3); }, 240s);
}

TEST(P2PThreads, InterleavedOverTcp) {
  Options o = testOptions();
  o.shmDisable = true;
  runThreads(
      4, o, [](Comm& c) { interleaved(c, 2); }, 240s);
}

// Blocking and async send/recv of one pair, posted inline, behind async collectives (by the
// worker) and behind a blocking send: same-tag messages arrive in posting order. A collective
// waits for the send/recv issued before it, so each group's receives are posted before it.
TEST(P2PThreads, SameTagMessagesKeepPostingOrderAcrossPaths) {
  runThreads(3, testOptions(), [](Comm& c) {
    const int me = c.rank(), n = c.size();
    const int to = (me + 1) % n, from = (me + n - 1) % n;
    constexpr int kGroup = 10, kGroups = 4, kMessages = kGroup * kGroups;
    std::vector<std::int32_t> out(kMessages), in(kMessages, -1);
    std::vector<Work> recvs, sends, collectives;
    std::vector<std::int32_t> sums(kGroups, 1);
    for (int g = 0; g < kGroups; ++g) {
      for (int m = g * kGroup; m < (g + 1) * kGroup; ++m)
        recvs.push_back(c.recvAsync(&in[m], 1, DataType::Int32, from, 9));
      for (int m = g * kGroup; m < (g + 1) * kGroup; ++m) {
        out[m] = me * 1000 + m;
        if (m % 3 == 0)
          c.send(&out[m], 1, DataType::Int32, to, 9);
        else
          sends.push_back(c.sendAsync(&out[m], 1, DataType::Int32, to, 9));
      }
      if (g % 2 == 0) {
        c.allreduce(&sums[g], &sums[g], 1, DataType::Int32, ReduceOp::Sum);
      } else {
        // Async: the next group's send/recv queue behind it.
        collectives.push_back(
            c.allreduceAsync(&sums[g], &sums[g], 1, DataType::Int32, ReduceOp::Sum));
      }
    }
    for (auto& w : collectives) w.wait();
    for (int m = kMessages - 1; m >= 0; --m) recvs[static_cast<std::size_t>(m)].wait();
    for (auto& w : sends) w.wait();
    for (int m = 0; m < kMessages; ++m) EXPECT_EQ(in[m], from * 1000 + m) << "message " << m;
    for (int g = 0; g < kGroups; ++g) EXPECT_EQ(sums[g], n) << "group " << g;
  });
}

// A blocking send/recv holds up nothing once posted: a blocking send from another thread of the
// same rank goes out while a blocking recv waits, which the peer needs before it sends. (Were
// the recv to hold up the send, both ranks would wait forever.)
TEST(P2PThreads, BlockingRecvDoesNotHoldUpAnotherThreadsSend) {
  for (std::size_t count : {std::size_t{3}, std::size_t{100000}}) {
    runThreads(2, testOptions(), [count](Comm& c) {
      std::vector<float> in(count, -1.0f), out(count, static_cast<float>(c.rank() + 1));
      if (c.rank() == 0) {
        std::string recvError;
        std::thread receiver([&] {
          recvError = errorOf([&] { c.recv(in.data(), count, DataType::Float32, 1, 1); });
        });
        std::this_thread::sleep_for(100ms);  // the recv waits by now
        const std::string sendError =
            errorOf([&] { c.send(out.data(), count, DataType::Float32, 1, 2); });
        receiver.join();
        ASSERT_EQ(sendError, "");
        ASSERT_EQ(recvError, "");
      } else {
        c.recv(in.data(), count, DataType::Float32, 0, 2);
        c.send(out.data(), count, DataType::Float32, 0, 1);
      }
      for (float v : in) ASSERT_EQ(v, static_cast<float>(2 - c.rank()));
    });
  }
}

// Several threads wait on the same Work at once (bounded and unbounded): all see it finish.
TEST(P2PThreads, SeveralThreadsWaitOnOneWork) {
  runThreads(2, testOptions(), [](Comm& c) {
    std::vector<std::int32_t> buf(300, c.rank() == 1 ? 42 : 0);
    if (c.rank() == 0) {
      Work w = c.recvAsync(buf.data(), buf.size(), DataType::Int32, 1, 3);
      std::atomic<int> finished{0};
      std::vector<std::thread> waiters;
      for (int k = 0; k < 4; ++k)
        waiters.emplace_back([&, k] {
          const std::string error = errorOf([&] {
            if (k % 2 == 0) {
              w.wait();
            } else {
              while (!w.wait(1ms)) {
              }
            }
          });
          EXPECT_EQ(error, "");
          ++finished;
        });
      for (auto& t : waiters) t.join();
      EXPECT_EQ(finished.load(), 4);
      for (std::int32_t v : buf) ASSERT_EQ(v, 42);
    } else {
      std::this_thread::sleep_for(200ms);  // the waiters wait first
      c.send(buf.data(), buf.size(), DataType::Int32, 0, 3);
    }
    c.barrier();
  });
}

// A receive nobody sends to fails at its operation timeout, whichever way it is waited for.
TEST(P2PThreads, TimeoutOfAnAsyncRecvNamesThePeer) {
  for (int how = 0; how < 3; ++how) {
    runThreads(2, testOptions(), [how](Comm& c) {
      std::vector<float> buf(4);
      if (c.rank() == 0) {
        ScopedOpTimeout bound(c, 300ms);
        Work w = c.recvAsync(buf.data(), 4, DataType::Float32, 1, 5);
        const auto t0 = std::chrono::steady_clock::now();
        std::string message;
        ErrorCode code = codeOf(
            [&] {
              if (how == 0) w.wait();
              if (how == 1)
                while (!w.wait(20ms)) {
                }
              if (how == 2) {
                while (!w.test()) std::this_thread::sleep_for(1ms);
                w.wait();
              }
            },
            message);
        EXPECT_EQ(code, ErrorCode::Timeout) << message;
        EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
        EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
        // The communicator is failed afterwards.
        EXPECT_NE(errorOf([&] { c.barrier(); }), "");
      } else {
        std::this_thread::sleep_for(1500ms);  // alive but silent
      }
    });
  }
}

// abort() from another thread ends a thread waiting on an async recv, a thread in a blocking
// recv, and a Work nobody waits for (a send bigger than the shared-memory ring, 512 KiB by
// default, so that it cannot complete without its receiver, whichever path it takes).
TEST(P2PThreads, AbortWhileThreadsWaitOnSendRecv) {
  runThreads(2, testOptions(), [](Comm& c) {
    if (c.rank() == 0) {
      std::vector<float> a(16), b(16), d(std::size_t{1} << 20);
      Work waited = c.recvAsync(a.data(), a.size(), DataType::Float32, 1, 1);
      Work polled = c.recvAsync(b.data(), b.size(), DataType::Float32, 1, 2);
      Work unwatched = c.sendAsync(d.data(), d.size(), DataType::Float32, 1, 3);
      std::string waitedError, blockingError;
      std::thread waiter([&] { waitedError = errorOf([&] { waited.wait(); }); });
      std::string boundedError;
      std::thread bounded([&] {
        boundedError = errorOf([&] {
          while (!polled.wait(5ms)) {
          }
        });
      });
      std::this_thread::sleep_for(200ms);
      const auto t0 = std::chrono::steady_clock::now();
      c.abort();
      waiter.join();
      bounded.join();
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
      EXPECT_NE(waitedError.find("abort"), std::string::npos) << waitedError;
      EXPECT_NE(boundedError.find("abort"), std::string::npos) << boundedError;
      EXPECT_TRUE(unwatched.test());  // finished (failed) by the abort, without a wait
      std::string message;
      EXPECT_EQ(codeOf([&] { polled.wait(); }, message), ErrorCode::Aborted) << message;
      EXPECT_EQ(codeOf([&] { unwatched.wait(); }, message), ErrorCode::Aborted) << message;
      EXPECT_EQ(codeOf([&] { c.recv(a.data(), 1, DataType::Float32, 1); }, message),
                ErrorCode::Aborted)
          << message;
    } else {
      std::this_thread::sleep_for(800ms);  // stay connected, never send
    }
  });
}

TEST(P2PThreads, AbortEndsABlockingRecvInAnotherThread) {
  runThreads(2, testOptions(), [](Comm& c) {
    if (c.rank() == 0) {
      std::vector<float> a(16);
      std::string message;
      ErrorCode code = ErrorCode::Internal;
      std::thread receiver([&] {
        code = codeOf([&] { c.recv(a.data(), a.size(), DataType::Float32, 1); }, message);
      });
      std::this_thread::sleep_for(200ms);
      c.abort();
      receiver.join();
      EXPECT_EQ(code, ErrorCode::Aborted) << message;
    } else {
      std::this_thread::sleep_for(800ms);
    }
  });
}

// A peer whose process ends while this rank waits on a receive from it: PeerLost naming it.
void lostPeer(const Options& o) {
  runProcesses(
      2, o,
      [](Comm& c) {
        std::vector<float> buf(1000, 1.0f);
        if (c.rank() == 0) {
          Work first = c.recvAsync(buf.data(), buf.size(), DataType::Float32, 1, 1);
          Work second = c.recvAsync(buf.data(), buf.size(), DataType::Float32, 1, 2);
          first.wait();  // delivered
          std::string message;
          EXPECT_EQ(codeOf([&] { second.wait(); }, message), ErrorCode::PeerLost) << message;
          EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
        } else {
          c.send(buf.data(), buf.size(), DataType::Float32, 0, 1);
          std::this_thread::sleep_for(300ms);
          std::fflush(stdout);
          _exit(0);  // gone without a word, like a crash
        }
      },
      120s);
}

TEST(P2PProcesses, LostPeerDuringAnAsyncRecvOverSharedMemory) {
  lostPeer(testOptions());
}

TEST(P2PProcesses, LostPeerDuringAnAsyncRecvOverTcp) {
  Options o = testOptions();
  o.shmDisable = true;
  lostPeer(o);
}

// A peer that destroys its communicator while this rank's thread waits on a receive from it.
TEST(P2PThreads, PeerClosingDuringAnAsyncRecv) {
  runThreads(2, testOptions(), [](Comm& c) {
    std::vector<float> buf(8);
    c.barrier();  // both set up
    if (c.rank() == 0) {
      Work w = c.recvAsync(buf.data(), buf.size(), DataType::Float32, 1);
      std::string message;
      EXPECT_EQ(codeOf([&] { w.wait(); }, message), ErrorCode::PeerLost) << message;
    }
    // rank 1 returns at once: its communicator is destroyed
  });
}

// Destroying a communicator while another thread waits on its send/recv ends that wait with
// Error(Aborted); a Work that outlives its communicator still answers.
TEST(P2PThreads, DestroyWhileAThreadWaitsAndWorkOutlivesTheCommunicator) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::thread> ranks;
  std::string waitedError, laterError;
  bool laterTest = false;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto comm = Comm::create(store, r, 2, testOptions());
      std::vector<float> buf(8);
      if (r == 0) {
        Work waited = comm->recvAsync(buf.data(), buf.size(), DataType::Float32, 1, 1);
        Work later = comm->recvAsync(buf.data(), buf.size(), DataType::Float32, 1, 2);
        std::thread waiter([&] { waitedError = errorOf([&] { waited.wait(); }); });
        std::this_thread::sleep_for(200ms);
        comm.reset();
        waiter.join();
        laterTest = later.test();
        laterError = errorOf([&] { later.wait(); });
      } else {
        std::this_thread::sleep_for(600ms);
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_NE(waitedError, "");
  EXPECT_TRUE(laterTest);
  EXPECT_NE(laterError.find("destroyed"), std::string::npos) << laterError;
}

}  // namespace
}  // namespace braid::test
