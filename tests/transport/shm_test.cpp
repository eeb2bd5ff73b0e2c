// The shared-memory transport's data path (its setup: shm_setup_test.cpp): ranks are threads in
// this process, each with its own transport (its own mapping of the segment), meeting through a
// MemoryStore. Both data paths run: the ring (cmaThresholdBytes = SIZE_MAX) and single-copy reads
// (cmaThresholdBytes = 0). Every wait has a deadline, so a broken transport fails a test instead of
// hanging it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/machine.hpp"
#include "harness/shm_ranks.hpp"
#include "harness/transport_ranks.hpp"
#include "store/memory_store.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr double kSlowdown = 10;  // sanitizers slow everything down: keep speed checks meaningful
#else
constexpr double kSlowdown = 1;
#endif

Deadline after(Clock::duration d) {
  return Clock::now() + d;
}

using Path = test::ShmPath;
using test::allRanks;
using test::braidShmEntries;

ShmOptions optionsFor(Path path) {
  return test::shmOptionsFor(path);
}

std::string name(Path p) {
  return p == Path::Ring ? "ring" : p == Path::SingleCopy ? "single-copy" : "default";
}

using test::Bytes;
using test::cmaUnavailableReason;
using test::codeOf;
using test::errorOf;
using test::exchangeAll;
using test::firstWrong;
using test::makePayload;
using test::pattern;
using test::TwoCpus;

// Runs body(rank, transport) on `size` threads, each with its own transport over all ranks.
void runRanks(int size, const std::function<void(int, ShmTransport&)>& body,
              const ShmOptions& options = optionsFor(Path::Default)) {
  test::runShmRanks(size, body, options);
}

class ShmPaths : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (GetParam() != Path::SingleCopy) return;
    const std::string why = cmaUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(ShmPaths, PairSizes) {
  runRanks(
      2,
      [](int rank, ShmTransport& t) {
        const int peer = 1 - rank;
        EXPECT_EQ(t.pathTo(peer), GetParam() == Path::Ring ? "shm" : "shm+cma");
        std::uint64_t tag = 100;
        for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{7},
                                  std::size_t{64 << 10}, std::size_t{8 << 20}}) {
          // Ping from 0 to 1, then pong back: "recv posted first" and "data first" both run.
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
      },
      optionsFor(GetParam()));
}

TEST_P(ShmPaths, BothDirectionsAtOnce) {
  // Both ranks post a large send and a receive, then wait on the send first: with the ring, the
  // send does not fit, so waiting on it must also drain the data coming the other way.
  runRanks(
      2,
      [](int rank, ShmTransport& t) {
        const int peer = 1 - rank;
        for (std::size_t bytes : {std::size_t{100}, std::size_t{3 << 20} + 5}) {
          Bytes out = makePayload(rank, peer, bytes), in(bytes);
          Request send, recv;
          t.postSend(peer, out.data(), bytes, 3, send);
          t.postRecv(peer, in.data(), bytes, 3, recv);
          t.wait(send, after(20s));
          t.wait(recv, after(20s));
          EXPECT_EQ(firstWrong(in, peer, rank), -1) << bytes;
        }
      },
      optionsFor(GetParam()));
}

TEST_P(ShmPaths, ThousandMessagesInOrder) {
  constexpr int kCount = 1000;
  // Mostly small, every 100th large enough for the single-copy path.
  auto sizeOf = [](int i) {
    return i % 100 == 99 ? std::size_t{200000} : static_cast<std::size_t>((i * 37) % 300);
  };
  runRanks(
      2,
      [&](int rank, ShmTransport& t) {
        std::vector<Request> reqs(kCount);
        std::vector<Bytes> bufs(kCount);
        if (rank == 1) {
          for (int i = 0; i < kCount; ++i) {
            bufs[static_cast<std::size_t>(i)] = makePayload(i, 1, sizeOf(i));
            t.postSend(0, bufs[static_cast<std::size_t>(i)].data(), sizeOf(i),
                       static_cast<std::uint64_t>(1000 + i), reqs[static_cast<std::size_t>(i)]);
          }
        } else {
          std::this_thread::sleep_for(20ms);  // let data arrive before the receives are posted
          for (int i = 0; i < kCount; ++i) {
            bufs[static_cast<std::size_t>(i)].resize(sizeOf(i));
            t.postRecv(1, bufs[static_cast<std::size_t>(i)].data(), sizeOf(i),
                       static_cast<std::uint64_t>(1000 + i), reqs[static_cast<std::size_t>(i)]);
          }
        }
        const Deadline deadline = after(20s);
        for (int i = 0; i < kCount; ++i) {
          t.wait(reqs[static_cast<std::size_t>(i)], deadline);
          if (rank == 0) {
            EXPECT_EQ(firstWrong(bufs[static_cast<std::size_t>(i)], i, 1), -1) << "message " << i;
          }
        }
      },
      optionsFor(GetParam()));
}

TEST_P(ShmPaths, PointToPointArrivesBeforeItsReceive) {
  // P2P messages are held aside until their receive is posted; receives are posted in the
  // reverse order of the sends, so each one is matched by tag, not by position. The large ones
  // together exceed the ring, so rank 1's sends complete only because rank 0, polling, moves
  // them aside.
  constexpr int kCount = 6;
  auto sizeOf = [](int i) { return i % 2 == 0 ? std::size_t{10} + i : std::size_t{300000}; };
  auto tagOf = [](int i) { return kP2PTagBit | static_cast<std::uint64_t>(i); };
  std::atomic<bool> sendsDone{false};
  runRanks(
      2,
      [&](int rank, ShmTransport& t) {
        std::vector<Request> reqs(kCount);
        std::vector<Bytes> bufs(kCount);
        if (rank == 1) {
          for (int i = 0; i < kCount; ++i) {
            bufs[static_cast<std::size_t>(i)] = makePayload(i, 7, sizeOf(i));
            t.postSend(0, bufs[static_cast<std::size_t>(i)].data(), sizeOf(i), tagOf(i),
                       reqs[static_cast<std::size_t>(i)]);
          }
          for (int i = 0; i < kCount; ++i) t.wait(reqs[static_cast<std::size_t>(i)], after(20s));
          sendsDone = true;
          std::uint8_t one = 1;
          Request last;
          t.postSend(0, &one, 1, tagOf(999), last);
          t.wait(last, after(20s));
          return;
        }
        std::uint8_t one = 0;
        Request last;
        t.postRecv(1, &one, 1, tagOf(999), last);
        const Deadline deadline = after(20s);
        while (!sendsDone && Clock::now() < deadline) {
          // The last message may complete between the flag check and test(): only then is the
          // sender necessarily done with the earlier ones.
          if (t.test(last)) {
            EXPECT_TRUE(sendsDone.load());
            break;
          }
          std::this_thread::sleep_for(1ms);
        }
        ASSERT_TRUE(sendsDone.load());
        for (int i = kCount - 1; i >= 0; --i) {
          bufs[static_cast<std::size_t>(i)].resize(sizeOf(i));
          t.postRecv(1, bufs[static_cast<std::size_t>(i)].data(), sizeOf(i), tagOf(i),
                     reqs[static_cast<std::size_t>(i)]);
          t.wait(reqs[static_cast<std::size_t>(i)], after(20s));
          EXPECT_EQ(firstWrong(bufs[static_cast<std::size_t>(i)], i, 7), -1) << "message " << i;
        }
        t.wait(last, after(20s));
        EXPECT_EQ(one, 1);
      },
      optionsFor(GetParam()));
}

TEST(ShmTransport, PointToPointReceivePostedMidMessage) {
  // A P2P message 12 times the ring starts arriving into a held buffer (rank 0 polls with
  // nothing posted for it); the receive posted half-way takes over and gets every byte.
  ShmOptions o = optionsFor(Path::Ring);
  o.slots = 2;
  o.slotBytes = 4096;
  std::latch done(2);
  runRanks(
      2,
      [&](int rank, ShmTransport& t) {
        const std::size_t bytes = 100000;
        const std::uint64_t tag = kP2PTagBit | 77;
        Request req;
        if (rank == 1) {
          // Not waiting: only the background thread refills the ring, one ring per wake-up.
          Bytes out = makePayload(1, 0, bytes);
          t.postSend(0, out.data(), bytes, tag, req);
          std::this_thread::sleep_for(300ms);
          t.wait(req, after(20s));
          done.arrive_and_wait();
          return;
        }
        std::uint8_t other = 0;
        Request poll;
        t.postRecv(1, &other, 1, kP2PTagBit | 78, poll);
        std::this_thread::sleep_for(20ms);
        for (int i = 0; i < 3; ++i) {  // each poll moves about a ring's worth aside
          EXPECT_FALSE(t.test(poll));
          std::this_thread::sleep_for(2ms);
        }
        Bytes in(bytes);
        t.postRecv(1, in.data(), bytes, tag, req);
        t.wait(req, after(20s));
        EXPECT_EQ(firstWrong(in, 1, 0), -1);
        t.abort("done");
        std::string message;
        EXPECT_EQ(codeOf([&] { t.wait(poll, after(5s)); }, message), ErrorCode::Aborted);
        done.arrive_and_wait();
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Paths, ShmPaths, ::testing::Values(Path::Ring, Path::SingleCopy),
                         [](const auto& info) {
                           return info.param == Path::Ring ? std::string("Ring")
                                                           : std::string("SingleCopy");
                         });

TEST(ShmTransport, MismatchTellsThePeer) {
  // The rank that detects the mismatch closes the pair; the other side's next receive from it
  // fails with PeerLost instead of waiting for its deadline.
  runRanks(2, [&](int rank, ShmTransport& t) {
    Bytes buf(64);
    Request req;
    std::string message;
    if (rank == 1) {
      t.postSend(0, buf.data(), 8, 5, req);
      t.wait(req, after(5s));
      t.postRecv(0, buf.data(), 8, 9, req);
      const auto start = Clock::now();
      EXPECT_EQ(codeOf([&] { t.wait(req, after(10s)); }, message), ErrorCode::PeerLost);
      EXPECT_LT(Clock::now() - start, 2s);
      EXPECT_NE(message.find("rank 1 lost rank 0 (pid "), std::string::npos) << message;
    } else {
      t.postRecv(1, buf.data(), 8, 6, req);
      EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::Mismatch);
    }
  });
}

// A timeout says what holds the receive up (tests/harness/transport_ranks.hpp).
TEST(ShmTransport, TimeoutSaysWhatHoldsTheReceiveUp) {
  test::checkTimeoutSaysWhatHoldsTheReceiveUp(
      [](const auto& body) { runRanks(2, body); }, "(pid ",
      "nothing from rank 1 waits in the ring (it has not sent it)", " in the ring");
}

TEST(ShmTransport, AbortWakesEveryWaiter) {
  std::latch done(3);
  runRanks(3, [&](int rank, ShmTransport& t) {
    if (rank == 2) {
      done.arrive_and_wait();  // stays up, silent
      return;
    }
    if (rank == 0) {
      // Two threads of rank 0 sleep on different receives; abort from a third ends both.
      Bytes a(16), b(16);
      Request ra, rb;
      t.postRecv(1, a.data(), a.size(), 7, ra);
      t.postRecv(2, b.data(), b.size(), 7, rb);
      std::string messageA, messageB;
      ErrorCode codeA = ErrorCode::Internal;
      std::thread other([&] { codeA = codeOf([&] { t.wait(ra, after(10s)); }, messageA); });
      std::thread aborter([&] {
        std::this_thread::sleep_for(200ms);
        t.abort("test abort");
      });
      const auto start = Clock::now();
      EXPECT_EQ(codeOf([&] { t.wait(rb, after(10s)); }, messageB), ErrorCode::Aborted);
      other.join();
      aborter.join();
      EXPECT_LT(Clock::now() - start, 1s);
      EXPECT_EQ(codeA, ErrorCode::Aborted);
      EXPECT_NE(messageA.find("test abort"), std::string::npos) << messageA;
      EXPECT_NE(messageB.find("test abort"), std::string::npos) << messageB;
    } else {
      // Rank 1 waits on rank 0, which aborts: it sees PeerLost promptly.
      Bytes buf(16);
      Request req;
      t.postRecv(0, buf.data(), buf.size(), 9, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(10s)); }, message), ErrorCode::PeerLost);
      EXPECT_NE(message.find("rank 1 lost rank 0 (pid "), std::string::npos) << message;
    }
    done.arrive_and_wait();
  });
}

TEST(ShmTransport, PeerDestroyedMidWaitIsPeerLost) {
  std::atomic<long long> destroyedAtNs{0};
  runRanks(3, [&](int rank, ShmTransport& t) {
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
    EXPECT_NE(message.find("rank " + std::to_string(rank) + " lost rank 1 (pid "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("during recv of 1024 bytes"), std::string::npos) << message;
    EXPECT_LT(std::chrono::nanoseconds(noticed - destroyedAtNs.load()), 1s);
    Request later;
    t.postSend(1, buf.data(), 1, 8, later);
    EXPECT_EQ(codeOf([&] { t.wait(later, after(5s)); }, message), ErrorCode::PeerLost);
  });
}

TEST(ShmTransport, DataSentBeforeThePeerLeftCanStillBeReceived) {
  std::latch sent(2);
  runRanks(
      2,
      [&](int rank, ShmTransport& t) {
        Bytes buf = makePayload(1, 0, 1000);
        Request req;
        if (rank == 1) {
          t.postSend(0, buf.data(), buf.size(), 4, req);
          t.wait(req, after(5s));
          sent.arrive_and_wait();
          return;  // destroyed with the message still in the ring
        }
        sent.arrive_and_wait();
        std::this_thread::sleep_for(100ms);
        Bytes in(1000);
        t.postRecv(1, in.data(), in.size(), 4, req);
        t.wait(req, after(5s));
        EXPECT_EQ(firstWrong(in, 1, 0), -1);
        t.postRecv(1, in.data(), in.size(), 5, req);
        std::string message;
        EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::PeerLost);
      },
      optionsFor(Path::Ring));
}

TEST(ShmTransport, BackgroundThreadMovesDataNobodyWaitsFor) {
  // Rank 0 posts a send four times the ring and then does something else for a while; rank 1's
  // receive completes meanwhile, because rank 0's background thread keeps filling the ring.
  ShmOptions o = optionsFor(Path::Ring);
  o.slots = 4;
  o.slotBytes = 16 << 10;
  runRanks(
      2,
      [&](int rank, ShmTransport& t) {
        const std::size_t bytes = 256 << 10;
        Bytes buf = rank == 0 ? makePayload(0, 1, bytes) : Bytes(bytes);
        Request req;
        if (rank == 0) {
          t.postSend(1, buf.data(), bytes, 4, req);
          std::this_thread::sleep_for(1500ms);
          EXPECT_TRUE(t.test(req));
          t.wait(req, after(5s));
        } else {
          const auto start = Clock::now();
          t.postRecv(0, buf.data(), bytes, 4, req);
          t.wait(req, after(10s));
          EXPECT_LT(Clock::now() - start, 1s);
          EXPECT_EQ(firstWrong(buf, 0, 1), -1);
        }
      },
      o);
}

TEST(ShmTransport, AttendedRequestsAreLeftToTheirWaitsWithoutACpuToSpare) {
  // As over TCP (TcpTransport.AttendedRequestsAre...): a send the poster is about to wait for
  // (Request::attended) moves in its waits; the background thread fills the ring for it while
  // nobody waits only with ShmOptions::backgroundAttended. Rank 1 starts reading only once rank
  // 0's post has returned (a post keeps writing while the reader drains the ring, so a reader
  // already running would take the whole message within the post).
  for (bool spare : {false, true}) {
    SCOPED_TRACE(spare ? "backgroundAttended" : "attended left to the waits");
    ShmOptions o = optionsFor(Path::Ring);
    o.slots = 4;
    o.slotBytes = 16 << 10;
    o.backgroundAttended = spare;
    test::Rendezvous posted(2);
    runRanks(
        2,
        [&](int rank, ShmTransport& t) {
          const std::size_t bytes = 256 << 10;  // four times the ring
          Bytes buf = rank == 0 ? makePayload(0, 1, bytes) : Bytes(bytes);
          Request req;
          req.attended = true;
          if (rank == 0) {
            t.postSend(1, buf.data(), bytes, 4, req);
            posted.arriveAndWait();
            std::this_thread::sleep_for(1500ms);
            EXPECT_EQ(req.done(), spare);
            t.wait(req, after(5s));
          } else {
            posted.arriveAndWait();
            t.postRecv(0, buf.data(), bytes, 4, req);
            t.wait(req, after(10s));
            EXPECT_EQ(firstWrong(buf, 0, 1), -1);
          }
        },
        o);
  }
}

TEST(ShmTransport, EightRanksOversubscribedAllToAll) {
  // 8 ranks on 2 CPUs (on every machine): waits must yield and sleep, never spin the peers out.
  TwoCpus pin;
  for (Path path : {Path::Ring, Path::SingleCopy}) {
    SCOPED_TRACE(name(path));
    const auto start = Clock::now();
    runRanks(
        8,
        [](int rank, ShmTransport& t) {
          std::uint64_t tag = 1;
          for (int round = 0; round < 20; ++round)
            for (std::size_t bytes :
                 {std::size_t{0}, std::size_t{8}, std::size_t{1000}, std::size_t{100000}})
              exchangeAll(rank, t, bytes, tag++);
        },
        optionsFor(path));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::printf("[ shm      ] 8 ranks, 80 all-to-all rounds (%s): %.1f ms\n", name(path).c_str(),
                ms);
    EXPECT_LT(ms, 15000.0 * kSlowdown);
  }
}

TEST(ShmTransport, RejectsPeersOffThisHost) {
  runRanks(1, [](int, ShmTransport& t) {
    Bytes buf(4);
    Request req;
    std::string message;
    EXPECT_EQ(codeOf([&] { t.postSend(0, buf.data(), 4, 1, req); }, message),
              ErrorCode::InvalidArgument);
  });
  // Ranks 0 and 2 of a world of 3 share a host; rank 1 is elsewhere.
  MemoryStore store;
  const std::vector<int> local{0, 2};
  std::vector<std::string> errors(2);
  std::thread other([&] {
    errors[1] = errorOf([&] {
      auto t = createShmTransport(store, 2, 3, local, optionsFor(Path::Ring));
      Bytes buf(4);
      Request req;
      std::string message;
      EXPECT_EQ(codeOf([&] { t->postSend(1, buf.data(), 4, 1, req); }, message),
                ErrorCode::InvalidArgument);
      EXPECT_EQ(t->pathTo(1), "");
      EXPECT_EQ(t->pathTo(0), "shm");
      t->postRecv(0, buf.data(), 4, 1, req);
      t->wait(req, after(5s));
    });
  });
  errors[0] = errorOf([&] {
    auto t = createShmTransport(store, 0, 3, local, optionsFor(Path::Ring));
    Bytes buf(4, 1);
    Request req;
    t->postSend(2, buf.data(), 4, 1, req);
    t->wait(req, after(5s));
  });
  other.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(ShmTransport, PingPongLatencyThreads) {
  runRanks(
      2,
      [](int rank, ShmTransport& t) {
        const int peer = 1 - rank;
        std::uint64_t value = 0;
        Request req;
        constexpr int kIters = 20000;
        const auto start = Clock::now();
        for (int i = 0; i < kIters; ++i) {
          if (rank == 0) {
            t.postSend(peer, &value, 8, 1, req);
            t.wait(req, after(10s));
            t.postRecv(peer, &value, 8, 1, req);
            t.wait(req, after(10s));
          } else {
            t.postRecv(peer, &value, 8, 1, req);
            t.wait(req, after(10s));
            t.postSend(peer, &value, 8, 1, req);
            t.wait(req, after(10s));
          }
        }
        const double us =
            std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kIters;
        if (rank == 0)
          std::printf(
              "[ shm      ] 8-byte ping-pong, threads: %.2f us round trip, %.2f us one way\n", us,
              us / 2);
      },
      optionsFor(Path::Ring));
}

}  // namespace
}  // namespace braid::transport
