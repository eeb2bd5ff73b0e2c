// The small interface every algorithm is written against: post a send or a receive to a peer,
// then test or wait. Algorithms never see sockets, shared memory or threads.
//
// Matching: messages between two ranks are delivered in the order they were posted. Every
// message carries a 64-bit tag that the receiver's tag must equal; the tag encodes the
// operation (see core/tag.hpp), so two ranks running different collectives fail with
// Error(Mismatch) instead of hanging or corrupting memory. Messages whose tag has kP2PTagBit set
// (user send/recv) may arrive before their receive is posted; they are held aside (the only
// allocation on the receive path) until a matching receive is posted.
#pragma once

#include <atomic>
#include <braid/error.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

namespace braid::transport {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline constexpr std::uint64_t kP2PTagBit = 1ull << 63;

/// One posted send or receive. Owned by the caller (typically on its stack), which keeps it alive
/// and unmoved until test() returned true or wait() returned or threw. Reusable after that.
struct Request {
  enum class State : std::uint8_t { Idle, Pending, Done, Failed };
  std::atomic<State> state{State::Idle};

  // Set by post*; read by the transport.
  bool isSend = false;
  int peer = -1;
  std::uint64_t tag = 0;
  /// The communicator's lane on a transport shared by several communicators (postSendOnLane);
  /// 0 for a plain post. Set by the post.
  std::uint64_t lane = 0;
  /// The peer as the caller numbered it, kept by transports that renumber peers on the way down
  /// (RoutedTransport, LaneTransport): `peer` is then the underlying transport's number.
  int viewPeer = -1;
  std::uint8_t* data = nullptr;
  std::size_t bytes = 0;
  /// Set by the poster when the posting thread waits for this request within the same blocking
  /// operation, with only that operation's own work in between (an algorithm's requests,
  /// algo::InFlight). A transport with a background thread then leaves the request to those
  /// waits instead of waking the thread for it. False (the default) for requests whose owner
  /// may compute for any length of time before waiting (the communicator's point-to-point).
  bool attended = false;

  // Transport bookkeeping (meaning is private to the transport that owns the request).
  std::size_t progress = 0;
  std::size_t aux = 0;
  Request* next = nullptr;

  Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  bool done() const { return state.load(std::memory_order_acquire) == State::Done; }
};

/// Optional capability of a transport whose ranks are ALL on one host and share memory: what the
/// direct shared-memory collectives (src/algo/*/shm_direct.cpp) are written against. Ranks are
/// the communicator's; every rank's staging area is readable and writable by every rank.
/// Not thread-safe: one collective at a time per rank (the communicator serializes them).
class SharedMemoryGroup {
 public:
  virtual ~SharedMemoryGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Bytes of each rank's staging area (a multiple of 4 KiB, at least 16 KiB).
  virtual std::size_t stagingBytes() const = 0;
  /// Rank r's staging area, mapped in this process.
  virtual std::uint8_t* staging(int r) const = 0;
  /// Returns once every rank of the group has entered the same barrier (the group counts its
  /// barriers; all ranks must enter them in the same order) with the same operation `tag`
  /// (else Error(Mismatch) naming both operations). Memory written before it is visible to
  /// every rank after it. Spins briefly, then sleeps on a futex; throws
  /// Error(Timeout) at the deadline, Error(PeerLost) naming a rank whose process exited or
  /// whose transport closed or failed, Error(Aborted) after the transport was aborted. After
  /// a throw the group is failed: peers' barriers throw PeerLost.
  virtual void barrier(std::uint64_t tag, Deadline deadline) = 0;
  /// Starts a step of a direct collective: returns the byte offset (0 or stagingBytes() / 2) of
  /// the half of every rank's staging area that this step uses. Halves alternate step by step
  /// (every rank counts the same steps), so a step may write its half before its first barrier
  /// while peers still read the previous step's half, provided every step reads its half only
  /// before the next step's first barrier.
  virtual std::size_t beginStep() = 0;

  /// Payload bytes of one rank's line in the low-latency exchange (sixteen cache lines; the first
  /// 48 bytes share a cache line with the line's tag and exchange number).
  static constexpr std::size_t kLineBytes = 1008;
  /// Low-latency exchange, step 1 (src/algo/*/shm_ll.cpp): every rank takes part in every
  /// exchange, in the same order, with or without data. Waits until every peer has entered
  /// the previous exchange (so none still reads this rank's line of the one before; usually
  /// at once), then writes `bytes` (<= kLineBytes) of `data` and the operation `tag` into this
  /// rank's line and publishes it. Makes no system call unless a peer sleeps. Errors as
  /// barrier(); the exchanges and barrier() are two independent sequences, and a rank found in
  /// the other one when it should be in this one (or the reverse) is an Error(Mismatch).
  virtual void linePost(std::uint64_t tag, const void* data, std::size_t bytes,
                        Deadline deadline) = 0;
  /// Step 2: waits until rank `peer` posted the current exchange (the one this rank posted
  /// last) with the same tag (else Error(Mismatch)) and returns its payload, valid until this
  /// rank's next linePost. Waits and fails as barrier().
  virtual const std::uint8_t* lineWait(int peer, Deadline deadline) = 0;

  /// True when every rank can read every other rank's own memory single-copy
  /// (process_vm_readv, probed at setup): the same answer on every rank.
  virtual bool canReadPeers() const = 0;
  /// True when the group's ranks outnumber the CPUs their affinity masks allow together, so
  /// that they take turns on a CPU: the same answer on every rank.
  virtual bool crowded() const = 0;
  /// Blocks of at least this many bytes are read single-copy out of peers' user buffers
  /// (readPeer) by the direct collectives; SIZE_MAX: never (no canReadPeers, or staging was
  /// measured faster). The same answer on every rank (shm_single_copy.hpp says how it is chosen).
  virtual std::size_t singleCopyBytes() const = 0;
  /// The pipelining unit in bytes of the direct collectives that stage one area per rank
  /// (allreduce, reduce, broadcast, allgather; each bounds it by a staging half): measured per rank
  /// count on the machine, or BRAID_SHM_CHUNK_SIZE / BRAID_CHUNK_SIZE (shm_single_copy.hpp says
  /// how). The same answer on every rank.
  virtual std::size_t chunkBytes() const = 0;
  /// The direct collectives in which every rank writes an output (allgather, allreduce, alltoall,
  /// broadcast) write them with non-temporal stores when the outputs of all the group's ranks
  /// together reach this many bytes (algo::streamsOutput); SIZE_MAX:
  /// never. Measured per rank count on the machine, or BRAID_LLC_SIZE's half, or the process's
  /// kernels::streamingThresholdBytes() (shm_streaming.hpp says when). The same on every rank.
  virtual std::size_t streamingBytes() const = 0;
  /// Copies `bytes` at address `remote` of rank `peer`'s address space into `dst`. The peer
  /// keeps that memory unchanged until a barrier that follows this call. Throws
  /// Error(PeerLost) when the peer exited, else Error(Internal) naming errno; the group is
  /// failed afterwards (peers' barriers throw PeerLost).
  virtual void readPeer(int peer, std::uint64_t remote, void* dst, std::size_t bytes) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Posts a send of `bytes` bytes (0 allowed) to `peer` != rank(). The data must stay
  /// untouched until the request completes.
  virtual void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                        Request& req) = 0;
  /// Posts a receive of exactly `bytes` bytes from `peer` != rank(). A message of another size
  /// or tag fails the request with Error(Mismatch).
  virtual void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                        Request& req) = 0;
  /// Makes progress without blocking. True when req completed; throws braid::Error if it failed.
  virtual bool test(Request& req) = 0;
  /// Blocks until req completes (true), or the deadline passes (Error(Timeout) naming the peer),
  /// or it fails (Error(PeerLost / Mismatch / Aborted)).
  virtual void wait(Request& req, Deadline deadline) = 0;
  /// "rank 3 (10.0.0.2:41235)": how errors name a peer.
  virtual std::string describePeer(int peer) const = 0;
  /// Whether one large message to `peer` moves at least as fast as the same bytes cut into
  /// chunks, because the transport cuts and pipelines it itself (UCX's rendezvous): an
  /// algorithm with nothing to forward then sends it whole. Default: no (braid's TCP transport
  /// receives one large message more slowly than the same bytes in chunks: docs/benchmarks.md,
  /// "UCX's tcp receive segment; a two-rank broadcast whole over UCX").
  virtual bool pipelinesLargeMessages(int peer) const {
    (void)peer;
    return false;
  }
  /// Fails every pending and later request with Error(Aborted, why). Any thread.
  virtual void abort(const std::string& why) = 0;
  // ---- lanes (docs/architecture.md, "Shared connections") ----
  // A transport that carries lanes is shared by several communicators (a parent and its
  // sub-communicators): each has its own lane, a 64-bit id every frame carries, and messages
  // match only receives of their lane. LaneTransport (lane_transport.hpp) is the view a
  // communicator posts through.
  /// Whether postSendOnLane / openLane work here. Default: no (only lane 0, a plain post).
  virtual bool carriesLanes() const { return false; }
  /// Registers lane `lane` (!= 0) on this rank; Error(Internal) if it is open already (two
  /// communicators whose ids hash alike). `peers`: the ranks (this transport's numbers) the
  /// lane's communicator talks to, which are told when it closes or aborts here; empty: all.
  virtual void openLane(std::uint64_t lane, std::vector<int> peers = {});
  /// The lane's communicator is going: its requests still queued fail (a connection in the
  /// middle of one of its messages is closed), and messages still arriving on it are dropped.
  virtual void closeLane(std::uint64_t lane) { (void)lane; }
  /// Fails the lane's pending and later requests with Error(Aborted, why); the other lanes go on
  /// (a connection in the middle of one of the lane's messages is closed: a frame cannot be
  /// cut, so that peer is lost to every lane). Default: abort(why).
  virtual void abortLane(std::uint64_t lane, const std::string& why) {
    (void)lane;
    abort(why);
  }
  /// Whether `peer` told this rank that its communicator on `lane` is gone (destroyed or
  /// aborted there): requests of that lane with it fail with PeerLost while the connection and
  /// the other lanes go on. Default: never.
  virtual bool peerLeftLane(std::uint64_t lane, int peer) const {
    (void)lane;
    (void)peer;
    return false;
  }
  /// Whether `peer` (this transport's numbering) told this rank that it left this transport's
  /// communicator (peerLeftLane of its lane): a PeerLost with it then has its cause already.
  /// Default: never.
  virtual bool peerLeft(int peer) const {
    (void)peer;
    return false;
  }
  /// A shared-memory group for the communicator on `lane` (open here) whose ranks are
  /// `members` (this transport's ranks, in the communicator's order, this rank among them, all
  /// reached over shared memory): collective over them. nullptr when this transport has none to
  /// give (the communicator then makes a segment of its own). Default: nullptr.
  virtual std::unique_ptr<SharedMemoryGroup> openLaneGroup(std::uint64_t lane,
                                                           std::span<const int> members,
                                                           Deadline deadline) {
    (void)lane;
    (void)members;
    (void)deadline;
    return nullptr;
  }
  /// postSend / postRecv on a lane (0: a plain post).
  virtual void postSendOnLane(std::uint64_t lane, int peer, const void* data, std::size_t bytes,
                              std::uint64_t tag, Request& req);
  virtual void postRecvOnLane(std::uint64_t lane, int peer, void* data, std::size_t bytes,
                              std::uint64_t tag, Request& req);

  /// Optional capability: the shared-memory group of ALL ranks of this transport, or nullptr
  /// (the default) when some rank is on another host or the transport shares no memory.
  virtual SharedMemoryGroup* sharedGroup() { return nullptr; }
  /// Sockets this rank holds to its peers, opened or accepted (every stream counted), for
  /// diagnostics and braid-perf; 0 for transports without sockets (shared memory). Any thread.
  virtual std::size_t connectionCount() const { return 0; }
  /// Optional: turns a tag into words for Mismatch errors ("allreduce #57 (fp32, 1024)").
  void setTagDescriber(std::function<std::string(std::uint64_t)> f) { describeTag_ = std::move(f); }
  /// Optional: told when a receive from `peer` meets a message whose tag differs from the posted
  /// one (expected: this rank's tag, received: the peer's), just before the request fails with
  /// Error(Mismatch). Called on any thread, possibly with the transport's locks held: it must
  /// only record. The communicator uses it to say what the peer called (core/diagnosis.hpp).
  using MismatchObserver =
      std::function<void(int peer, std::uint64_t expected, std::uint64_t received)>;
  void setMismatchObserver(MismatchObserver f) { mismatchObserver_ = std::move(f); }
  /// The observer of mismatches on `lane` (a transport with lanes; empty `f`: none), told
  /// instead of the one above, with the peer in this transport's numbering.
  void setLaneMismatchObserver(std::uint64_t lane, MismatchObserver f) {
    std::lock_guard<std::mutex> lk(laneObserversMu_);
    if (f)
      laneObservers_[lane] = std::move(f);
    else
      laneObservers_.erase(lane);
  }

 protected:
  /// Never throws (error paths use it): "tag N" when the describer fails.
  std::string describeTag(std::uint64_t tag) const {
    if (describeTag_) try {
        return describeTag_(tag);
      } catch (const std::exception&) {
      }
    return "tag " + std::to_string(tag);
  }
  void noteMismatch(int peer, std::uint64_t expected, std::uint64_t received) const {
    if (mismatchObserver_ && expected != received) mismatchObserver_(peer, expected, received);
  }
  void noteMismatch(int peer, std::uint64_t expected, std::uint64_t received,
                    std::uint64_t lane) const {
    if (lane != 0) {
      std::lock_guard<std::mutex> lk(laneObserversMu_);
      const auto it = laneObservers_.find(lane);
      if (it != laneObservers_.end()) {
        if (expected != received) it->second(peer, expected, received);
        return;
      }
    }
    noteMismatch(peer, expected, received);
  }

 private:
  std::function<std::string(std::uint64_t)> describeTag_;
  MismatchObserver mismatchObserver_;
  mutable std::mutex laneObserversMu_;
  std::unordered_map<std::uint64_t, MismatchObserver> laneObservers_;
};

inline void Transport::openLane(std::uint64_t lane, std::vector<int> peers) {
  (void)peers;
  throw Error(ErrorCode::Internal, "rank " + std::to_string(rank()) + ": lane " +
                                       std::to_string(lane) + " on a transport without lanes");
}
inline void Transport::postSendOnLane(std::uint64_t lane, int peer, const void* data,
                                      std::size_t bytes, std::uint64_t tag, Request& req) {
  if (lane != 0) openLane(lane);  // throws
  postSend(peer, data, bytes, tag, req);
}
inline void Transport::postRecvOnLane(std::uint64_t lane, int peer, void* data, std::size_t bytes,
                                      std::uint64_t tag, Request& req) {
  if (lane != 0) openLane(lane);  // throws
  postRecv(peer, data, bytes, tag, req);
}

/// Waits for every request in order (each with the same deadline).
inline void waitAll(Transport& t, std::span<Request* const> reqs, Deadline deadline) {
  for (Request* r : reqs) {
    if (r != nullptr && r->state.load(std::memory_order_acquire) != Request::State::Idle)
      t.wait(*r, deadline);
  }
}

}  // namespace braid::transport
