// Lanes (docs/architecture.md, "Shared connections"): several communicators' messages on one
// transport's connections, each matched only by receives of its own lane. Over TCP with one
// stream and two striped streams, and over UCX (UCX's tcp) with eager and lazy connections:
// every test runs on each kind. And over shared memory ("shm": the ring of each pair, one
// segment; "shm_cma": large messages single-copy), where a sub-communicator's lane shares its
// parent's segment.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/transport_ranks.hpp"
#include "store/memory_store.hpp"
#include "transport/factory.hpp"
#include "transport/lane_transport.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;
using test::Bytes;
using test::codeOf;

constexpr std::uint64_t kLaneA = 0xa11ce;
constexpr std::uint64_t kLaneB = 0xb0b;
constexpr std::uint64_t kTag = 77;  // a collective's tag: matched by order within its lane

Deadline after(Clock::duration d) {
  return Clock::now() + d;
}

// The transports with lanes: "tcp" (one stream per peer), "tcp2" (two striped streams), and,
// where the build has UCX, "ucx" and "ucx_lazy" (UCX's tcp transport, set per transport).
std::vector<std::string> kinds() {
  std::vector<std::string> out{"tcp", "tcp2", "shm", "shm_cma"};
  if (ucxAvailable()) {
    out.push_back("ucx");
    out.push_back("ucx_lazy");
  }
  return out;
}

// The transport of rank r of `size` of that kind, for runTransportRanks.
std::unique_ptr<Transport> make(const std::string& kind, Store& store, int r, int size) {
  if (kind.starts_with("shm")) {
    ShmOptions o;
    o.setupTimeout = 10s;
    o.slotBytes = 4096;  // small rings: large messages wrap and go in pieces
    if (kind == "shm_cma") o.cmaThresholdBytes = 4096;
    std::vector<int> local(static_cast<std::size_t>(size));
    for (int i = 0; i < size; ++i) local[static_cast<std::size_t>(i)] = i;
    return createShmTransport(store, r, size, local, o);
  }
  if (kind.starts_with("ucx")) {
    UcxOptions o;
    o.connectTimeout = 10s;
    o.config = {{"TLS", "tcp"}};
    o.lazyConnect = kind == "ucx_lazy";
    return createUcxTransport(store, r, size, o);
  }
  TcpOptions o;
  o.connectTimeout = 10s;
  o.socketThreads = kind == "tcp2" ? 2 : 1;
  o.stripeMinBytes = 4096;
  return createTcpTransport(store, r, size, o);
}

// Runs body(rank, transport) on 2 threads over a transport of that kind.
void runPair(const std::string& kind, const std::function<void(int, Transport&)>& body) {
  test::runTransportRanks(
      2, [&](Store& store, int r) { return make(kind, store, r, 2); }, body);
}

Bytes payload(std::size_t n, int seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i * 31 + seed * 7);
  return b;
}

// Rank 1 sends lane A's message, then lane B's. Rank 0 posts B's receive first and waits for it
// alone: A's message, ahead of it on the stream with no receive of its lane, must not hold it up.
// Then A's receive takes A's message, held aside meanwhile.
class Lanes : public testing::TestWithParam<std::string> {};

TEST_P(Lanes, AMessageWithoutAReceiveOfItsLaneDoesNotHoldUpAnotherLane) {
  const std::string kind = GetParam();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4099}, std::size_t{70001}}) {
    SCOPED_TRACE(std::to_string(n) + " bytes");
    std::latch bDone(2);
    runPair(kind, [&](int rank, Transport& t) {
      ASSERT_TRUE(t.carriesLanes());
      t.openLane(kLaneA);
      t.openLane(kLaneB);
      const Bytes a = payload(n, 1), b = payload(n, 2);
      Request ra, rb;
      if (rank == 1) {
        t.postSendOnLane(kLaneA, 0, a.data(), n, kTag, ra);
        t.postSendOnLane(kLaneB, 0, b.data(), n, kTag, rb);
        t.wait(rb, after(5s));
        bDone.arrive_and_wait();
        t.wait(ra, after(5s));
      } else {
        Bytes gotA(n), gotB(n);
        t.postRecvOnLane(kLaneB, 1, gotB.data(), n, kTag, rb);
        t.wait(rb, after(5s));
        EXPECT_EQ(gotB, b);
        bDone.arrive_and_wait();
        t.postRecvOnLane(kLaneA, 1, gotA.data(), n, kTag, ra);
        t.wait(ra, after(5s));
        EXPECT_EQ(gotA, a);
      }
      t.closeLane(kLaneA);
      t.closeLane(kLaneB);
    });
  }
}

TEST_P(Lanes, AMismatchInsideALaneIsStillAMismatch) {
  const std::string kind = GetParam();
  runPair(kind, [&](int rank, Transport& t) {
    t.openLane(kLaneA);
    t.openLane(kLaneB);
    Bytes buf(64, 3);
    Request r;
    if (rank == 1) {
      t.postSendOnLane(kLaneA, 0, buf.data(), 64, kTag, r);
      std::string message;
      try {
        t.wait(r, after(5s));
      } catch (const Error&) {  // the receiver may close the connection first
      }
    } else {
      t.postRecvOnLane(kLaneA, 1, buf.data(), 64, kTag + 1, r);
      std::string message;
      EXPECT_EQ(codeOf([&] { t.wait(r, after(5s)); }, message), ErrorCode::Mismatch) << message;
    }
  });
}

// Aborting lane A fails its pending receive with Aborted; lane B on the same connection goes on.
TEST_P(Lanes, AbortingOneLaneLeavesTheOtherWorking) {
  const std::string kind = GetParam();
  {
    std::latch aborted(2);
    runPair(kind, [&](int rank, Transport& t) {
      t.openLane(kLaneA);
      t.openLane(kLaneB);
      const Bytes b = payload(5000, 4);
      Request ra, rb;
      if (rank == 0) {
        Bytes never(16), gotB(5000);
        t.postRecvOnLane(kLaneA, 1, never.data(), 16, kTag, ra);
        std::thread aborter([&] {
          std::this_thread::sleep_for(30ms);
          t.abortLane(kLaneA, "lane A aborted by the test");
        });
        std::string message;
        EXPECT_EQ(codeOf([&] { t.wait(ra, after(5s)); }, message), ErrorCode::Aborted) << message;
        EXPECT_NE(message.find("lane A aborted"), std::string::npos) << message;
        aborter.join();
        // Later posts on the aborted lane fail at once.
        EXPECT_EQ(codeOf(
                      [&] {
                        t.postRecvOnLane(kLaneA, 1, never.data(), 16, kTag, ra);
                        t.wait(ra, after(5s));
                      },
                      message),
                  ErrorCode::Aborted);
        aborted.arrive_and_wait();
        t.postRecvOnLane(kLaneB, 1, gotB.data(), gotB.size(), kTag, rb);
        t.wait(rb, after(5s));
        EXPECT_EQ(gotB, b);
      } else {
        aborted.arrive_and_wait();
        t.postSendOnLane(kLaneB, 0, b.data(), b.size(), kTag, rb);
        t.wait(rb, after(5s));
      }
    });
  }
}

// Messages of a lane closed on the receiver are dropped; the other lanes' messages behind them
// arrive. (The sender's lane-A send either went out before it read rank 0's "lane gone" frame,
// and is dropped, or fails with PeerLost once it has read it.)
TEST_P(Lanes, MessagesOfAClosedLaneAreDropped) {
  const std::string kind = GetParam();
  std::latch closed(2);
  runPair(kind, [&](int rank, Transport& t) {
    t.openLane(kLaneA);
    t.openLane(kLaneB);
    const Bytes a = payload(3000, 5), b = payload(3000, 6);
    Request ra, rb;
    if (rank == 0) t.closeLane(kLaneA);
    closed.arrive_and_wait();
    if (rank == 1) {
      t.postSendOnLane(kLaneA, 0, a.data(), a.size(), kTag, ra);
      t.postSendOnLane(kLaneB, 0, b.data(), b.size(), kTag, rb);
      try {
        t.wait(ra, after(5s));
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
      }
      t.wait(rb, after(5s));
    } else {
      Bytes got(3000);
      t.postRecvOnLane(kLaneB, 1, got.data(), got.size(), kTag, rb);
      t.wait(rb, after(5s));
      EXPECT_EQ(got, b);
    }
  });
}

// Closing a lane (its communicator is destroyed) takes its pending requests out of the shared
// connections, so none is left referring to memory that goes with the communicator; the other
// lanes go on.
TEST_P(Lanes, ClosingALaneTakesItsPendingRequestsOut) {
  const std::string kind = GetParam();
  std::latch closed(2);
  runPair(kind, [&](int rank, Transport& t) {
    t.openLane(kLaneA);
    t.openLane(kLaneB);
    const Bytes b = payload(3000, 7);
    Request rb;
    if (rank == 0) {
      auto never = std::make_unique<Bytes>(64);
      auto ra = std::make_unique<Request>();
      t.postRecvOnLane(kLaneA, 1, never->data(), never->size(), kTag, *ra);
      t.closeLane(kLaneA);
      EXPECT_EQ(ra->state.load(), Request::State::Failed);
      ra.reset();  // gone with its communicator
      never.reset();
      closed.arrive_and_wait();
      Bytes got(3000);
      t.postRecvOnLane(kLaneB, 1, got.data(), got.size(), kTag, rb);
      t.wait(rb, after(5s));
      EXPECT_EQ(got, b);
    } else {
      closed.arrive_and_wait();
      t.postSendOnLane(kLaneB, 0, b.data(), b.size(), kTag, rb);
      t.wait(rb, after(5s));
    }
  });
}

// A lane closed (its communicator destroyed) or aborted on one rank: the peer is told by a
// control frame behind the lane's last frames, so its receive waiting on the lane fails with
// PeerLost saying which, and so do its later sends and receives on the lane; the other lane goes
// on both ways.
void laneGoneOnOneRank(const std::string& kind, bool abort) {
  {
    std::latch posted(2), gone(2);
    runPair(kind, [&](int rank, Transport& t) {
      t.openLane(kLaneA);
      t.openLane(kLaneB);
      Bytes got(5000);
      const Bytes b = payload(5000, rank);
      Request ra, rb, sb;
      if (rank == 1) {
        t.postRecvOnLane(kLaneA, 0, got.data(), got.size(), kTag, ra);
        posted.arrive_and_wait();
        std::string message;
        EXPECT_EQ(codeOf([&] { t.wait(ra, after(20s)); }, message), ErrorCode::PeerLost) << message;
        EXPECT_NE(message.find(abort ? "(it was aborted there)" : "(it was destroyed there)"),
                  std::string::npos)
            << message;
        for (const bool send : {true, false}) {  // later posts on the lane fail the same way
          const auto post = [&] {
            if (send)
              t.postSendOnLane(kLaneA, 0, b.data(), b.size(), kTag, ra);
            else
              t.postRecvOnLane(kLaneA, 0, got.data(), got.size(), kTag, ra);
            t.wait(ra, after(20s));
          };
          EXPECT_EQ(codeOf(post, message), ErrorCode::PeerLost) << message;
        }
        gone.arrive_and_wait();
      } else {
        posted.arrive_and_wait();
        if (abort)
          t.abortLane(kLaneA, "test abort");
        else
          t.closeLane(kLaneA);
        gone.arrive_and_wait();
      }
      t.postSendOnLane(kLaneB, 1 - rank, b.data(), b.size(), kTag, sb);
      t.postRecvOnLane(kLaneB, 1 - rank, got.data(), got.size(), kTag, rb);
      t.wait(sb, after(5s));
      t.wait(rb, after(5s));
      EXPECT_EQ(got, payload(5000, 1 - rank));
    });
  }
}

TEST_P(Lanes, ClosingALaneFailsWhatThePeerWaitsForOnIt) {
  laneGoneOnOneRank(GetParam(), false);
}

TEST_P(Lanes, AbortingALaneFailsWhatThePeerWaitsForOnIt) {
  laneGoneOnOneRank(GetParam(), true);
}

// Only the lane's peers (openLane's list) are told: rank 0 opens lane A with rank 1 alone, so
// when it closes the lane rank 1's receive fails while rank 2's (a rank outside the lane, which
// opened a lane of the same id for the test) is not touched and runs into its own deadline.
TEST_P(Lanes, OnlyTheLanesPeersAreTold) {
  const std::string kind = GetParam();
  std::latch posted(3), done(3);
  test::runTransportRanks(
      3, [&](Store& store, int r) { return make(kind, store, r, 3); },
      [&](int rank, Transport& t) {
        t.openLane(kLaneA, rank == 0 ? std::vector<int>{1} : std::vector<int>{});
        Bytes got(64);
        Request ra;
        if (rank != 0) t.postRecvOnLane(kLaneA, 0, got.data(), got.size(), kTag, ra);
        posted.arrive_and_wait();
        std::string message;
        if (rank == 0) {
          t.closeLane(kLaneA);
        } else if (rank == 1) {
          EXPECT_EQ(codeOf([&] { t.wait(ra, after(20s)); }, message), ErrorCode::PeerLost)
              << message;
        } else {
          EXPECT_EQ(codeOf([&] { t.wait(ra, after(300ms)); }, message), ErrorCode::Timeout)
              << message;
        }
        done.arrive_and_wait();  // no rank's transport goes before the others are done
      });
}

// A LaneTransport renumbers: view rank r is the shared transport's rank toBase[r].
TEST_P(Lanes, ALaneViewMapsItsRanksToTheSharedTransport) {
  const std::string kind = GetParam();
  std::vector<std::shared_ptr<Transport>> shared(3);
  test::runTransportRanks(
      3, [&](Store& store, int r) { return make(kind, store, r, 3); },
      [&](int rank, Transport& t) {
        // A non-owning handle: the harness owns the transport and outlives the view.
        std::shared_ptr<Transport> base(&t, [](Transport*) {});
        if (rank == 1) return;  // the view is {2, 0}: world ranks 2 and 0 as view ranks 0 and 1
        const int mine = rank == 2 ? 0 : 1;
        LaneTransport view(base, kLaneA, mine, {2, 0});
        EXPECT_EQ(view.size(), 2);
        Bytes out = payload(100, rank), in(100);
        Request s, r;
        view.postSend(1 - mine, out.data(), out.size(), kTag, s);
        view.postRecv(1 - mine, in.data(), in.size(), kTag, r);
        view.wait(s, after(5s));
        view.wait(r, after(5s));
        EXPECT_EQ(in, payload(100, rank == 2 ? 0 : 2));
        EXPECT_NE(
            view.describePeer(1 - mine).find("world rank " + std::to_string(rank == 2 ? 0 : 2)),
            std::string::npos)
            << view.describePeer(1 - mine);
        std::string message;
        EXPECT_EQ(codeOf([&] { view.postSend(2, out.data(), 1, kTag, s); }, message),
                  ErrorCode::InvalidArgument);
      });
}

// A view says which of its peers left its communicator (peerLeft, what the communicator's
// diagnosis asks before it waits for a peer's report): rank 1 destroys its view of lane A; rank
// 0's receive on lane A fails with PeerLost, after which its view of A says rank 1 left and its
// view of lane B (rank 1 still there) does not.
TEST_P(Lanes, AViewSaysWhichPeerLeftIt) {
  const std::string kind = GetParam();
  std::latch checked(2), left(2), done(2);
  runPair(kind, [&](int rank, Transport& t) {
    std::shared_ptr<Transport> base(&t, [](Transport*) {});
    auto a = std::make_unique<LaneTransport>(base, kLaneA, rank, std::vector<int>{0, 1});
    LaneTransport b(base, kLaneB, rank, std::vector<int>{0, 1});
    if (rank == 1) {
      checked.arrive_and_wait();
      a.reset();
      left.arrive_and_wait();
    } else {
      EXPECT_FALSE(a->peerLeft(1));  // still there
      checked.arrive_and_wait();
      Bytes got(64);
      Request r;
      a->postRecv(1, got.data(), got.size(), kTag, r);
      left.arrive_and_wait();
      std::string message;
      EXPECT_EQ(codeOf([&] { a->wait(r, after(10s)); }, message), ErrorCode::PeerLost) << message;
      EXPECT_TRUE(a->peerLeft(1));
      EXPECT_FALSE(b.peerLeft(1));
      EXPECT_FALSE(a->peerLeft(0));
    }
    done.arrive_and_wait();
  });
}

// A view answers for its shared transport whether large messages go whole (UCX's rendezvous
// pipelines them; braid's TCP and shared-memory transports want chunks), in its own numbering.
TEST_P(Lanes, AViewSaysWhetherItsTransportPipelinesLargeMessages) {
  const std::string kind = GetParam();
  const bool expected = kind.starts_with("ucx");
  runPair(kind, [&](int rank, Transport& t) {
    std::shared_ptr<Transport> base(&t, [](Transport*) {});
    LaneTransport a(base, kLaneA, rank, std::vector<int>{0, 1});
    EXPECT_EQ(t.pipelinesLargeMessages(1 - rank), expected) << kind;
    EXPECT_EQ(a.pipelinesLargeMessages(1 - rank), expected) << kind;
    EXPECT_FALSE(a.pipelinesLargeMessages(rank));  // not a peer
    EXPECT_FALSE(a.pipelinesLargeMessages(2));     // no such rank
  });
}

// A sub-communicator spanning two emulated hosts: {0, 1} on host A share memory (the parent's
// segment, on the child's lane), rank 2 on host B is reached over the parent's TCP connections on
// the child's lane. The child's creation opens no socket and makes no segment, and every pair's
// messages arrive intact.
TEST(LanesTcp, AChildOverTwoHostsUsesTheParentsSegmentAndSockets) {
  auto store = std::make_shared<MemoryStore>();
  std::latch parentsUp(4), childrenUp(4), done(4);
  std::atomic<std::size_t> before{0}, after{0}, segmentsBefore{0}, segmentsAfter{0};
  std::vector<std::string> errors(4);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      errors[static_cast<std::size_t>(r)] = test::errorOf([&] {
        TransportOptions o;
        o.tcp.connectTimeout = 10s;
        o.hostIdentity = r < 2 ? "host-a" : "host-b";
        o.shareConnections = true;
        o.lane = 11;
        auto parent = createTransport(*store, r, 4, o);
        parentsUp.arrive_and_wait();
        if (r == 0) {
          before = tcpSocketsOpened();
          segmentsBefore = shmSegmentsMade();
        }
        std::unique_ptr<RoutedTransport> child;
        if (r < 3) {
          const std::vector<int> members = {0, 1, 2};
          auto childStore = std::make_shared<PrefixStore>(store, "child/");
          TransportOptions co = o;
          co.lane = 22;
          child = createTransport(*childStore, r, 3, co, parent.get(), members);
          for (int p = 0; p < 3; ++p) {
            if (p == r) continue;
            const bool sameHost = (p < 2) == (r < 2);
            EXPECT_EQ(child->pathTo(p).rfind(sameHost ? "shm" : "tcp", 0), 0u)
                << "rank " << r << " to " << p << ": " << child->pathTo(p);
          }
        }
        childrenUp.arrive_and_wait();
        if (r == 0) {
          after = tcpSocketsOpened();
          segmentsAfter = shmSegmentsMade();
        }
        if (child) test::exchangeAll(r, *child, 5003, 5);
        done.arrive_and_wait();
      });
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_EQ(after.load(), before.load());
  EXPECT_EQ(segmentsAfter.load(), segmentsBefore.load());
}

// A lane closed on the sender while a large message of it is in flight (UCX's rendezvous reads
// the communicator's buffer until the receiver takes it): the link to that peer closes, as a TCP
// connection does when a frame is cut, and the buffer may go at once; the peer's requests on
// any lane fail with PeerLost, and nothing hangs.
TEST(LanesUcx, ClosingALaneWithALargeSendInFlightClosesThatLink) {
  if (!ucxAvailable()) GTEST_SKIP() << ucxUnavailableReason();
  for (const char* kind : {"ucx", "ucx_lazy"}) {
    SCOPED_TRACE(kind);
    std::latch closed(2);
    runPair(kind, [&](int rank, Transport& t) {
      t.openLane(kLaneA);
      t.openLane(kLaneB);
      Bytes small(64);
      Request rb;
      std::string message;
      if (rank == 1) {
        // Connect the pair first (lazy), then a large send no receive takes.
        t.postSendOnLane(kLaneB, 0, small.data(), small.size(), kTag, rb);
        t.wait(rb, after(5s));
        auto big = std::make_unique<Bytes>(4 << 20, 9);
        Request ra;
        t.postSendOnLane(kLaneA, 0, big->data(), big->size(), kTag, ra);
        t.closeLane(kLaneA);
        big.reset();  // gone with its communicator
        closed.arrive_and_wait();
        EXPECT_EQ(codeOf(
                      [&] {
                        t.postSendOnLane(kLaneB, 0, small.data(), small.size(), kTag, rb);
                        t.wait(rb, after(5s));
                      },
                      message),
                  ErrorCode::PeerLost)
            << message;
        EXPECT_NE(message.find("destroyed in the middle of a message"), std::string::npos)
            << message;
      } else {
        t.postRecvOnLane(kLaneB, 1, small.data(), small.size(), kTag, rb);
        t.wait(rb, after(5s));
        closed.arrive_and_wait();
        t.postRecvOnLane(kLaneB, 1, small.data(), small.size(), kTag, rb);
        EXPECT_EQ(codeOf([&] { t.wait(rb, after(10s)); }, message), ErrorCode::PeerLost) << message;
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Lanes, testing::ValuesIn(kinds()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace braid::transport
