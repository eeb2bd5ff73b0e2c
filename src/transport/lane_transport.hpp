// A communicator's view of connections it shares with others (docs/architecture.md, "Shared
// connections"): a sub-communicator (split, subgroup, the groups of a hierarchy) posts through
// its parent's transport instead of opening sockets of its own.
//
// The view numbers ranks as its communicator does and maps each to the shared transport's rank
// (the rank in the communicator that built it, usually the world); every message it posts
// carries the communicator's lane, so messages of different communicators on one connection
// never match each other's receives (engine.hpp, Inbox). The shared transport is held by
// reference count: a parent and each of its sub-communicators hold it, so a sub-communicator
// outliving its parent keeps working, and the sockets close with the last one.
//
// abort() fails this lane only (Transport::abortLane); the connections and the other lanes go on.
// A connection that is lost, a timeout, or a tag mismatch fails the shared connection itself
// and so every lane that uses it (PeerLost / Timeout / Mismatch; the view's errors name the peer
// in its own numbering and in the shared transport's).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace braid::transport {

class LaneTransport final : public Transport {
 public:
  /// `toBase[r]`: the shared transport's rank of this view's rank r, or -1 when rank r is not
  /// reached through it (a peer on this host, reached over shared memory by another leg).
  /// Opens `lane` (!= 0) on `base`, which must carriesLanes(); Error(InvalidArgument) when
  /// `rank` or a mapping is out of range, Error(Internal) when the lane is open already.
  /// Lane 0 is the view of the communicator that built `base` and posts on it without a lane
  /// (a shared-memory segment's owner: its messages carry no lane unit): nothing is opened,
  /// closeLane(0) and abortLane(0, why) end the owner's part, and sharedGroup() is the base's
  /// own group.
  LaneTransport(std::shared_ptr<Transport> base, std::uint64_t lane, int rank,
                std::vector<int> toBase);
  /// Closes the lane (its requests still queued fail and leave the shared connections; messages
  /// still arriving on it are dropped); the shared transport goes with the last holder.
  ~LaneTransport() override;
  LaneTransport(const LaneTransport&) = delete;
  LaneTransport& operator=(const LaneTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(toBase_.size()); }
  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override;
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override;
  bool test(Request& req) override;
  void wait(Request& req, Deadline deadline) override;
  /// "rank 1 (world rank 3 (127.0.0.1:4000))" when the numbers differ, else the shared one's.
  std::string describePeer(int peer) const override;
  /// Fails this lane's requests only.
  void abort(const std::string& why) override;
  bool peerLeft(int peer) const override {
    return peer >= 0 && peer < size() && toBase_[static_cast<std::size_t>(peer)] >= 0 &&
           base_->peerLeftLane(lane_, toBase_[static_cast<std::size_t>(peer)]);
  }
  bool pipelinesLargeMessages(int peer) const override {
    return peer >= 0 && peer < size() && toBase_[static_cast<std::size_t>(peer)] >= 0 &&
           base_->pipelinesLargeMessages(toBase_[static_cast<std::size_t>(peer)]);
  }
  /// The sockets of the shared transport (every communicator sharing it counts them alike).
  std::size_t connectionCount() const override { return base_->connectionCount(); }
  /// The communicator's shared-memory group on the shared transport (a shared-memory
  /// transport's lane group), when setGroup() gave it one.
  SharedMemoryGroup* sharedGroup() override {
    return lane_ == 0 ? base_->sharedGroup() : group_.get();
  }
  /// Asks the shared transport for this lane's shared-memory group (openLaneGroup: collective
  /// over this view's ranks, all of which it must reach); false when it has none to give.
  bool openGroup(Deadline deadline);

  std::uint64_t lane() const noexcept { return lane_; }
  /// What a caller may post to instead of this view: the shared transport itself, on lane()
  /// (postSendOnLane / postRecvOnLane; lane 0: postSend / postRecv), for a view that numbers
  /// ranks as the shared transport does; else this view. Waiting and testing on the shared
  /// transport is then the same as on the view (its errors pass through unchanged). The view
  /// keeps the shared transport alive.
  Transport& direct() noexcept { return identity_ ? *base_ : *this; }
  const std::shared_ptr<Transport>& base() const noexcept { return base_; }
  /// The shared transport's rank of this view's rank r (-1: not through it).
  int baseRank(int r) const { return toBase_[static_cast<std::size_t>(r)]; }

 private:
  int mapped(int peer, const char* op) const;
  [[noreturn]] void rethrow(const Error& e, const Request& req) const;

  std::shared_ptr<Transport> base_;
  const std::uint64_t lane_;
  const int rank_;
  const std::vector<int> toBase_;
  bool identity_ = true;
  std::unique_ptr<SharedMemoryGroup> group_;  // goes before base_ (it lives in base_'s memory)
};

}  // namespace braid::transport
