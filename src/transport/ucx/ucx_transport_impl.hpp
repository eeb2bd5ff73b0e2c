// The UCX transport (built only with UCX; entry points in ucx_transport.hpp, docs/ucx.md).
//
// Wire. Every braid message is one ucp tagged send of a 24-byte header {braid tag, bytes, lane}
// followed, when bytes <= kInlineBytes, by the payload (copied once on each side); a larger
// payload follows as a second tagged send straight from the caller's buffer into the receiver's
// (UCX's rendezvous: zero-copy, registered through UCX's registration cache). The 64 ucp tag
// bits say what a message is, not braid's tag (which needs all 64 bits itself):
//
//   ucp tag  kind[63:62] | sender rank[61:40] | sequence[39:0]
//   kind 0   header of the sender's n-th message to this rank (n = sequence)
//   kind 1   payload of that message (large messages only)
//   kind 2   handshake message of the pair (setup only; sequence all ones: a ring, below)
//   kind 3   goodbye: the sender closed or failed its transport (any sender: probed for);
//            sequence 1: the acknowledgement of this rank's goodbye
//
// Lanes (ucx_lanes.cpp): sub-communicators post on this transport's worker and endpoints, each
// on its own lane, the header's third word; a header whose byte count is all ones is a control
// message saying the sender's communicator on that lane is gone.
//
// Matching is the engine's (engine.hpp), as over TCP and shared memory. The receiver keeps
// exactly one header receive posted per peer, for that peer's next sequence number, so headers
// reach the peer's engine::Inbox in the order the peer sent them whatever UCX's own ordering: a
// collective receive takes the peer's next collective message and fails with Error(Mismatch)
// if its tag or size differs (before anything is written to the caller's buffer); a
// point-to-point receive (kP2PTagBit) takes the peer's first unmatched message of the same
// tag and lane, and one no receive wants yet is held aside: a small one with its payload, a large
// one as its header only (Inbox::rxPark: its payload waits inside UCX until the receive is posted,
// so it still lands zero-copy). A collective message no receive of its lane wants yet is held aside
// too while other receives wait; with none posted at all it stalls the peer's stream, as over TCP:
// it and the headers behind it wait in the peer's backlog. A large payload is received apart from
// the inbox (Inbox::rxDetach), so the next header is taken while it arrives. Requests, deadlines,
// errors and the wait loop are the engine's too.
//
// Connections (docs/architecture.md, "When connections are made"). Every rank's worker address
// is known from creation (the factory's host entries); an endpoint and the pair's handshake
// (common/handshake.hpp: the higher rank initiates, as over TCP) come when the pair is first
// needed (UcxOptions::lazyConnect), or for every pair at creation (eager). Lazy: a send or a
// receive posted to a peer not connected yet starts the pair: a higher rank sends its hello; a
// lower one sends a ring (an empty handshake message) that makes the higher rank send its
// hello, so the initiator is the same whichever side needs the pair first, and two sides
// starting at once need no tie-break. Every peer's handshake messages (and goodbyes) are taken
// by probing after the worker moved something (takeSideMessages), never by a posted any-sender
// receive, which would make UCX search its wildcard queue for every message; a hello from a
// rank not connected yet is answered at once. Sends posted before the pair is authenticated
// wait in the peer's `held` queue, in order; the peer's header receive is posted when the pair
// is authenticated, so nothing an unauthenticated peer sends is taken. A pair not
// authenticated within connectTimeout of its start fails with Timeout naming the peer.
// A pair's handshake needs both workers driven, and a rank may be busy elsewhere (computing,
// or waiting on another communicator) when a peer needs the pair: a lazy transport therefore
// has a connector thread that, while no thread of this rank waits on the transport, sleeps on
// the worker's event fd and drives the worker when it fires (answering handshakes, and moving
// whatever else arrived); while a thread waits, that thread drives it and the connector sleeps
// (waking every 20 ms to look), so it costs the waits nothing. Nor does it sleep on the worker
// in the gaps between a busy rank's waits (kConnectorIdle after the last one): armed there,
// messages arriving for the next operation woke it (about 0.2 times per 8 B allreduce), and on a
// rank bound to one CPU its wake-up took the CPU from the rank (an 8 B allreduce between two
// emulated hosts: 18 us against 11 us without the connector, docs/benchmarks.md). A busy rank's own
// waits answer handshakes. As over TCP, where a lazy transport's acceptor thread answers dials, a
// small send to a peer not connected yet then completes without the peer's calling into braid.
//
// Progress. Whoever waits drives the worker under the engine's lock, in the engine's wait loop
// (engine::waitLoop): it polls for `spin`, then arms the worker (ucp_worker_arm) and sleeps in
// epoll on the worker's event fd and a wake-up eventfd; while a large payload of this rank is
// in flight it keeps polling instead (UCX's shared-memory rendezvous raises no events). There
// is no background thread: a send progresses while its rank waits on anything of this
// transport.
//
// Failure. Endpoints use UCX's peer error handling: a peer whose process dies or whose
// connection breaks fails every pending and later request with it with Error(PeerLost) naming
// it. A transport that closes (or fails, or is aborted) first sends every peer a goodbye
// carrying how many messages it sent, so peers fail the receives it will never satisfy with
// PeerLost at once; a transport that closes waits (bounded) for the acknowledgements of the
// peers that have not said goodbye themselves before it closes its endpoints, so no message
// still queued in its sockets is lost to a reset.
// A wait past its deadline fails the whole transport with Error(Timeout)
// naming the peer; abort() with Error(Aborted); before such a request is reported failed, UCX
// has given its buffer back (receives cancelled, endpoints closed).
#pragma once

#include <sys/types.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/fd.hpp"
#include "common/handshake.hpp"
#include "common/little_endian.hpp"
#include "common/peer_policy.hpp"
#include "common/recycling_queue.hpp"
#include "transport/engine.hpp"
#include "transport/lane_book.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport::ucx {

/// {braid tag, bytes, lane}, little-endian.
inline constexpr std::size_t kHeaderBytes = 24;
/// A header whose byte count is all ones is a control message: tag kLaneDestroyed or
/// kLaneAborted says that the sender's communicator on the header's lane is gone.
inline constexpr std::uint64_t kControlBytes = ~std::uint64_t{0};
inline constexpr std::uint64_t kLaneDestroyed = 1;
inline constexpr std::uint64_t kLaneAborted = 2;
/// Payloads up to this size travel inside the header message.
inline constexpr std::size_t kInlineBytes = 8192;
/// A held header's slot (PeerState::backlog) keeps a payload's storage up to this size for the
/// next message that arrives before its receive.
inline constexpr std::size_t kKeptPayloadBytes = 1024;
/// The connector thread (lazy) leaves the worker to the rank until this long after the rank's
/// last wait: a rank between operations drives it again soon, and a handshake waits at most
/// this long longer for an answer from a rank that stopped calling braid.
inline constexpr std::chrono::milliseconds kConnectorIdle{20};
/// How often the connector thread looks at the worker while a pair is being set up or a peer
/// may still start one (a new pair's first message raises no worker event), in ms.
inline constexpr int kConnectorPoll = 50;

enum class Kind : std::uint64_t { Header = 0, Payload = 1, Handshake = 2, Goodbye = 3 };
/// The sequence field of a ring (Kind::Handshake): "send me your hello".
inline constexpr std::uint64_t kRingSeq = (std::uint64_t{1} << 40) - 1;
/// The sequence field of a Kind::Goodbye message that acknowledges the peer's goodbye (a goodbye
/// itself has 0): the goodbye, and so everything sent before it, left the sender's socket.
inline constexpr std::uint64_t kGoodbyeAckSeq = 1;
inline constexpr int kRankBits = 22;
inline constexpr int kSeqBits = 40;
inline constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << kSeqBits) - 1;
inline constexpr std::uint64_t kKindMask = std::uint64_t{3} << 62;
inline constexpr std::uint64_t kFullMask = ~std::uint64_t{0};
inline constexpr int kMaxRanks = 1 << kRankBits;
/// How long a peer whose endpoint broke, or that said goodbye, keeps what is in flight from it
/// or to it: completions that were on their way when the news came (a rendezvous
/// acknowledgement, bytes still in a socket) land meanwhile; what is still pending then fails
/// with PeerLost.
inline constexpr std::chrono::milliseconds kGrace{500};

inline ucp_tag_t makeTag(Kind kind, int sender, std::uint64_t seq) {
  return (static_cast<std::uint64_t>(kind) << 62) |
         (static_cast<std::uint64_t>(sender) << kSeqBits) | (seq & kSeqMask);
}
inline int senderOf(ucp_tag_t tag) {
  return static_cast<int>((tag >> kSeqBits) & ((std::uint64_t{1} << kRankBits) - 1));
}

class UcxTransport;

/// One outstanding ucp operation: what its callback fills in.
struct Slot {
  enum class Owner : std::uint8_t { Send, PayloadRecv, Header, Goodbye, Handshake, Other };
  UcxTransport* self = nullptr;
  Owner owner = Owner::Other;
  void* handle = nullptr;  // the ucp request, freed once fired
  bool outstanding = false;
  bool fired = false;
  ucs_status_t status = UCS_OK;
  std::size_t length = 0;
  ucp_tag_t senderTag = 0;
  void* op = nullptr;  // Op* (Send, PayloadRecv); nullptr otherwise
  int peer = -1;
  ucp_tag_recv_info_t info{};  // receives: where an immediate completion is described
};

/// The ucp operations of one braid request: a send (header, and the payload of a large one),
/// or the payload receive of a large message (Inbox::rxDetach).
struct Op {
  enum class Fail : std::uint8_t { None, Peer, Transport };  // where its error lives
  Request* req = nullptr;  // nullptr once its lane closed (endLaneRequests): nobody is told
  int peer = -1;
  // The request's, kept here: the Op may outlive a detached request.
  bool isSend = false;
  std::size_t bytes = 0;
  std::uint64_t tag = 0;
  std::uint64_t lane = 0;
  std::uint64_t seq = 0;           // sends: this message's sequence number
  int pending = 0;                 // ucp operations still outstanding
  std::vector<std::uint8_t> wire;  // sends: the header (+ inline payload)
  Fail fail = Fail::None;          // it failed while ucp operations were outstanding
  Slot slots[2];
  std::size_t liveIndex = 0;  // its place in UcxTransport::live_
};

/// A header taken from UCX that the peer's inbox has not taken yet (it stalls on a collective
/// message no receive wants yet).
struct Arrived {
  std::uint64_t tag = 0;  // (control: its kind)
  std::uint64_t lane = 0;
  bool control = false;  // a lane-gone control header (ucx_lanes.cpp), kept in order
  std::size_t bytes = 0;
  std::uint64_t seq = 0;
  std::vector<std::uint8_t> payload;  // inline payloads only

  /// Every field but the payload's storage set anew (RecyclingQueue hands out used ones).
  void reset(std::uint64_t t, std::uint64_t l, bool isControl, std::size_t n, std::uint64_t s) {
    tag = t;
    lane = l;
    control = isControl;
    bytes = n;
    seq = s;
    payload.clear();
  }
};

struct PeerState {
  /// Idle: nothing sent or received yet (lazy); Linking: endpoint made, handshake under way;
  /// Ready: authenticated, header receive posted.
  enum class Link : std::uint8_t { Idle, Linking, Ready };
  ucp_ep_h ep = nullptr;
  std::string description;            // "rank 3 (host h, pid 123)"
  std::vector<std::uint8_t> address;  // the peer's worker address (dropped once connected)
  Link link = Link::Idle;
  std::uint64_t sendSeq = 0;
  std::uint64_t recvSeq = 0;  // the sequence the posted header receive waits for
  std::vector<std::uint8_t> headerBuf;
  Slot header;
  engine::Inbox inbox;
  RecyclingQueue<Arrived> backlog;  // (an inline payload keeps its storage for the next one)
  /// The large messages held with their payload inside UCX (rxPark), in arrival order (the
  /// inbox takes held messages of one tag and lane in that order too).
  struct Parked {
    std::uint64_t tag;
    std::uint64_t lane;
    std::uint64_t seq;
  };
  std::deque<Parked> parked;
  /// Lanes whose communicator the peer said is gone there (its control message), with the error
  /// of this rank's operations with it on them.
  std::unordered_map<std::uint64_t, Error> laneGone;
  /// Lanes closed (false) or aborted (true) here to tell the peer once the pair is connected.
  std::vector<std::pair<std::uint64_t, bool>> untold;
  std::optional<Error> error;                 // the link failed (PeerLost, Mismatch)
  std::optional<std::uint64_t> finalSeq;      // a goodbye said: no header at or past this one
  std::optional<Error> broken;                // UCX reported the endpoint failed
  std::optional<Error> ended;                 // its goodbye came and every message before it
  std::optional<Clock::time_point> doomedAt;  // broken or ended: failed after kGrace

  std::string goodbyeReason;
  bool goodbyeSent = false;   // this rank's goodbye went to the peer (sendGoodbyes)
  bool goodbyeAcked = false;  // and the peer acknowledged it (teardown waits for that)
  // While Linking: the handshake (one side, by rank order), since when, why it has not
  // finished, and the sends posted meanwhile (in order; started once Ready).
  std::unique_ptr<security::Initiator> initiator;
  std::unique_ptr<security::Responder> responder;
  Clock::time_point linkStarted{};
  std::string lastError = "none";
  std::deque<Op*> held;
};

// Shared by the transport's files (ucx_transport.cpp, ucx_link.cpp).
std::string msText(std::chrono::milliseconds ms);
std::string statusText(ucs_status_t s);
void sendDone(void*, ucs_status_t status, void* user);
void recvDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user);
void endpointFailed(void* arg, ucp_ep_h, ucs_status_t status);
/// Before a ucp call that completes into `s`.
void arm(Slot& s, UcxTransport* self, Slot::Owner owner);
/// After it: a request to wait for, an immediate completion, or an immediate error.
void launched(Slot& s, ucs_status_ptr_t p, const ucp_tag_recv_info_t* info = nullptr);
void checkUcs(ucs_status_t s, const std::string& self, const char* what);

struct EndpointArg {
  UcxTransport* self = nullptr;
  int peer = -1;
};

class UcxTransport final : public Transport, private engine::CompletionSink {
 public:
  /// Creates the context and the worker (UCX reads its variables here); published() is then
  /// what the peers need to reach this rank. Nothing is connected until connect().
  UcxTransport(int rank, int size, const UcxOptions& options);
  ~UcxTransport() override;
  /// {u32 description bytes, description, worker address}.
  const std::vector<std::uint8_t>& published() const noexcept { return published_; }
  /// Every peer's published() from lookup(peer, time left); then, eager, an endpoint to every
  /// peer and every pair's handshake, all within connectTimeout (collective); lazy, nothing
  /// more until a pair is first used.
  using Lookup = std::function<std::vector<std::uint8_t>(int peer, std::chrono::milliseconds left)>;
  void connect(const Lookup& lookup);
  /// UcxOptions::busyPoll, decided after open() (before connect()).
  void setBusyPoll(bool on) noexcept { busyPoll_ = on; }
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override;
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override;
  bool test(Request& req) override;
  void wait(Request& req, Deadline deadline) override;
  std::string describePeer(int peer) const override;
  /// A large payload is one rendezvous, which UCX moves in its own pieces (RDMA reads, or
  /// active messages of UCX's tcp receive segment) without a handshake per piece.
  bool pipelinesLargeMessages(int peer) const override {
    return peer >= 0 && peer < size_ && peer != rank_;
  }
  void abort(const std::string& why) override;
  // Lanes (ucx_lanes.cpp; docs/architecture.md, "Shared connections").
  bool carriesLanes() const override { return true; }
  void openLane(std::uint64_t lane, std::vector<int> peers) override;
  void closeLane(std::uint64_t lane) override;
  void abortLane(std::uint64_t lane, const std::string& why) override;
  bool peerLeftLane(std::uint64_t lane, int peer) const override;
  void postSendOnLane(std::uint64_t lane, int peer, const void* data, std::size_t bytes,
                      std::uint64_t tag, Request& req) override;
  void postRecvOnLane(std::uint64_t lane, int peer, void* data, std::size_t bytes,
                      std::uint64_t tag, Request& req) override;
  /// Endpoints this rank made (to a peer it needed, or one that connected to it).
  std::size_t connectionCount() const override {
    return endpoints_.load(std::memory_order_relaxed);
  }

  // Called by UCX's callbacks (mu_ held: they run inside ucp_worker_progress).
  void onFired(Slot* slot) { fired_.push_back(slot); }
  void onEndpointError(int peer, ucs_status_t status);

 private:
  // engine::CompletionSink (mu_ held).
  void finish(Request& req, Request::State state, bool peerError) override;
  void finishAlone(Request& req, Error error) override;
  std::string tagText(std::uint64_t tag) const override { return describeTag(tag); }
  void mismatchSeen(int peer, std::uint64_t expected, std::uint64_t received) const override {
    noteMismatch(peer, expected, received);
  }
  void mismatchSeenOnLane(int peer, std::uint64_t expected, std::uint64_t received,
                          std::uint64_t lane) const override {
    noteMismatch(peer, expected, received, lane);
  }

  void open();
  void openWaitFds(Fd& wake, Fd& epoll) const;
  // Connections (ucx_link.cpp); all but connect() require mu_.
  void awaitLinks(Deadline deadline);
  void makeEndpoint(int peer);
  bool failureDetectionWorks();
  void startLink(int peer, bool ring);
  void onHandshake(int peer, std::uint64_t seq, std::span<const std::uint8_t> bytes);
  void handshakeStep(int peer, std::span<const std::uint8_t> bytes);
  void linkReady(int peer);
  void endLink(int peer);
  void checkLinks();
  std::string linkReason(int peer) const;
  void connectorLoop();
  void stopConnector();
  void sendSide(int peer, Kind kind, std::uint64_t seq, std::vector<std::uint8_t> bytes);
  void sleep(Deadline until);
  void teardown();
  void discardUnexpected();
  void prepare(const char* op, int peer, const void* data, std::size_t bytes, std::uint64_t tag,
               bool isSend, Request& req);
  // (mu_) The posted request (its lane set) goes to the peer.
  void send(Request& req);
  void receive(Request& req);
  bool laneFailed(Request& req);
  bool laneClosed(std::uint64_t lane) const { return lanes_.closed(lane); }
  void tellLanePeers(std::uint64_t lane, const std::vector<int>& peers, bool aborted);
  void sendLaneGone(int peer, std::uint64_t lane, bool aborted);
  void onLaneGone(int peer, std::uint64_t lane, std::uint64_t kind);
  void endLaneRequests(std::uint64_t lane, Op::Fail why);
  // Everything below requires mu_.
  void progress();
  void drain();
  void startSend(Op* op, const void* data);
  void postHeaderRecv(int peer);
  void postTagRecv(Slot& s, void* data, std::size_t bytes, ucp_tag_t tag, ucp_tag_t mask);
  void takeSideMessages();
  void onHeader(int peer);
  bool take(int peer, std::uint64_t tag, std::uint64_t lane, std::size_t bytes, std::uint64_t seq,
            const std::uint8_t* payload);
  void deliver(int peer);
  /// After a header or a goodbye: a peer whose goodbye said no header comes past the last one
  /// taken is ended (endPeer) once its backlog is empty.
  void endCheck(int peer) {
    if (peers_[static_cast<std::size_t>(peer)].finalSeq) [[unlikely]]
      endPeer(peer);
  }
  void endPeer(int peer);
  // drain()'s rare cases, out of line (ucx_completions.cpp).
  [[gnu::cold]] void opSlotFailed(const Slot& s, Op& op);
  [[gnu::cold]] void headerSlotFailed(const Slot& s);
  [[gnu::cold]] void malformedHeader(int peer, std::size_t got);
  void onGoodbyeSlot(const Slot& s);
  void startPayloadRecv(Request& req, std::uint64_t seq);
  Op* newOp(int peer, Request& req);
  void finishOp(Op* op);
  void failHeld(PeerState& ps, Op::Fail why);
  void failPeer(int peer, Error error);
  void doom(int peer);
  void reap();
  void failTransport(Error error);
  void settle(std::chrono::milliseconds bound, bool sideOnly);
  void progressUntil(Deadline until, const std::function<bool()>& done, bool onEvents);
  void flush(std::chrono::milliseconds bound);
  void sendGoodbyes(const std::string& why);
  void awaitGoodbyeAcks(std::chrono::milliseconds bound);
  void closeEndpoints();
  void kick();
  [[noreturn]] void throwFailure(const Request& req) const;
  const std::optional<Error>& peerError(int peer) const;
  std::string stallReason(const Request& req) const;
  bool anyOutstanding(bool sideOnly) const;
  int payloadsInFlight() const;

  const int rank_;
  const int size_;
  const UcxOptions options_;
  bool busyPoll_;                        // options_.busyPoll, or setBusyPoll's
  std::string self_;                     // "rank 0 (host h, pid 1)"
  std::vector<std::uint8_t> published_;  // open(): what connect() on the peers needs

  engine::Engine engine_;
  std::mutex& mu_;  // engine_.mutex()
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int workerFd_ = -1;
  Fd wakeFd_;
  Fd epollFd_;
  std::vector<PeerState> peers_;
  std::vector<Slot*> fired_;
  std::vector<Slot*> batch_;  // drain(): the completions it is handling
  bool draining_ = false;
  // Goodbyes and handshakes (any sender) are not received by posted receives but probed for
  // after the worker moved something (takeSideMessages): a posted receive whose tag mask is
  // not full makes UCX search its wildcard queue for every message that arrives.
  std::vector<std::uint8_t> goodbyeBuf_;
  Slot goodbye_;
  bool sideLeft_ = true;  // a side message may still wait in UCX's unexpected queue
  std::list<std::pair<std::vector<std::uint8_t>, Slot>> sideSends_;  // goodbyes, handshakes
  // Every Op not yet finished (unordered: an Op knows its index, so it leaves in O(1)), and
  // finished ones kept for reuse (with their wire buffers), so a small message allocates nothing.
  std::vector<Op*> live_;
  std::vector<std::unique_ptr<Op>> spareOps_;
  std::vector<EndpointArg> endpointArgs_;
  const security::PeerPolicy policy_;
  std::vector<std::uint8_t> hsBuf_;  // the one handshake being received (any peer)
  Slot hs_;
  std::vector<int> linking_;  // peers whose link is Linking
  std::string lastDrop_;      // the last handshake a responder dropped
  std::atomic<std::size_t> endpoints_{0};
  LaneBook lanes_;                 // (mu_)
  std::optional<bool> selfProbe_;  // failureDetectionWorks()
  bool tearingDown_ = false;
  // Lazy: the connector thread answers peers' handshakes (and drives the worker) while no
  // thread of this rank waits on the transport; waiting_ counts those that do (mu_), and
  // lastDriven_ is when one of them last drove the worker (mu_): the connector stays off the
  // worker until kConnectorIdle passed since (connectorLoop).
  int waiting_ = 0;
  std::chrono::steady_clock::time_point lastDriven_{};
  bool stopping_ = false;
  std::condition_variable connectorCv_;
  Fd connectorWake_;
  Fd connectorEpoll_;
  std::thread connector_;
  bool closing_ = false;
  int sleepers_ = 0;
  int doomed_ = 0;
};

}  // namespace braid::transport::ucx
