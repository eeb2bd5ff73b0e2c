// The transport conformance suite: one set of tests that every transport passes the same way
// (transport.hpp's contract: sizes, ordering, matching, P2P messages held aside, mismatch,
// timeout, abort, bad arguments), typed over a factory per transport. Ranks are threads of this
// process. To add a transport, add a traits struct like TcpKind below to Kinds. UCX runs twice,
// over its TCP transport and over its shared-memory ones (UcxOptions::config, per transport:
// no process environment), where the build has it.
// Transport-specific behaviour (setup, streams, shm paths and segments, liveness) stays in
// tcp_test.cpp, tcp_streams_test.cpp, shm_test.cpp, ucx_test.cpp and tests/algo/inproc_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness/errors.hpp"
#include "harness/transport_ranks.hpp"
#include "transport/inproc/inproc_transport.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;

using test::Bytes;
using test::codeOf;
using test::exchangeAll;
using test::firstWrong;
using test::makePayload;
using test::Rendezvous;

using Body = std::function<void(int, Transport&)>;

Deadline after(Clock::duration d) {
  return Clock::now() + d;
}

// Waits for a request that may complete or fail (which depends on the transport).
void waitAnyway(Transport& t, Request& req) {
  (void)test::errorOf([&] { t.wait(req, after(5s)); });
}

// Each kind: run(size, body) runs body on `size` threads with one transport each; peerStart is
// how a peer's description continues after "rank N " in errors; timeoutFailsTransport says
// whether a Timeout leaves the transport failed (else the request is withdrawn).
struct TcpKind {
  static constexpr const char* kPeerStart = "(127.0.0.1:";
  static constexpr bool kTimeoutFailsTransport = true;
  static void run(int size, const Body& body) {
    TcpOptions o;
    o.connectTimeout = 10s;
    test::runTransportRanks(
        size, [&](Store& store, int r) { return createTcpTransport(store, r, size, o); }, body);
  }
};

// The same, connecting each pair on first use (BRAID_CONNECT=lazy).
struct TcpLazyKind {
  static constexpr const char* kPeerStart = "(127.0.0.1:";
  static constexpr bool kTimeoutFailsTransport = true;
  static void run(int size, const Body& body) {
    TcpOptions o;
    o.connectTimeout = 10s;
    o.lazyConnect = true;
    test::runTransportRanks(
        size, [&](Store& store, int r) { return createTcpTransport(store, r, size, o); }, body);
  }
};

struct ShmKind {
  static constexpr const char* kPeerStart = "(pid ";
  static constexpr bool kTimeoutFailsTransport = true;
  static void run(int size, const Body& body) {
    ShmOptions o;
    o.setupTimeout = 10s;
    o.hostCpus = 2;  // set, not the machine's: the same paths on every machine
    std::vector<int> local;
    for (int r = 0; r < size; ++r) local.push_back(r);
    test::runTransportRanks(
        size,
        [&](Store& store, int r) -> std::unique_ptr<Transport> {
          return createShmTransport(store, r, size, local, o);
        },
        body);
  }
};

struct InprocKind {
  static constexpr const char* kPeerStart = "(inproc)";
  static constexpr bool kTimeoutFailsTransport = false;
  static void run(int size, const Body& body) {
    InprocFabric fabric(size);
    test::runTransportRanks(
        size, [&](Store&, int r) { return fabric.endpoint(r); }, body);
  }
};

#ifdef BRAID_HAVE_UCX
// UCX with the settings `Tls` gives its context (UCX_TLS and what those transports need).
// Lazy: each pair connects on first use (BRAID_CONNECT=lazy).
template <class Tls, bool Lazy = false>
struct UcxKind {
  static constexpr const char* kPeerStart = "(host ";
  static constexpr bool kTimeoutFailsTransport = true;
  static void run(int size, const Body& body) {
    UcxOptions o;
    o.connectTimeout = 10s;
    o.config = Tls::settings();
    o.lazyConnect = Lazy;
    test::runTransportRanks(
        size, [&](Store& store, int r) { return createUcxTransport(store, r, size, o); }, body);
  }
};
struct UcxTcpTls {
  static std::vector<std::pair<std::string, std::string>> settings() { return {{"TLS", "tcp"}}; }
};
// UCX's shared-memory transports detect a dead peer only with their error handling on
// (docs/ucx.md). UCX_POSIX_ERROR_HANDLING in the environment; MM_ERROR_HANDLING (the table
// behind it, posix and sysv alike) through ucp_config_modify, which takes no POSIX_ prefix.
struct UcxShmTls {
  static std::vector<std::pair<std::string, std::string>> settings() {
    return {{"TLS", "sm,cma"}, {"MM_ERROR_HANDLING", "y"}};
  }
};
using UcxTcpKind = UcxKind<UcxTcpTls>;
using UcxShmKind = UcxKind<UcxShmTls>;
using UcxTcpLazyKind = UcxKind<UcxTcpTls, true>;
#endif

template <class Kind>
class Conformance : public ::testing::Test {};

#ifdef BRAID_HAVE_UCX
using Kinds = ::testing::Types<TcpKind, TcpLazyKind, ShmKind, InprocKind, UcxTcpKind, UcxShmKind,
                               UcxTcpLazyKind>;
#else
using Kinds = ::testing::Types<TcpKind, TcpLazyKind, ShmKind, InprocKind>;
#endif
class KindNames {
 public:
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, TcpKind>) return "tcp";
    if (std::is_same_v<T, TcpLazyKind>) return "tcp_lazy";
    if (std::is_same_v<T, ShmKind>) return "shm";
#ifdef BRAID_HAVE_UCX
    if (std::is_same_v<T, UcxTcpKind>) return "ucx_tcp";
    if (std::is_same_v<T, UcxShmKind>) return "ucx_sm";
    if (std::is_same_v<T, UcxTcpLazyKind>) return "ucx_tcp_lazy";
#endif
    return "inproc";
  }
};
TYPED_TEST_SUITE(Conformance, Kinds, KindNames);

TYPED_TEST(Conformance, PairSizes) {
  TypeParam::run(2, [](int rank, Transport& t) {
    const int peer = 1 - rank;
    std::uint64_t tag = 100;
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64 << 10},
                              std::size_t{(64 << 10) + 13}, std::size_t{32 << 20}}) {
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

TYPED_TEST(Conformance, AllToAllAtManyWorldSizes) {
  for (int size : {2, 3, 4, 5, 7, 8}) {
    SCOPED_TRACE("size " + std::to_string(size));
    TypeParam::run(size, [](int rank, Transport& t) {
      std::uint64_t tag = 1;
      for (std::size_t bytes :
           {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64 << 10}})
        exchangeAll(rank, t, bytes, tag++);
    });
  }
}

TYPED_TEST(Conformance, SimultaneousLargeExchangeDoesNotDeadlock) {
  // Both ranks post a large send and a receive, then wait on the send first: waiting on it
  // must also drain the data coming the other way.
  TypeParam::run(2, [](int rank, Transport& t) {
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

TYPED_TEST(Conformance, ThousandSmallMessagesInOrder) {
  constexpr int kCount = 1000;
  auto sizeOf = [](int i) { return static_cast<std::size_t>((i * 37) % 300); };
  TypeParam::run(2, [&](int rank, Transport& t) {
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
template <class Kind>
void expectMismatch(std::uint64_t expectTag, std::size_t expectBytes,
                    const std::vector<std::string>& wants) {
  Rendezvous done(2);
  Kind::run(2, [&](int rank, Transport& t) {
    Bytes buf(64);
    Request req;
    if (rank == 1) {
      t.postSend(0, buf.data(), 8, 5, req);
      waitAnyway(t, req);  // Mismatch or PeerLost, by transport
    } else {
      t.postRecv(1, buf.data(), expectBytes, expectTag, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::Mismatch);
      for (const std::string& want : wants)
        EXPECT_NE(message.find(want), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("from rank 1 ") + Kind::kPeerStart), std::string::npos)
          << message;
      // The pair is broken now: later receives from that peer fail too.
      Request later;
      t.postRecv(1, buf.data(), 8, 5, later);
      EXPECT_EQ(codeOf([&] { t.wait(later, after(5s)); }, message), ErrorCode::Mismatch);
    }
    done.arriveAndWait();  // rank 1 stays up until rank 0 has checked
  });
}

TYPED_TEST(Conformance, TagMismatch) {
  expectMismatch<TypeParam>(
      6, 8, {"rank 0 expected tag 6 (8 bytes) from rank 1", "but received tag 5 (8 bytes)"});
}

TYPED_TEST(Conformance, SizeMismatch) {
  expectMismatch<TypeParam>(
      5, 16, {"rank 0 expected tag 5 (16 bytes) from rank 1", "but received tag 5 (8 bytes)"});
}

TYPED_TEST(Conformance, TagDescriberNamesTheOperationAndTheObserverHearsIt) {
  Rendezvous done(2);
  TypeParam::run(2, [&](int rank, Transport& t) {
    t.setTagDescriber([](std::uint64_t tag) { return "allreduce #" + std::to_string(tag); });
    std::uint64_t seenExpected = 0, seenReceived = 0;
    int seenPeer = -1;
    t.setMismatchObserver([&](int peer, std::uint64_t expected, std::uint64_t received) {
      seenPeer = peer;
      seenExpected = expected;
      seenReceived = received;
    });
    Bytes buf(8);
    Request req;
    if (rank == 1) {
      t.postSend(0, buf.data(), 8, 41, req);
      waitAnyway(t, req);
    } else {
      t.postRecv(1, buf.data(), 8, 42, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::Mismatch);
      EXPECT_NE(message.find("expected allreduce #42 (8 bytes)"), std::string::npos) << message;
      EXPECT_NE(message.find("received allreduce #41 (8 bytes)"), std::string::npos) << message;
      EXPECT_EQ(seenPeer, 1);
      EXPECT_EQ(seenExpected, 42u);
      EXPECT_EQ(seenReceived, 41u);
    }
    done.arriveAndWait();
  });
}

TYPED_TEST(Conformance, P2PMessagesArriveBeforeTheirReceivesAndMatchByTag) {
  Rendezvous sent(2);
  TypeParam::run(2, [&](int rank, Transport& t) {
    const std::uint64_t a = kP2PTagBit | 7, b = kP2PTagBit | 8;
    if (rank == 1) {
      Bytes x = makePayload(1, 0, 100), y = makePayload(2, 0, 3000), z;
      Request rx, ry, rz;
      t.postSend(0, x.data(), x.size(), a, rx);
      t.postSend(0, y.data(), y.size(), b, ry);
      t.postSend(0, z.data(), 0, a, rz);
      t.wait(rx, after(5s));  // all complete although no receive is posted yet
      t.wait(ry, after(5s));
      t.wait(rz, after(5s));
      sent.arriveAndWait();
    } else {
      sent.arriveAndWait();
      std::this_thread::sleep_for(10ms);
      // Receive them in another order: b was queued behind a.
      Bytes x(100), y(3000);
      Request rx, ry, rz;
      t.postRecv(1, y.data(), y.size(), b, ry);
      t.wait(ry, after(5s));
      t.postRecv(1, x.data(), x.size(), a, rx);
      t.wait(rx, after(5s));
      t.postRecv(1, nullptr, 0, a, rz);
      t.wait(rz, after(5s));
      EXPECT_EQ(firstWrong(x, 1, 0), -1);
      EXPECT_EQ(firstWrong(y, 2, 0), -1);
    }
  });
}

// A point-to-point receive whose size differs from its message fails alone (MPI's truncation,
// but as an error for any size): the message waits for a receive of its size and the pair goes
// on. Over UCX the large message stays inside UCX until then (zero copy).
TYPED_TEST(Conformance, P2PSizeMismatchFailsThatReceiveAloneAndThePairGoesOn) {
  Rendezvous posted(2), done(2);
  TypeParam::run(2, [&](int rank, Transport& t) {
    const std::uint64_t a = kP2PTagBit | 7, b = kP2PTagBit | 8;
    const std::size_t big = 300007;
    if (rank == 1) {
      Bytes x = makePayload(1, 0, 100), y = makePayload(2, 0, big), z = makePayload(3, 0, 8);
      Request rx, ry, rz;
      posted.arriveAndWait();
      t.postSend(0, x.data(), x.size(), a, rx);
      t.postSend(0, y.data(), y.size(), b, ry);
      t.postSend(0, z.data(), z.size(), 5, rz);
      t.wait(rx, after(10s));
      t.wait(ry, after(10s));
      t.wait(rz, after(10s));
    } else {
      auto expectSizes = [](const std::string& message, std::uint64_t tag, std::size_t expected,
                            std::size_t received) {
        const std::string t = "tag " + std::to_string(tag);
        EXPECT_NE(message.find("rank 0 expected " + t + " (" + std::to_string(expected) +
                               " bytes) from rank 1 " + TypeParam::kPeerStart),
                  std::string::npos)
            << message;
        EXPECT_NE(message.find("but received " + t + " (" + std::to_string(received) + " bytes)"),
                  std::string::npos)
            << message;
      };
      // Receives posted before their message: the first has another size.
      Bytes shortBuf(50, 0xEE), x(100), y(big), z(8), wrongY(1000, 0xEE);
      Request r1, r2, r3, r4, r5;
      t.postRecv(1, shortBuf.data(), shortBuf.size(), a, r1);
      t.postRecv(1, x.data(), x.size(), a, r2);
      posted.arriveAndWait();
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(r1, after(10s)); }, message), ErrorCode::Mismatch);
      expectSizes(message, a, 50, 100);
      EXPECT_EQ(shortBuf, Bytes(50, 0xEE));  // nothing written
      t.wait(r2, after(10s));
      EXPECT_EQ(firstWrong(x, 1, 0), -1);
      // A receive posted after its (large) message arrived, of another size.
      std::this_thread::sleep_for(20ms);
      t.postRecv(1, wrongY.data(), wrongY.size(), b, r3);
      EXPECT_EQ(codeOf([&] { t.wait(r3, after(10s)); }, message), ErrorCode::Mismatch);
      expectSizes(message, b, 1000, big);
      EXPECT_EQ(wrongY, Bytes(1000, 0xEE));
      // The message is still there for a receive of its size, and the pair goes on.
      t.postRecv(1, y.data(), y.size(), b, r4);
      t.wait(r4, after(10s));
      EXPECT_EQ(firstWrong(y, 2, 0), -1);
      t.postRecv(1, z.data(), z.size(), 5, r5);
      t.wait(r5, after(10s));
      EXPECT_EQ(firstWrong(z, 3, 0), -1);
    }
    done.arriveAndWait();
  });
}

TYPED_TEST(Conformance, P2PRecvPostedWhileTheMessageArrives) {
  // The sender stays until the receiver is done: on a fast host the whole message can arrive
  // during the receiver's first test(), and a sender that left then would (rightly) fail the
  // receive of 4 bytes still posted on the pair with PeerLost.
  Rendezvous done(2);
  TypeParam::run(2, [&](int rank, Transport& t) {
    const std::uint64_t tag = kP2PTagBit | 1;
    const std::size_t bytes = 24 << 20;
    if (rank == 1) {
      Bytes x = makePayload(1, 0, bytes);
      Request req;
      t.postSend(0, x.data(), bytes, tag, req);
      t.wait(req, after(10s));
      done.arriveAndWait();
    } else {
      // Drive the pair (a collective recv that comes later) so the P2P message starts arriving
      // into the held buffer, then post its receive.
      Bytes x(bytes), other(4);
      Request rother, rx;
      t.postRecv(1, other.data(), other.size(), 77, rother);
      EXPECT_FALSE(t.test(rother));
      std::this_thread::sleep_for(5ms);
      EXPECT_FALSE(t.test(rother));
      t.postRecv(1, x.data(), bytes, tag, rx);
      t.wait(rx, after(10s));
      EXPECT_EQ(firstWrong(x, 1, 0), -1);
      done.arriveAndWait();
      t.abort("done");  // rother is never sent
    }
  });
}

TYPED_TEST(Conformance, UnmatchedRecvTimesOutAtTheDeadlineNamingThePeer) {
  Rendezvous done(2);
  TypeParam::run(2, [&](int rank, Transport& t) {
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
      EXPECT_NE(message.find(std::string("rank 0 timed out waiting for a recv of 16 bytes from "
                                         "rank 1 ") +
                             TypeParam::kPeerStart),
                std::string::npos)
          << message;
      Request later;
      t.postSend(1, buf.data(), 1, 8, later);
      if (TypeParam::kTimeoutFailsTransport) {
        // The transport is failed now: later requests fail with the same error.
        std::string again;
        EXPECT_EQ(codeOf([&] { t.wait(later, after(5s)); }, again), ErrorCode::Timeout);
        EXPECT_EQ(again, message);
      } else {
        // Withdrawn: the transport stays usable.
        t.wait(later, after(5s));
      }
    } else if (!TypeParam::kTimeoutFailsTransport) {
      Bytes buf(1);
      Request req;
      t.postRecv(0, buf.data(), 1, 8, req);
      t.wait(req, after(5s));
    }
    done.arriveAndWait();
  });
}

TYPED_TEST(Conformance, AbortWakesABlockedWaitAndThePeerSeesItLost) {
  Rendezvous done(2);
  TypeParam::run(2, [&](int rank, Transport& t) {
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
      Bytes buf(16);
      Request req;
      t.postRecv(0, buf.data(), buf.size(), 9, req);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(req, after(5s)); }, message), ErrorCode::PeerLost);
      EXPECT_NE(message.find(std::string("rank 0 ") + TypeParam::kPeerStart), std::string::npos)
          << message;
    }
    done.arriveAndWait();
  });
}

TYPED_TEST(Conformance, TestAloneDrivesARequestToCompletion) {
  TypeParam::run(2, [](int rank, Transport& t) {
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

TYPED_TEST(Conformance, RejectsInvalidArgumentsNamingTheOperation) {
  TypeParam::run(2, [](int rank, Transport& t) {
    std::uint8_t byte = 0;
    Request req;
    std::string message;
    EXPECT_EQ(codeOf([&] { t.postSend(rank, &byte, 1, 1, req); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_NE(message.find("postSend: rank " + std::to_string(rank) + " cannot address peer"),
              std::string::npos)
        << message;
    EXPECT_EQ(codeOf([&] { t.postRecv(2, &byte, 1, 1, req); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_EQ(codeOf([&] { t.postRecv(-1, &byte, 1, 1, req); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_EQ(codeOf([&] { t.postRecv(1 - rank, nullptr, 1, 1, req); }, message),
              ErrorCode::InvalidArgument);
    EXPECT_NE(message.find("postRecv: null buffer for 1 bytes"), std::string::npos) << message;
    EXPECT_EQ(req.state.load(), Request::State::Idle);
    t.wait(req, after(1s));  // an idle request is not waited for
    EXPECT_TRUE(t.test(req));
  });
}

}  // namespace
}  // namespace braid::transport
