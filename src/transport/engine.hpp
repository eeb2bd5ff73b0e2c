// The message engine under every transport (tcp, shm, inproc, ucx): what a transport
// does with requests, written once, so that a transport itself only moves bytes and reports
// completions.
//
//   - Request lifecycle: armRequest() checks and fills a posted request (Idle -> Pending);
//     the transport reports each one's end through CompletionSink::finish (-> Done / Failed);
//     Engine::publish() stores the state last and remembers where the error lives.
//   - Per-peer queues: RequestQueue, an intrusive FIFO through Request::next (sends waiting
//     to be written, receives waiting for their message).
//   - Matching (Inbox, one per peer): an incoming message header {tag, bytes} goes to the first
//     posted non-P2P receive when it is not P2P (a message that finds none stalls the stream:
//     it waits where it is until one is posted), and to the first posted receive of its tag
//     when it is P2P (kP2PTagBit), else it is held aside (Inbox::Held, the only allocation on
//     the receive path) until a receive of its tag is posted. A non-P2P receive whose tag or
//     size differs from its message fails with mismatchError() (the observer told first), and
//     with it the peer's stream (the ranks called different collectives). A P2P receive whose
//     size differs from the first message of its tag fails alone, with its own mismatchError():
//     the message stays first in line for the next receive of its tag, the stream goes on.
//   - Errors: Timeout (timeoutError: the peer, the direction, the size and why the request
//     stalls), Mismatch, PeerLost and Aborted are Error values kept by the peer (its link
//     failed), by the Engine (the whole transport failed) or, for a P2P size mismatch, by the
//     Engine for that request alone (CompletionSink::finishAlone); Engine::throwFailure() throws
//     the right one for a failed request.
//   - Waiting: waitLoop() is the one wait policy: poll without yielding for busyPoll, then poll
//     and yield the CPU between polls until `spin`, then sleep through the transport's hook
//     ("sleep until something may have moved": epoll_wait, a futex, a condition variable),
//     until the request completes, fails, or the deadline passes.
//
// A transport therefore supplies, per peer, a byte mover that calls Inbox::arrive() for each
// incoming header, writes the payload where Inbox::rxSpace() says and finishes sends itself;
// and, per transport, an Engine::Hooks (poll, sleep, notify, close every peer) for the wait.
#pragma once

#include <braid/error.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.hpp"

namespace braid::transport::engine {

using State = Request::State;

inline bool isP2P(std::uint64_t tag) noexcept {
  return (tag & kP2PTagBit) != 0;
}

/// Intrusive FIFO of requests linked through Request::next. Not thread-safe.
class RequestQueue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  Request* front() const noexcept { return head_; }
  void push(Request& r) noexcept {
    r.next = nullptr;
    if (tail_ != nullptr)
      tail_->next = &r;
    else
      head_ = &r;
    tail_ = &r;
  }
  /// Removes and returns the first request (the queue must not be empty).
  Request* pop() noexcept {
    Request* r = head_;
    head_ = r->next;
    if (head_ == nullptr) tail_ = nullptr;
    r->next = nullptr;
    return r;
  }
  /// Unlinks `r` whose predecessor is `prev` (nullptr: r is the first).
  void unlink(Request* prev, Request& r) noexcept {
    (prev != nullptr ? prev->next : head_) = r.next;
    if (tail_ == &r) tail_ = prev;
    r.next = nullptr;
  }
  /// Removes `r` if queued; false if it is not.
  bool remove(Request& r) noexcept {
    Request* prev = nullptr;
    for (Request* cur = head_; cur != nullptr; prev = cur, cur = cur->next)
      if (cur == &r) {
        unlink(prev, r);
        return true;
      }
    return false;
  }
  /// Unlinks every request for which pred(request) holds, calling fn(request) for each in order
  /// after unlinking it (fn may finish it: its link is read first).
  template <class Pred, class Fn>
  void removeIf(Pred&& pred, Fn&& fn) {
    Request* prev = nullptr;
    for (Request* r = head_; r != nullptr;) {
      Request* next = r->next;
      if (pred(*r)) {
        unlink(prev, *r);
        fn(*r);
      } else {
        prev = r;
      }
      r = next;
    }
  }
  /// Empties the queue, calling fn(request) for each in order (a failure: the request's owner
  /// may reuse it as soon as fn finished it, so its link is read first).
  template <class Fn>
  void drain(Fn&& fn) {
    Request* r = head_;
    head_ = tail_ = nullptr;
    while (r != nullptr) {
      Request* next = r->next;
      fn(*r);
      r = next;
    }
  }

 private:
  Request* head_ = nullptr;
  Request* tail_ = nullptr;
};

/// What a transport's per-peer byte mover reports to its transport, with the lock that guards
/// the peer held.
class CompletionSink {
 public:
  /// `req` left the peer: Done, or Failed with the error kept by the peer (peerError) or by the
  /// transport. The sink publishes the state; the peer no longer touches req.
  virtual void finish(Request& req, State state, bool peerError) = 0;
  /// `req` left the peer Failed with `error`, its own (a P2P receive whose size differs from its
  /// message), not the peer's or the transport's. As finish(), with Engine::publishAlone.
  virtual void finishAlone(Request& req, Error error) = 0;
  /// The tag in words, for Mismatch errors (never throws).
  virtual std::string tagText(std::uint64_t tag) const = 0;
  /// A receive from `peer` expected tag `expected` but the peer sent `received`.
  virtual void mismatchSeen(int peer, std::uint64_t expected, std::uint64_t received) const = 0;
  /// The same, for a receive of `lane` (transports with lanes override it).
  virtual void mismatchSeenOnLane(int peer, std::uint64_t expected, std::uint64_t received,
                                  std::uint64_t lane) const {
    (void)lane;
    mismatchSeen(peer, expected, received);
  }

 protected:
  ~CompletionSink() = default;
};

/// Error(Mismatch): "rank S expected <tag> (N bytes) from <peer> but received <tag> (M bytes)";
/// tells the sink's observer first.
Error mismatchError(const CompletionSink& sink, int selfRank, int peerRank,
                    const std::string& peerDescription, const Request& expected, std::uint64_t tag,
                    std::size_t bytes);

/// Error(Timeout): "rank R timed out waiting for a send of N bytes to <peer>[: <why>]" (or "a
/// recv of N bytes from").
Error timeoutError(int selfRank, const Request& req, const std::string& peerDescription,
                   const std::string& why);

/// Checks a post: throws Error(InvalidArgument) naming `op`, this rank and the peer when
/// `peer` is outside [0, size), this rank, or not `reachable` (`scope` then says what the
/// transport reaches, e.g. " over shared memory"; `note()` is added inside the parentheses after
/// the size), for a null buffer of a non-empty message, and for a request still pending.
/// `describe(peer)` names the peer in those errors. Both are called only to build an error.
[[noreturn]] void throwUnreachable(const char* op, int rank, int size, int peer, const char* scope,
                                   const std::string& note);
[[noreturn]] void throwNullBuffer(const char* op, std::size_t bytes, const std::string& peer);
[[noreturn]] void throwStillPending(const char* op, const std::string& peer);
template <class Note, class Describe>
void checkPost(const Request& req, const char* op, int rank, int size, int peer, const void* data,
               std::size_t bytes, bool reachable, const char* scope, Note&& note,
               Describe&& describe) {
  if (peer < 0 || peer >= size || peer == rank || !reachable)
    throwUnreachable(op, rank, size, peer, scope, note());
  if (data == nullptr && bytes > 0) throwNullBuffer(op, bytes, describe(peer));
  if (req.state.load(std::memory_order_acquire) == State::Pending)
    throwStillPending(op, describe(peer));
}

/// Fills a checked request for its post: Idle -> Pending.
inline void arm(Request& req, bool isSend, int peer, const void* data, std::size_t bytes,
                std::uint64_t tag) noexcept {
  req.isSend = isSend;
  req.peer = peer;
  req.tag = tag;
  req.lane = 0;
  req.data = static_cast<std::uint8_t*>(const_cast<void*>(data));
  req.bytes = bytes;
  req.progress = 0;
  req.aux = 0;
  req.next = nullptr;
  req.state.store(State::Pending, std::memory_order_release);
}

/// checkPost() then arm().
template <class Note, class Describe>
void armRequest(Request& req, const char* op, int rank, int size, int peer, const void* data,
                std::size_t bytes, std::uint64_t tag, bool isSend, bool reachable,
                const char* scope, Note&& note, Describe&& describe) {
  checkPost(req, op, rank, size, peer, data, bytes, reachable, scope, note, describe);
  arm(req, isSend, peer, data, bytes, tag);
}

/// The receive side of one peer: posted receives, P2P messages held aside, and the message
/// whose payload is arriving (into a request or into a held message). Not thread-safe: the
/// transport calls it with the lock that guards the peer held. Completions go to the sink.
class Inbox {
 public:
  /// A P2P message that arrived before its receive. `data` holds what has arrived so far: it
  /// grows with the bytes, not with what the header announced.
  struct Held {
    std::uint64_t tag = 0;
    std::uint64_t lane = 0;
    std::size_t bytes = 0;
    bool discard = false;  // of a closed lane: dropped once complete
    std::vector<std::uint8_t> data;
  };

  Inbox() = default;
  Inbox(int selfRank, int peerRank, std::string description, CompletionSink& sink)
      : self_(selfRank), peer_(peerRank), description_(std::move(description)), sink_(&sink) {}

  const std::string& description() const noexcept { return description_; }
  void setDescription(std::string description) { description_ = std::move(description); }
  int peerRank() const noexcept { return peer_; }

  enum class Posted {
    Queued,     // waits for its message
    Done,       // a held message filled it (finished)
    Receiving,  // a held message still arriving: the rest goes straight into it
    Mismatch,   // a held non-P2P message differs: `error` says so (not finished)
    Failed,     // P2P: the first held message of its tag has another size; the receive failed
                // with its own Mismatch (finished), the message stays held
  };
  /// A receive was posted: takes a held message of its lane if there is one (P2P: the first of
  /// its tag, which must have its size; else the first non-P2P one, which must match it
  /// exactly), else queues it.
  Posted post(Request& req, std::optional<Error>& error);

  enum class Arrival {
    Stall,      // a non-P2P message and no non-P2P receive posted: leave it where it is
    Receiving,  // matched, or held aside: the payload goes to rxSpace()
    Done,       // matched an empty message (finished), or an empty P2P message held
    Mismatch,   // the first eligible receive differs: `error` says so
    TooLarge,   // a P2P message of more than maxHeldBytes and no receive for it
  };
  /// A message header {tag, bytes} of lane `lane` arrived (nothing may be receiving()). A P2P
  /// message goes to the first posted receive of its tag and lane; one of another size fails
  /// (finished with its own Mismatch) and the message goes on to the next; with none it is
  /// held aside. A non-P2P message goes to the first posted non-P2P receive of its lane
  /// (Mismatch when its tag or size differs); when there is none
  /// it stalls, unless `holdWhileOthersWait` and some receive (of any lane or tag) is posted:
  /// then it is held aside like an early P2P message, so that it never stands between a waiting
  /// receive and its message (docs/architecture.md, "Shared connections"). `discard`: the lane
  /// is closed; the message is taken in and dropped.
  Arrival arrive(std::uint64_t tag, std::size_t bytes, std::size_t maxHeldBytes,
                 std::optional<Error>& error, std::uint64_t lane = 0,
                 bool holdWhileOthersWait = false, bool discard = false);

  /// A payload is arriving.
  bool receiving() const noexcept { return rxRequest_ != nullptr || rxHeld_ != nullptr; }
  /// The request it goes into (nullptr while it goes into a held message).
  Request* receivingRequest() const noexcept { return rxRequest_; }
  /// Bytes of that payload still to come, and its total.
  std::size_t rxRemaining() const noexcept;
  std::size_t rxBytes() const noexcept;
  /// Where the next min(want, rxRemaining()) bytes of the payload go; a held message grows to
  /// take them. nullptr when this host cannot hold them (bad_alloc): fail the peer with
  /// cannotHold().
  std::uint8_t* rxSpace(std::size_t want) noexcept;
  /// `n` bytes were written at the last rxSpace() (at most what it was asked for).
  void rxCommit(std::size_t n) noexcept;
  /// The payload is complete: finishes its request, or keeps the held message for its receive.
  void rxComplete();
  /// Error(Internal): this host cannot hold the held message being received (rxSpace() gave
  /// nullptr) until its receive is posted.
  Error cannotHold() const;
  /// For a transport whose large payloads travel apart from their header (UCX: a rendezvous of
  /// their own, straight into the receiver's buffer), so that the inbox takes the next header
  /// at once. rxDetach(): the payload goes into receivingRequest(), which the transport now
  /// receives and finishes (through the sink) itself; returns that request. rxPark(): it is a
  /// held P2P message whose payload stays with the transport; post() of a receive of its tag
  /// then answers Receiving with nothing copied, and the transport rxDetach()es that request
  /// and fetches the payload into it.
  Request* rxDetach() noexcept {
    Request* r = rxRequest_;
    rxRequest_ = nullptr;
    return r;
  }
  void rxPark() noexcept { rxHeld_ = nullptr; }

  /// The first posted receive (nullptr if none), for error texts.
  Request* firstPosted() const noexcept { return recvs_.front(); }
  bool hasPosted() const noexcept { return !recvs_.empty(); }
  /// Whether some posted receive (or the one arriving) has at least `bytes`; only those that
  /// are not Request::attended unless `attendedToo`.
  bool anyPostedAtLeast(std::size_t bytes, bool attendedToo) const noexcept;
  /// Takes a posted receive out (a deadline passed); false if it is not queued.
  bool withdraw(Request& req) noexcept { return recvs_.remove(req); }
  /// "; messages from <peer> that no receive has taken: <tag> (N bytes) ...", or "".
  std::string heldText(const std::string& peer) const;
  /// Fails the arriving request and every posted receive (finish(Failed, peerError)), drops the
  /// held messages.
  void failAll(bool peerError);
  /// Fails the posted receives of `lane` (finish(Failed, false)). False, failing nothing, when a
  /// payload of the lane is arriving into a request (the frame cannot be cut).
  bool failLane(std::uint64_t lane);
  /// Drops the held messages of `lane` (one still arriving is dropped once complete).
  void dropLane(std::uint64_t lane);

 private:
  int self_ = -1;
  int peer_ = -1;
  std::string description_;
  CompletionSink* sink_ = nullptr;
  RequestQueue recvs_;
  Request* rxRequest_ = nullptr;
  Held* rxHeld_ = nullptr;
  std::size_t heldAsked_ = 0;  // what the last rxSpace() grew the held message by
  std::list<Held> held_;

  /// Fails `req` (a P2P receive, not queued) with its own Mismatch against a message of
  /// {tag, bytes}.
  void failAlone(Request& req, std::uint64_t tag, std::size_t bytes);
  /// From `r`, the first posted receive of a P2P message {tag, bytes} of `lane`: fails those of
  /// its tag and lane with another size on the way (failAlone) and returns the first of its size
  /// (`prev` then its predecessor), or nullptr.
  Request* failOtherSizes(Request*& prev, Request* r, std::uint64_t tag, std::size_t bytes,
                          std::uint64_t lane);
};

/// How a waiter spends its time before it sleeps.
struct WaitPolicy {
  /// Poll this long in all...
  std::chrono::microseconds spin{50};
  /// ... the first busyPoll of it without yielding the CPU between polls.
  std::chrono::microseconds busyPoll{0};
};

inline void cpuRelax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// The one wait loop. With `lk` held: until `req` is no longer Pending, or the deadline passes
/// (timedOut(req) must then throw or withdraw it), calls poll() (move bytes without blocking),
/// between polls releases `lk` and relaxes (busy phase) or yields (until policy.spin), and after
/// the spin calls sleep(deadline) (sleep until something may have moved, or a bound of the
/// transport's). Returns once `req` is Done or Idle; calls failed(req) (which throws) once it
/// is Failed.
template <class Poll, class Sleep, class Failed, class TimedOut>
void waitLoop(std::unique_lock<std::mutex>& lk, Request& req, Deadline deadline,
              const WaitPolicy& policy, Poll&& poll, Sleep&& sleep, Failed&& failed,
              TimedOut&& timedOut) {
  const auto start = Clock::now();
  const auto spinUntil = start + policy.spin;
  const auto busyUntil = start + std::min<Clock::duration>(policy.spin, policy.busyPoll);
  for (;;) {
    const State s = req.state.load(std::memory_order_acquire);
    if (s == State::Done || s == State::Idle) return;
    if (s == State::Failed) failed(req);
    const auto now = Clock::now();
    if (now >= deadline) {
      timedOut(req);
      continue;
    }
    if (now >= spinUntil) {
      sleep(deadline);
      continue;
    }
    poll();
    if (req.state.load(std::memory_order_acquire) != State::Pending) continue;
    // Let posting threads of this rank in between polls. While the peer is most likely running
    // and about to answer, poll without giving up the CPU (a yield costs about a microsecond
    // and may run someone else for much longer); after that, give the CPU to a runnable thread
    // (on an oversubscribed machine, likely the very peer this rank waits for).
    lk.unlock();
    if (now < busyUntil)
      cpuRelax();
    else
      std::this_thread::yield();
    lk.lock();
  }
}

/// The transport-wide half of the engine: the lock that guards every peer, the transport's own
/// failure, and the completions published since the last notify.
class Engine {
 public:
  explicit Engine(int rank) : rank_(rank) {}

  int rank() const noexcept { return rank_; }
  std::mutex& mutex() noexcept { return mu_; }

  // Everything below requires mutex().

  /// The last touch of a request that left its peer: records where its error lives and stores
  /// the state (its owner may reuse or destroy it as soon as it sees the new state).
  void publish(Request& req, State state, bool peerError) noexcept {
    req.aux = state == State::Done ? 0 : peerError ? kAuxPeerError : kAuxTransportError;
    req.next = nullptr;
    completed_ = true;
    req.state.store(state, std::memory_order_release);
  }
  /// publish(req, Failed) with an error of its own (CompletionSink::finishAlone), which
  /// throwFailure() throws for it.
  void publishAlone(Request& req, Error error);
  /// True (once) when a request was published since the last call, or the transport failed.
  bool takeCompleted() noexcept {
    const bool c = completed_;
    completed_ = false;
    return c;
  }
  void markCompleted() noexcept { completed_ = true; }
  /// Whether a Failed request failed with the transport's error rather than its peer's (for a
  /// transport with lanes: or with its lane's).
  static bool failedByTransport(const Request& req) noexcept {
    return (req.aux & kAuxTransportError) != 0;
  }
  /// Whether a Failed request failed with an error of its own (publishAlone).
  static bool failedAlone(const Request& req) noexcept { return (req.aux & kAuxOwnError) != 0; }
  /// The transport's failure (Timeout, Aborted, Internal), if any: every later request fails
  /// with it.
  const std::optional<Error>& failure() const noexcept { return failed_; }
  /// Records the first failure; false if the transport had failed already.
  bool fail(Error error) {
    if (failed_) return false;
    failed_ = std::move(error);
    completed_ = true;
    return true;
  }
  /// Hands an armed request to its peer's byte mover (postSend / postRecv), or fails it at once
  /// when the transport has failed (`sink` publishes it).
  template <class Peer>
  void post(Request& req, Peer& peer, CompletionSink& sink) {
    if (failed_)
      sink.finish(req, State::Failed, false);
    else if (req.isSend)
      peer.postSend(req);
    else
      peer.postRecv(req);
  }
  /// Throws the error of a Failed request: its own (publishAlone), else the
  /// transport's, else `peerError` (the peer's).
  [[noreturn]] void throwFailure(const Request& req, const std::optional<Error>& peerError,
                                 const std::string& peerDescription) const;

 private:
  static constexpr std::size_t kAuxPeerError = 2;
  static constexpr std::size_t kAuxTransportError = 4;
  static constexpr std::size_t kAuxOwnError = 8;

  /// A request's own error, by the request's address: read only while the request's aux says
  /// so (a later publish() at the address says otherwise), replaced by the next one there.
  struct OwnError {
    const Request* req;
    Error error;
  };
  /// The most own errors kept: the oldest goes first (its request long since reused or gone).
  static constexpr std::size_t kMaxOwnErrors = 64;

  const int rank_;
  std::mutex mu_;
  std::optional<Error> failed_;
  bool completed_ = false;
  std::vector<OwnError> ownErrors_;  // P2P receives failed by a size mismatch, oldest first
};

}  // namespace braid::transport::engine
