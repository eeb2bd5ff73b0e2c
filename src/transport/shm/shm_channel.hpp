// One peer of the shared-memory transport: the two rings of the pair (ours to write, theirs to
// read), framing, matching of incoming messages to posted receives, single-copy reads, and the
// failure of everything in flight when the pair breaks.
//
// Stream format, in 16-byte units (ring positions stay 16-aligned, so a unit never wraps):
//   header     {tag u64, word u64}: word = bytes, bit 63 set for a single-copy message, bit 62
//              set when a lane unit follows, bit 61 for a control message (no payload)
//   lane       {lane u64, 0}, only for a message of a lane other than 0 (a sub-communicator's on
//              its parent's segment, docs/architecture.md "Shared connections")
//   payload    bytes, padded to 16 (in place of it, a single-copy message carries one unit
//              {address in the sender, 0})
// A control message says that the sender's communicator on the lane was destroyed (tag
// kLaneDestroyed) or aborted (kLaneAborted) there: what this rank waits for on the lane from it
// fails with PeerLost (peerLaneError), while the pair and the other lanes go on.
// The sender publishes head after the header and after each piece of payload (at most one
// slot), the receiver publishes tail after each piece it copied out.
#pragma once

#include <sys/types.h>

#include <braid/error.hpp>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/engine.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace braid::transport::shm {

/// Control message tags (bit 61 of the header word): the sender's communicator on the
/// message's lane was destroyed / aborted.
inline constexpr std::uint64_t kLaneDestroyed = 1;
inline constexpr std::uint64_t kLaneAborted = 2;

/// What a channel reports to its transport (engine.hpp), with the transport's lock held.
class CompletionSink : public engine::CompletionSink {
 public:
  /// Whether messages of `lane` are to be dropped (its communicator is gone on this rank).
  virtual bool laneClosed(std::uint64_t lane) const {
    (void)lane;
    return false;
  }

 protected:
  ~CompletionSink() = default;
};

struct ChannelConfig {
  int selfRank = -1;
  int peerRank = -1;
  std::string description;        // "rank P (pid N on host)"
  ChannelControl* out = nullptr;  // this rank -> peer
  std::uint8_t* outRing = nullptr;
  ChannelControl* in = nullptr;  // peer -> this rank
  std::uint8_t* inRing = nullptr;
  std::size_t ringBytes = 0;
  std::size_t slotBytes = 0;
  RankSlot* peerSlot = nullptr;  // the peer's doorbell
  pid_t peerPid = 0;
  /// Messages of at least this many bytes go single-copy (the peer's probe could read us);
  /// SIZE_MAX when the peer cannot read us.
  std::size_t singleCopyBytes = SIZE_MAX;
  bool lightWake = false;  // notify() without a fence (Attachment::lightWake)
};

/// Not thread-safe: the transport calls it with its lock held.
class Channel {
 public:
  Channel() = default;  // this rank itself: only description() is used
  Channel(ChannelConfig config, CompletionSink& sink);

  const std::string& description() const { return cfg_.description; }
  int peerRank() const { return cfg_.peerRank; }
  /// Set once the pair broke; every request on it failed with this error.
  const std::optional<Error>& error() const { return error_; }
  bool singleCopy() const { return cfg_.singleCopyBytes != SIZE_MAX; }

  void postSend(Request& req);
  /// Takes a held P2P message if one matches, else queues the receive; then reads what is there.
  void postRecv(Request& req);
  /// Moves whatever can move now; true when something did.
  bool progress();
  /// Unwritten sends, or receives large enough to hold up the peer: work for the background
  /// thread when nobody waits. Only requests whose poster may not wait for them soon (not
  /// Request::attended) unless `attendedToo` (ShmOptions::backgroundAttended).
  bool needsBackground(bool attendedToo) const;
  /// The peer's process exited: what it left in the ring can still be received, nothing else.
  void peerExited();
  /// The transport failed: closes the pair and fails every request (not a channel error).
  void abandon();
  /// Tells the peer this rank is gone (the transport is being destroyed).
  void close();
  /// Fails this pair's queued requests of `lane` (finish(Failed, false)). False, failing
  /// nothing, when a message of the lane is half written or half read, or a single-copy send of
  /// it was not read yet (the peer would read a buffer that is going): break the pair then.
  bool failLane(std::uint64_t lane);
  /// Drops held messages of `lane` and what the peer told about it.
  void dropLane(std::uint64_t lane) {
    inbox_.dropLane(lane);
    if (lanes_) lanes_->peerGone.erase(lane);
  }
  /// Queues the control message saying this rank's communicator on `lane` is gone.
  void sendLaneGone(std::uint64_t lane, bool aborted);
  /// The error of requests of `lane` after the peer said its side of the lane is gone.
  const Error* peerLaneError(std::uint64_t lane) const {
    if (!lanes_) return nullptr;
    const auto it = lanes_->peerGone.find(lane);
    return it == lanes_->peerGone.end() ? nullptr : &it->second;
  }
  /// Fails the pair with `error` (peers see PeerLost).
  void breakOff(Error error) { fail(std::move(error)); }
  /// From now on a message without a posted receive of its lane is held aside when another
  /// receive waits, instead of waiting in the ring (the transport's lanes are in use).
  void holdAside() { holdAside_ = true; }
  /// Why `req` (pending on this channel) has not completed, in words, for a Timeout: how much
  /// of it moved, or what the pair's ring holds (nothing yet; a message that waits for another
  /// receive ahead of it; a full ring).
  std::string stallReason(const Request& req) const;

 private:
  bool active() const { return cfg_.out != nullptr && !error_ && !abandoned_; }
  Error lost(const char* during, std::size_t bytes) const;
  void fail(Error error);
  void finishAll(bool channelError);
  void closeFlags();
  bool writeSends();
  bool reapSingleCopies();
  bool readIncoming();
  bool readHeader();
  bool readRemote(std::uint8_t* dst, std::uint64_t address, std::size_t bytes, std::uint64_t tag);
  void publishTail();
  void onControl(std::uint64_t kind, std::uint64_t lane);
  void retire(Request& req, Request::State state, bool channelError);

  ChannelConfig cfg_;
  CompletionSink* sink_ = nullptr;
  std::optional<Error> error_;
  bool abandoned_ = false;
  bool exited_ = false;
  bool holdAside_ = false;

  // Sending: queued until fully written; single-copy sends then wait for the peer's count.
  std::uint64_t head_ = 0;      // our published head
  std::uint64_t tailSeen_ = 0;  // the peer's tail, last read
  std::uint64_t singleCopiesPosted_ = 0;
  engine::RequestQueue sends_;
  engine::RequestQueue copies_;  // single-copy sends the peer has not read yet

  // Receiving.
  std::uint64_t tail_ = 0;      // our published tail
  std::uint64_t headSeen_ = 0;  // the peer's head, last read
  engine::Inbox inbox_;
  std::size_t rxLeft_ = 0;  // ring bytes of the arriving payload still to consume (padded)

  // Lanes: made on first use, so a pair whose transport has none stays as small as before.
  struct LaneState {
    std::list<Request> control;                         // control messages being written
    std::unordered_map<std::uint64_t, Error> peerGone;  // lanes whose peer side is gone
  };
  std::unique_ptr<LaneState> lanes_;
  LaneState& lanes() {
    if (!lanes_) lanes_ = std::make_unique<LaneState>();
    return *lanes_;
  }
  bool peerGone(std::uint64_t lane) const {
    return lanes_ && !lanes_->peerGone.empty() && lanes_->peerGone.count(lane) != 0;
  }
};

}  // namespace braid::transport::shm
