// The UCX transport (src/transport/ucx, docs/ucx.md) under UCX_TLS=tcp and UCX_TLS=sm,cma (each
// test sets UCX_TLS itself before creating a transport; UCX reads it in ucp_config_read):
// ranks as threads for the transport's rules (sizes, held point-to-point messages, mismatch,
// timeout, abort, a peer that closes, bad input, authentication), and ranks as processes for
// every algorithm of the registry with checked results at 1-5 ranks and for a killed peer.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <latch>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algo/algorithm.hpp"
#include "harness/errors.hpp"
#include "harness/store_process.hpp"
#include "harness/transport_ranks.hpp"
#include "harness/ucx_env.hpp"
#include "store/memory_store.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;
using test::Bytes;

#ifdef BRAID_HAVE_UCX

using test::useUcxTls;

UcxOptions quick(std::chrono::milliseconds connect = 20000ms) {
  UcxOptions o;
  o.connectTimeout = connect;
  o.spin = 20us;
  return o;
}

class UcxThreads : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { useUcxTls(GetParam()); }
  void run(int size, const std::function<void(int, Transport&)>& body,
           const UcxOptions& options = quick()) {
    test::runTransportRanks(
        size, [&](Store& s, int r) { return createUcxTransport(s, r, size, options); }, body);
  }
};

TEST_P(UcxThreads, EveryRankExchangesWithEveryOtherAtEverySize) {
  for (int size : {2, 3, 4}) {
    run(size, [](int rank, Transport& t) {
      std::uint64_t tag = 100;
      // Around the 8 KiB inline bound, and large enough for UCX's rendezvous.
      for (std::size_t bytes : {0ul, 1ul, 13ul, 8191ul, 8192ul, 8193ul, 100003ul, 4ul << 20})
        test::exchangeAll(rank, t, bytes, tag++);
    });
  }
}

TEST_P(UcxThreads, ManyMessagesOfOnePairArriveInOrder) {
  run(2, [](int rank, Transport& t) {
    constexpr int kCount = 200;
    std::vector<Bytes> bufs(kCount);
    std::vector<Request> reqs(kCount);
    for (int i = 0; i < kCount; ++i) {
      const std::size_t bytes = (i % 3 == 0) ? 20000 + i : 10 + i;  // inline and separate
      if (rank == 0) {
        bufs[i] = test::makePayload(0, 1, bytes, i);
        t.postSend(1, bufs[i].data(), bytes, 7, reqs[i]);
      } else {
        bufs[i].assign(bytes, 0);
        t.postRecv(0, bufs[i].data(), bytes, 7, reqs[i]);
      }
    }
    for (int i = 0; i < kCount; ++i) {
      t.wait(reqs[i], Clock::now() + 20s);
      if (rank == 1) {
        EXPECT_EQ(test::firstWrong(bufs[i], 0, 1, i), -1) << "message " << i;
      }
    }
  });
}

TEST_P(UcxThreads, PointToPointMessagesWaitForTheirReceiveByTag) {
  run(2, [](int rank, Transport& t) {
    const std::uint64_t a = kP2PTagBit | 9, b = kP2PTagBit | 10;
    for (std::size_t bytes : {12ul, 50000ul}) {
      if (rank == 1) {
        Bytes x = test::makePayload(1, 0, bytes, 1), y = test::makePayload(1, 0, bytes, 2);
        Request r1, r2;
        t.postSend(0, x.data(), bytes, a, r1);
        t.postSend(0, y.data(), bytes, b, r2);
        t.wait(r1, Clock::now() + 10s);
        t.wait(r2, Clock::now() + 10s);
      } else {
        std::this_thread::sleep_for(50ms);  // both arrive before any receive is posted
        Bytes x(bytes), y(bytes);
        Request r1, r2;
        t.postRecv(1, y.data(), bytes, b, r2);  // the later tag first
        t.wait(r2, Clock::now() + 10s);
        t.postRecv(1, x.data(), bytes, a, r1);
        t.wait(r1, Clock::now() + 10s);
        EXPECT_EQ(test::firstWrong(x, 1, 0, 1), -1);
        EXPECT_EQ(test::firstWrong(y, 1, 0, 2), -1);
      }
    }
  });
}

// Rank 1 sends (tag, bytes); rank 0 receives expecting (5, 64): the error rank 0 gets.
Error mismatchOf(UcxThreads& self, std::uint64_t tag, std::size_t bytes) {
  std::string got;
  ErrorCode code = ErrorCode::Internal;
  std::vector<std::uint64_t> seen;
  test::runTransportRanks(
      2, [](Store& s, int r) { return createUcxTransport(s, r, 2, quick()); },
      [&](int rank, Transport& t) {
        if (rank == 1) {
          Bytes out(bytes, 3);
          Request req;
          t.postSend(0, out.data(), bytes, tag, req);
          try {
            t.wait(req, Clock::now() + 10s);
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
          }
          return;
        }
        t.setMismatchObserver([&](int, std::uint64_t e, std::uint64_t r) {
          seen.push_back(e);
          seen.push_back(r);
        });
        Bytes in(64, 0xAB);
        Request req;
        t.postRecv(1, in.data(), 64, 5, req);
        code = test::codeOf([&] { t.wait(req, Clock::now() + 10s); }, got);
        if (bytes > 8192) {
          EXPECT_EQ(in, Bytes(64, 0xAB)) << "a mismatched message must not reach the buffer";
        }
        // The link is failed afterwards.
        Request again;
        t.postRecv(1, in.data(), 64, 5, again);
        EXPECT_THROW(t.wait(again, Clock::now() + 1s), Error);
      });
  if (tag != 5) {
    EXPECT_EQ(seen, (std::vector<std::uint64_t>{5, tag}));
  }
  return Error(code, got);
}

TEST_P(UcxThreads, AnotherTagOrSizeFailsWithMismatch) {
  {
    const Error e = mismatchOf(*this, 6, 64);
    EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0 expected tag 5 (64 bytes) from rank 1 ("),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("but received tag 6 (64 bytes)"), std::string::npos)
        << e.what();
  }
  for (std::size_t bytes : {63ul, 65ul, 100000ul}) {
    const Error e = mismatchOf(*this, 5, bytes);
    EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
    EXPECT_NE(std::string(e.what()).find("but received tag 5 (" + std::to_string(bytes)),
              std::string::npos)
        << e.what();
  }
}

TEST_P(UcxThreads, TimeoutNamesThePeerAndWhatWaits) {
  run(2, [](int rank, Transport& t) {
    Bytes buf(16, 1);
    Request req;
    if (rank == 1) {
      t.postSend(0, buf.data(), 12, kP2PTagBit | 9, req);
      t.wait(req, Clock::now() + 5s);
      // Rank 0 fails its transport at the timeout: this rank sees PeerLost.
      Request r;
      t.postRecv(0, buf.data(), 4, 1, r);
      std::string msg;
      EXPECT_EQ(test::codeOf([&] { t.wait(r, Clock::now() + 10s); }, msg), ErrorCode::PeerLost)
          << msg;
      EXPECT_NE(msg.find("rank 1 lost rank 0 ("), std::string::npos) << msg;
      EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
      return;
    }
    t.postRecv(1, buf.data(), 16, kP2PTagBit | 10, req);
    std::string msg;
    const auto start = Clock::now();
    EXPECT_EQ(test::codeOf([&] { t.wait(req, Clock::now() + 300ms); }, msg), ErrorCode::Timeout);
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_NE(msg.find("rank 0 timed out waiting for a recv of 16 bytes from rank 1 ("),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("messages from rank 1 (host "), std::string::npos) << msg;
    EXPECT_NE(msg.find("that no receive has taken: tag " + std::to_string(kP2PTagBit | 9) +
                       " (12 bytes)"),
              std::string::npos)
        << msg;
    // The transport is failed: later requests fail with the same error.
    Request later;
    t.postSend(1, buf.data(), 4, 1, later);
    EXPECT_EQ(test::codeOf([&] { t.wait(later, Clock::now() + 1s); }, msg), ErrorCode::Timeout);
  });
}

TEST_P(UcxThreads, AbortFailsPendingRequestsFromAnotherThread) {
  run(2, [](int rank, Transport& t) {
    if (rank == 1) {
      std::this_thread::sleep_for(100ms);
      return;  // closing: rank 0 must not take this for the abort
    }
    Bytes big(1 << 20);
    Request req;
    t.postRecv(1, big.data(), big.size(), 3, req);
    std::thread aborter([&] {
      std::this_thread::sleep_for(30ms);
      t.abort("stopped by the test");
    });
    std::string msg;
    const ErrorCode code = test::codeOf([&] { t.wait(req, Clock::now() + 20s); }, msg);
    aborter.join();
    // Rank 1 may have closed first (PeerLost); an abort that came first is Aborted.
    EXPECT_TRUE(code == ErrorCode::Aborted || code == ErrorCode::PeerLost) << msg;
    Request later;
    t.postRecv(1, big.data(), 8, 3, later);
    EXPECT_THROW(t.wait(later, Clock::now() + 1s), Error);
  });
  // Without a peer that leaves: the abort itself.
  test::Rendezvous aborted(2);
  run(2, [&](int rank, Transport& t) {
    Bytes buf(64);
    if (rank == 0) {
      Request req;
      t.postRecv(1, buf.data(), buf.size(), 3, req);
      std::thread aborter([&] {
        std::this_thread::sleep_for(30ms);
        t.abort("stopped by the test");
      });
      std::string msg;
      EXPECT_EQ(test::codeOf([&] { t.wait(req, Clock::now() + 20s); }, msg), ErrorCode::Aborted)
          << msg;
      EXPECT_NE(msg.find("stopped by the test"), std::string::npos) << msg;
      aborter.join();
    } else {
      // The aborted rank's goodbye: this rank's receive fails with PeerLost.
      Request req;
      t.postRecv(0, buf.data(), buf.size(), 3, req);
      std::string msg;
      EXPECT_EQ(test::codeOf([&] { t.wait(req, Clock::now() + 20s); }, msg), ErrorCode::PeerLost)
          << msg;
      EXPECT_NE(msg.find("stopped by the test"), std::string::npos) << msg;
    }
    aborted.arriveAndWait();
  });
}

TEST_P(UcxThreads, APeerThatClosesFailsReceivesWithPeerLostAtOnce) {
  run(3, [](int rank, Transport& t) {
    Bytes buf(100);
    if (rank == 2) {
      // One message to each, then close.
      Request a, b;
      t.postSend(0, buf.data(), 100, 4, a);
      t.postSend(1, buf.data(), 100, 4, b);
      t.wait(a, Clock::now() + 10s);
      t.wait(b, Clock::now() + 10s);
      return;
    }
    Request first, second;
    t.postRecv(2, buf.data(), 100, 4, first);
    t.wait(first, Clock::now() + 10s);  // sent before the goodbye: delivered
    t.postRecv(2, buf.data(), 100, 4, second);
    std::string msg;
    const auto start = Clock::now();
    EXPECT_EQ(test::codeOf([&] { t.wait(second, Clock::now() + 20s); }, msg), ErrorCode::PeerLost)
        << msg;
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_NE(msg.find("lost rank 2 ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("closed its transport"), std::string::npos) << msg;
    // Ranks 0 and 1 still talk.
    Bytes mine = test::makePayload(rank, 1 - rank, 5000), theirs(5000);
    Request s, r;
    t.postRecv(1 - rank, theirs.data(), 5000, 9, r);
    t.postSend(1 - rank, mine.data(), 5000, 9, s);
    t.wait(s, Clock::now() + 10s);
    t.wait(r, Clock::now() + 10s);
    EXPECT_EQ(test::firstWrong(theirs, 1 - rank, rank), -1);
  });
}

// A rank that closes its transport right after its sends completed waits for its peer's UCX
// to have taken them (the peer acknowledges the goodbye) before it closes its endpoints: over
// UCX's tcp a send completes once its bytes are in the socket, and a socket closed with bytes
// still to read is reset, which drops what is still queued behind. Eager transports have no
// background thread, so rank 0, asleep outside braid, takes nothing until it calls in: rank
// 1's destruction lasts until then, and about 2 s (the wait's bound) when rank 0 stays away
// longer. Either way every message arrives. (UCX's tcp: its sends of a
// few inline messages complete without the receiver; its shared-memory FIFO holds fewer.)
TEST(UcxTcp, AClosingRankWaitsUntilItsPeerTookWhatItSent) {
  useUcxTls("tcp");
  constexpr int kMessages = 8;
  constexpr std::size_t kBytes = 8000;  // inline, 64 KB in all: fits the sockets' buffers
  for (const auto away : {600ms, 3000ms}) {
    SCOPED_TRACE("rank 0 away for " + std::to_string(away.count()) + " ms");
    MemoryStore store;
    std::unique_ptr<Transport> t[2];
    std::thread creators[2];
    for (int r = 0; r < 2; ++r)
      creators[r] = std::thread([&, r] { t[r] = createUcxTransport(store, r, 2, quick()); });
    for (auto& c : creators) c.join();
    Clock::duration closing{};
    Clock::time_point closed{}, calledIn{};
    std::string errors[2];
    std::thread ranks[2];
    ranks[1] = std::thread([&] {
      errors[1] = test::errorOf([&] {
        std::vector<Bytes> out(kMessages);
        std::vector<Request> sends(kMessages);
        for (int i = 0; i < kMessages; ++i) {
          out[i] = test::makePayload(1, 0, kBytes, static_cast<std::size_t>(i));
          t[1]->postSend(0, out[i].data(), kBytes, 7, sends[i]);
        }
        for (auto& s : sends) t[1]->wait(s, Clock::now() + 10s);
        const auto start = Clock::now();
        t[1].reset();
        closed = Clock::now();
        closing = closed - start;
      });
    });
    ranks[0] = std::thread([&] {
      errors[0] = test::errorOf([&] {
        std::this_thread::sleep_for(away);
        calledIn = Clock::now();
        std::vector<Bytes> in(kMessages, Bytes(kBytes));
        std::vector<Request> recvs(kMessages);
        for (int i = 0; i < kMessages; ++i) t[0]->postRecv(1, in[i].data(), kBytes, 7, recvs[i]);
        for (int i = 0; i < kMessages; ++i) {
          t[0]->wait(recvs[i], Clock::now() + 10s);
          EXPECT_EQ(test::firstWrong(in[i], 1, 0, static_cast<std::size_t>(i)), -1)
              << "message " << i;
        }
        t[0].reset();
      });
    });
    for (auto& r : ranks) r.join();
    EXPECT_EQ(errors[0], "") << "rank 0";
    EXPECT_EQ(errors[1], "") << "rank 1";
    // Rank 1 finished closing only once rank 0 called in, or after waiting its 2 s bound (the
    // order of events, not their speed: a loaded machine may delay either thread).
    EXPECT_TRUE(closed >= calledIn || closing >= 1900ms)
        << "rank 1 closed "
        << std::chrono::duration_cast<std::chrono::milliseconds>(calledIn - closed).count()
        << " ms before rank 0 called in, after waiting "
        << std::chrono::duration_cast<std::chrono::milliseconds>(closing).count() << " ms";
    EXPECT_LT(closing, 4500ms) << "rank 1 waited past its bounds";
  }
}

// The factory's two steps (openUcx, then createUcxTransport with every rank's entry), and an
// opened worker dropped without connecting (what the factory does with one it turns out not to
// need): it tears down without touching endpoints it never made.
TEST_P(UcxThreads, TwoStepSetupAndAnOpenedWorkerDroppedUnconnected) {
  { auto dropped = openUcx(0, 3, quick()); }
  constexpr int kSize = 3;
  std::unique_ptr<UcxListening> opened[kSize];
  std::vector<std::string> entries;
  for (int r = 0; r < kSize; ++r) {
    opened[r] = openUcx(r, kSize, quick());
    entries.push_back(opened[r]->entry());
    EXPECT_FALSE(entries.back().empty());
  }
  std::unique_ptr<Transport> t[kSize];
  std::thread ranks[kSize];
  for (int r = 0; r < kSize; ++r)
    ranks[r] = std::thread(
        [&, r] { t[r] = createUcxTransport(std::move(opened[r]), entries, r, kSize, quick()); });
  for (auto& th : ranks) th.join();
  for (int r = 0; r < kSize; ++r) ASSERT_TRUE(t[r]) << "rank " << r;
  for (int r = 0; r < kSize; ++r)
    ranks[r] = std::thread([&, r] {
      const int to = (r + 1) % kSize, from = (r + kSize - 1) % kSize;
      std::vector<std::uint8_t> out(3001, static_cast<std::uint8_t>(r)), in(3001);
      Request send, recv;
      t[r]->postRecv(from, in.data(), in.size(), 7, recv);
      t[r]->postSend(to, out.data(), out.size(), 7, send);
      t[r]->wait(recv, Clock::now() + 20s);
      t[r]->wait(send, Clock::now() + 20s);
      EXPECT_EQ(in, std::vector<std::uint8_t>(3001, static_cast<std::uint8_t>(from)));
    });
  for (auto& th : ranks) th.join();
  // A malformed entry is an error naming the rank that published it.
  auto lone = openUcx(0, 2, quick());
  std::string message;
  try {
    createUcxTransport(std::move(lone), {"00", "127.0.0.1:5"}, 0, 2, quick());
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("rank 1 published no UCX worker address"), std::string::npos) << message;
}

TEST_P(UcxThreads, BadInputIsAnError) {
  run(2, [](int rank, Transport& t) {
    Bytes buf(8);
    Request req;
    std::string msg;
    EXPECT_EQ(test::codeOf([&] { t.postSend(rank, buf.data(), 8, 1, req); }, msg),
              ErrorCode::InvalidArgument);
    EXPECT_NE(msg.find("postSend: rank " + std::to_string(rank) + " cannot address peer " +
                       std::to_string(rank)),
              std::string::npos)
        << msg;
    EXPECT_EQ(test::codeOf([&] { t.postRecv(5, buf.data(), 8, 1, req); }, msg),
              ErrorCode::InvalidArgument);
    EXPECT_EQ(test::codeOf([&] { t.postRecv(-1, buf.data(), 8, 1, req); }, msg),
              ErrorCode::InvalidArgument);
    EXPECT_EQ(test::codeOf([&] { t.postSend(1 - rank, nullptr, 8, 1, req); }, msg),
              ErrorCode::InvalidArgument);
    EXPECT_NE(msg.find("postSend: null buffer for 8 bytes"), std::string::npos) << msg;
    // Zero bytes from a null pointer is fine.
    Request ok, in;
    t.postRecv(1 - rank, nullptr, 0, 2, in);
    t.postSend(1 - rank, nullptr, 0, 2, ok);
    t.wait(ok, Clock::now() + 10s);
    t.wait(in, Clock::now() + 10s);
  });
  MemoryStore store;
  std::string msg;
  EXPECT_EQ(test::codeOf([&] { createUcxTransport(store, 2, 2, quick()); }, msg),
            ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("rank 2 is outside a world of size 2"), std::string::npos) << msg;
}

TEST_P(UcxThreads, ARankThatNeverComesIsNamedInATimeout) {
  MemoryStore store;
  std::string msg;
  const auto start = Clock::now();
  EXPECT_EQ(test::codeOf([&] { createUcxTransport(store, 0, 2, quick(400ms)); }, msg),
            ErrorCode::Timeout);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_NE(msg.find("waiting for rank 1 to publish its UCX address"), std::string::npos) << msg;
}

struct Outcome {
  std::string error;
  ErrorCode code = ErrorCode::Internal;
  Clock::duration took{};
};

std::vector<Outcome> withKeys(const std::vector<std::string>& keys,
                              std::chrono::milliseconds connect) {
  MemoryStore store;
  const int size = static_cast<int>(keys.size());
  std::vector<Outcome> out(keys.size());
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      UcxOptions o = quick(connect);
      o.security.authKey = keys[static_cast<std::size_t>(r)];
      try {
        auto t = createUcxTransport(store, r, size, o);
        test::exchangeAll(r, *t, 1000, 5, 10s);
      } catch (const Error& e) {
        out[static_cast<std::size_t>(r)].error = e.what();
        out[static_cast<std::size_t>(r)].code = e.code();
      }
      out[static_cast<std::size_t>(r)].took = Clock::now() - start;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST_P(UcxThreads, RanksWithTheSameKeyConnect) {
  const auto out = withKeys({"job-key", "job-key", "job-key", "job-key"}, 10000ms);
  for (std::size_t r = 0; r < out.size(); ++r) EXPECT_EQ(out[r].error, "") << "rank " << r;
}

TEST_P(UcxThreads, WrongKeyFailsWithAuthNamingThePeerAndOthersTimeOut) {
  testing::internal::CaptureStderr();
  const auto out = withKeys({"job-key", "job-key", "another-key"}, 1500ms);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out[2].code, ErrorCode::Auth) << out[2].error;
  // Rank 2 initiates with ranks 0 and 1 at once: whichever answers first is named.
  EXPECT_NE(out[2].error.find("rank 2 failed to authenticate with rank "), std::string::npos)
      << out[2].error;
  EXPECT_NE(out[2].error.find("keys differ"), std::string::npos) << out[2].error;
  EXPECT_LT(out[2].took, 1s) << "an auth failure is not retried";
  for (int r : {0, 1}) {
    const Outcome& o = out[static_cast<std::size_t>(r)];
    EXPECT_EQ(o.code, ErrorCode::Timeout) << o.error;
    EXPECT_NE(o.error.find("waiting for rank 2 to connect"), std::string::npos) << o.error;
    EXPECT_LT(o.took, 4s) << "rank " << r << " hung past the connect timeout";
  }
  for (int r : {0, 1})
    EXPECT_NE(out[static_cast<std::size_t>(r)].error.find("dropped meanwhile"), std::string::npos)
        << out[static_cast<std::size_t>(r)].error;
  EXPECT_NE(log.find("dropped connection from rank 2 (host "), std::string::npos) << log;
}

TEST_P(UcxThreads, KeyOnOneRankOnlyFailsAsAuth) {
  testing::internal::CaptureStderr();
  const auto out = withKeys({"job-key", ""}, 1000ms);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(out[1].code, ErrorCode::Auth) << out[1].error;
  EXPECT_NE(out[1].error.find("authentication required"), std::string::npos) << out[1].error;
  EXPECT_EQ(out[0].code, ErrorCode::Timeout) << out[0].error;
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxThreads, testing::Values("tcp", "sm,cma"), [](const auto& info) {
  return std::string(info.param) == "tcp" ? "tcp" : "sm_cma";
});

// ---- ranks as processes: every algorithm of the registry ----

// Runs body(rank, transport) in `size` forked processes joined through a TCP store; a rank
// that throws or reports a failure exits non-zero, and the test names it.
// `killed`: a rank that must die of SIGKILL (it kills itself).
void runUcxProcesses(int size, const std::function<std::string(int, Transport&)>& body,
                     std::chrono::seconds deadline = 180s, int killed = -1, bool lazy = false) {
  // The store runs in a process of its own: a store thread in this process could hold an
  // allocator lock at a fork and leave the rank deadlocked before it publishes its address.
  test::StoreProcess server;
  const std::uint16_t port = server.port();
  ASSERT_NE(port, 0) << "the store process did not start";
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        TcpStore store("127.0.0.1", port, 20000ms);
        UcxOptions o = quick();
        o.lazyConnect = lazy;
        auto t = createUcxTransport(store, r, size, o);
        const std::string report = body(r, *t);
        if (!report.empty()) {
          std::fprintf(stderr, "rank %d: %s\n", r, report.c_str());
          code = 2;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d threw: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  const auto end = Clock::now() + deadline;
  std::vector<int> status(static_cast<std::size_t>(size), -1);
  int remaining = size;
  while (remaining > 0 && Clock::now() < end) {
    for (int r = 0; r < size; ++r) {
      int st = 0;
      if (status[r] == -1 && ::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --remaining;
      }
    }
    if (remaining > 0) std::this_thread::sleep_for(5ms);
  }
  for (int r = 0; r < size; ++r) {
    if (status[r] == -1) {
      ::kill(pids[r], SIGKILL);
      ::waitpid(pids[r], nullptr, 0);
      ADD_FAILURE() << "rank " << r << " of " << size << " did not finish (killed)";
    } else if (r == killed) {
      EXPECT_TRUE(WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL) << status[r];
    } else if (!WIFEXITED(status[r]) || WEXITSTATUS(status[r]) != 0) {
      ADD_FAILURE() << "rank " << r << " of " << size << " failed (status " << status[r] << ")";
    }
  }
}

// Element i of rank r's input (int32: sums are exact).
std::int32_t valueOf(int r, std::size_t i) {
  return static_cast<std::int32_t>((r * 37 + static_cast<long>(i) * 11) % 1009) - 500;
}

constexpr std::int32_t kSentinel = 0x5eed;

class Report {
 public:
  void expect(const std::string& what, std::size_t i, std::int32_t got, std::int32_t want) {
    if (got == want) return;
    if (++bad_ <= 3) out_ << " " << what << "[" << i << "]=" << got << " want " << want << ";";
  }
  std::string text() const {
    return bad_ == 0 ? "" : std::to_string(bad_) + " wrong:" + out_.str();
  }

 private:
  std::size_t bad_ = 0;
  std::ostringstream out_;
};

std::size_t varying(std::size_t count, int j) {
  return count == 0 ? 0 : count + static_cast<std::size_t>(j % 3);
}
std::size_t pairCount(std::size_t count, int a, int b) {
  return count == 0 ? 0 : count / 2 + static_cast<std::size_t>((a + 2 * b) % 3);
}
std::vector<std::size_t> displsOf(const std::vector<std::size_t>& counts, std::size_t gap) {
  std::vector<std::size_t> d(counts.size());
  std::size_t at = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    d[j] = at;
    at += counts[j] + gap;
  }
  return d;
}

// Runs one algorithm on this rank with count elements (int32, op Sum or Max) and checks it.
std::string checkAlgorithm(const algo::AlgoInfo& algo, Transport& t, int rank, int n,
                           std::size_t count, ReduceOp op, int root, std::uint64_t tag) {
  std::vector<std::uint8_t> scratch(256 * 1024);
  algo::Context ctx{t, rank, n, 16384, scratch, Clock::now() + 60s, tag};
  algo::CollArgs a;
  a.coll = algo.coll;
  a.count = count;
  a.dtype = DataType::Int32;
  a.op = op;
  a.root = root;
  using Vec = std::vector<std::int32_t>;
  auto reduced = [&](std::size_t i) {
    std::int32_t acc = valueOf(0, i);
    for (int r = 1; r < n; ++r)
      acc = op == ReduceOp::Sum ? acc + valueOf(r, i) : std::max(acc, valueOf(r, i));
    return acc;
  };
  auto inputOf = [&](int r, std::size_t len) {
    Vec v(len);
    for (std::size_t i = 0; i < len; ++i) v[i] = valueOf(r, i);
    return v;
  };
  const auto un = static_cast<std::size_t>(n);
  const auto me = static_cast<std::size_t>(rank);
  const bool gapped = n % 2 == 1;
  Report rep;
  switch (algo.coll) {
    case Collective::Allreduce: {
      Vec in = inputOf(rank, count), out(count, kSentinel);
      a.send = in.data();
      a.recv = out.data();
      algo.run(ctx, a);
      for (std::size_t i = 0; i < count; ++i) rep.expect("recv", i, out[i], reduced(i));
      break;
    }
    case Collective::Reduce: {
      Vec in = inputOf(rank, count), out(count, kSentinel);
      a.send = in.data();
      a.recv = rank == root ? out.data() : nullptr;
      algo.run(ctx, a);
      if (rank == root)
        for (std::size_t i = 0; i < count; ++i) rep.expect("recv", i, out[i], reduced(i));
      break;
    }
    case Collective::Broadcast: {
      Vec buf = rank == root ? inputOf(root, count) : Vec(count, kSentinel);
      a.send = buf.data();
      a.recv = buf.data();
      algo.run(ctx, a);
      for (std::size_t i = 0; i < count; ++i) rep.expect("buf", i, buf[i], valueOf(root, i));
      break;
    }
    case Collective::Allgather: {
      Vec in = inputOf(rank, count), out(un * count, kSentinel);
      a.send = in.data();
      a.recv = out.data();
      algo.run(ctx, a);
      for (int j = 0; j < n; ++j)
        for (std::size_t i = 0; i < count; ++i)
          rep.expect("recv", j * count + i, out[j * count + i], valueOf(j, i));
      break;
    }
    case Collective::Allgatherv: {
      std::vector<std::size_t> counts(un);
      for (int j = 0; j < n; ++j) counts[static_cast<std::size_t>(j)] = varying(count, j);
      const auto displs = displsOf(counts, gapped ? 2 : 0);
      const std::size_t extent = displs.back() + counts.back();
      Vec in = inputOf(rank, counts[me]), out(extent, kSentinel);
      a.counts = counts;
      if (gapped) a.displs = displs;
      a.send = in.data();
      a.recv = out.data();
      algo.run(ctx, a);
      for (std::size_t j = 0; j < un; ++j)
        for (std::size_t i = 0; i < counts[j]; ++i)
          rep.expect("recv", displs[j] + i, out[displs[j] + i], valueOf(static_cast<int>(j), i));
      break;
    }
    case Collective::ReduceScatter: {
      Vec in = inputOf(rank, un * count), out(count, kSentinel);
      a.send = in.data();
      a.recv = out.data();
      algo.run(ctx, a);
      for (std::size_t i = 0; i < count; ++i)
        rep.expect("recv", i, out[i], reduced(me * count + i));
      break;
    }
    case Collective::ReduceScatterv: {
      std::vector<std::size_t> counts(un);
      for (int j = 0; j < n; ++j) counts[static_cast<std::size_t>(j)] = varying(count, j);
      const auto displs = displsOf(counts, gapped ? 1 : 0);
      const std::size_t extent = displs.back() + counts.back();
      Vec in = inputOf(rank, extent), out(counts[me], kSentinel);
      a.counts = counts;
      if (gapped) a.displs = displs;
      a.send = in.data();
      a.recv = out.data();
      algo.run(ctx, a);
      for (std::size_t i = 0; i < counts[me]; ++i)
        rep.expect("recv", i, out[i], reduced(displs[me] + i));
      break;
    }
    case Collective::Gather: {
      Vec in = inputOf(rank, count), out(un * count, kSentinel);
      a.send = in.data();
      a.recv = rank == root ? out.data() : nullptr;
      algo.run(ctx, a);
      if (rank == root)
        for (int j = 0; j < n; ++j)
          for (std::size_t i = 0; i < count; ++i)
            rep.expect("recv", j * count + i, out[j * count + i], valueOf(j, i));
      break;
    }
    case Collective::Scatter: {
      Vec in = inputOf(root, un * count), out(count, kSentinel);
      a.send = rank == root ? in.data() : nullptr;
      a.recv = out.data();
      algo.run(ctx, a);
      for (std::size_t i = 0; i < count; ++i)
        rep.expect("recv", i, out[i], valueOf(root, me * count + i));
      break;
    }
    case Collective::Alltoall: {
      Vec in = inputOf(rank, un * count), out(un * count, kSentinel);
      a.send = in.data();
      a.recv = out.data();
      algo.run(ctx, a);
      for (int j = 0; j < n; ++j)
        for (std::size_t i = 0; i < count; ++i)
          rep.expect("recv", j * count + i, out[j * count + i], valueOf(j, me * count + i));
      break;
    }
    case Collective::Alltoallv: {
      constexpr std::size_t kStride = 7919;
      std::vector<std::size_t> sendCounts(un), recvCounts(un);
      for (int j = 0; j < n; ++j) {
        sendCounts[static_cast<std::size_t>(j)] = pairCount(count, rank, j);
        recvCounts[static_cast<std::size_t>(j)] = pairCount(count, j, rank);
      }
      const auto sendDispls = displsOf(sendCounts, gapped ? 1 : 0);
      const auto recvDispls = displsOf(recvCounts, gapped ? 2 : 0);
      Vec in(sendDispls.back() + sendCounts.back(), kSentinel);
      Vec out(recvDispls.back() + recvCounts.back(), kSentinel);
      for (std::size_t j = 0; j < un; ++j)
        for (std::size_t i = 0; i < sendCounts[j]; ++i)
          in[sendDispls[j] + i] = valueOf(rank, j * kStride + i);
      a.send = in.data();
      a.recv = out.data();
      a.counts = sendCounts;
      a.recvCounts = recvCounts;
      if (gapped) {
        a.displs = sendDispls;
        a.recvDispls = recvDispls;
      }
      algo.run(ctx, a);
      for (std::size_t j = 0; j < un; ++j)
        for (std::size_t i = 0; i < recvCounts[j]; ++i)
          rep.expect("recv", recvDispls[j] + i, out[recvDispls[j] + i],
                     valueOf(static_cast<int>(j), me * kStride + i));
      break;
    }
    case Collective::Barrier:
      algo.run(ctx, a);
      break;
    default:
      break;
  }
  const std::string r = rep.text();
  return r.empty() ? "" : std::string(algo.name) + " count " + std::to_string(count) + ": " + r;
}

// {UCX_TLS, ranks, lazy connections}.
class UcxProcesses : public testing::TestWithParam<std::tuple<const char*, int, bool>> {};

TEST_P(UcxProcesses, EveryAlgorithmMatchesExpected) {
  useUcxTls(std::get<0>(GetParam()));
  const int n = std::get<1>(GetParam());
  const bool lazy = std::get<2>(GetParam());
  runUcxProcesses(
      n,
      [n](int rank, Transport& t) {
        std::string report;
        std::uint64_t tag = 1000;
        for (const algo::AlgoInfo& algo : algo::registry()) {
          if (algo.coll == Collective::Send || algo.coll == Collective::Recv) continue;
          const bool rooted = algo.coll == Collective::Reduce ||
                              algo.coll == Collective::Broadcast ||
                              algo.coll == Collective::Gather || algo.coll == Collective::Scatter;
          std::vector<int> roots{0};
          if (rooted && n > 1) roots.push_back(n - 1);
          // 0, 1, odd, prime, and 70001 int32 (280 KB: several chunks, rendezvous-sized pieces).
          for (std::size_t count : {0ul, 1ul, 7ul, 1031ul, 70001ul}) {
            if (algo.coll == Collective::Barrier && count > 0) continue;
            // Only rows whose constraints hold over this transport (no shared-memory group, no
            // topology): selection never picks the others, and a direct call throws.
            const bool perRank =
                algo.coll == Collective::Allgather || algo.coll == Collective::ReduceScatter ||
                algo.coll == Collective::Alltoall || algo.coll == Collective::Gather ||
                algo.coll == Collective::Scatter;
            const std::size_t bytes = count * sizeof(std::int32_t) * (perRank ? n : 1);
            if (algo::cannotRun(algo, {n, bytes, t.sharedGroup() != nullptr, nullptr, false}) !=
                algo::Constraint::None)
              continue;
            for (int root : roots)
              for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
                const bool reduces = algo.coll == Collective::Allreduce ||
                                     algo.coll == Collective::Reduce ||
                                     algo.coll == Collective::ReduceScatter ||
                                     algo.coll == Collective::ReduceScatterv;
                if (!reduces && op == ReduceOp::Max) continue;
                const std::string r = checkAlgorithm(algo, t, rank, n, count, op, root, tag++ << 8);
                if (!r.empty() && report.size() < 2000) report += r + "; ";
              }
          }
        }
        return report;
      },
      180s, -1, lazy);
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxProcesses,
                         testing::Combine(testing::Values("tcp", "sm,cma"),
                                          testing::Values(1, 2, 3, 4, 5), testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == std::string("tcp")
                                                  ? "tcp"
                                                  : "sm_cma") +
                                  "_" + std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_lazy" : "");
                         });

// A peer killed mid-job (SIGKILL: no goodbye, no clean close): every survivor's pending receive
// from it fails with PeerLost within its timeout. UCX detects it itself: over tcp by the broken
// connection, over shared memory by its keepalive (UCX_KEEPALIVE_INTERVAL, set short here;
// docs/ucx.md).
class UcxKilled : public testing::TestWithParam<const char*> {};

TEST_P(UcxKilled, SurvivorsSeePeerLost) {
  useUcxTls(GetParam());
  ::setenv("UCX_KEEPALIVE_INTERVAL", "200ms", 1);
  runUcxProcesses(
      3,
      [](int rank, Transport& t) -> std::string {
        test::exchangeAll(rank, t, 10000, 3, 20s);  // everybody is up
        if (rank == 2) {
          std::this_thread::sleep_for(100ms);
          ::raise(SIGKILL);
        }
        Bytes buf(1 << 20);
        Request req;
        t.postRecv(2, buf.data(), buf.size(), 4, req);
        const auto start = Clock::now();
        try {
          t.wait(req, Clock::now() + 30s);
          return "the receive from the killed rank completed";
        } catch (const Error& e) {
          if (e.code() != ErrorCode::PeerLost) return std::string("not PeerLost: ") + e.what();
          if (std::string(e.what()).find("rank 2 (host ") == std::string::npos)
            return std::string("the peer is not named: ") + e.what();
        }
        if (Clock::now() - start > 25s) return "PeerLost came too late";
        // The survivors still talk to each other.
        Bytes mine(64, static_cast<std::uint8_t>(rank)), theirs(64);
        Request s, r;
        t.postRecv(1 - rank, theirs.data(), 64, 5, r);
        t.postSend(1 - rank, mine.data(), 64, 5, s);
        t.wait(s, Clock::now() + 10s);
        t.wait(r, Clock::now() + 10s);
        return theirs == Bytes(64, static_cast<std::uint8_t>(1 - rank)) ? "" : "wrong data";
      },
      120s, 2);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxKilled, testing::Values("tcp", "sm,cma"), [](const auto& info) {
  return std::string(info.param) == "tcp" ? "tcp" : "sm_cma";
});

TEST(UcxBuild, ReportsItsVersion) {
  EXPECT_TRUE(ucxAvailable());
  EXPECT_EQ(ucxUnavailableReason(), "");
  EXPECT_FALSE(ucxVersion().empty());
}

#else  // no UCX in this build

TEST(UcxBuild, CreationSaysTheBuildHasNoUcx) {
  EXPECT_FALSE(ucxAvailable());
  MemoryStore store;
  std::string msg;
  EXPECT_EQ(test::codeOf([&] { createUcxTransport(store, 0, 2, UcxOptions{}); }, msg),
            ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("no UCX transport"), std::string::npos) << msg;
}

#endif

}  // namespace
}  // namespace braid::transport
