#include "transport/lane_transport.hpp"

#include <braid/error.hpp>

#include "transport/engine.hpp"

namespace braid::transport {

LaneTransport::LaneTransport(std::shared_ptr<Transport> base, std::uint64_t lane, int rank,
                             std::vector<int> toBase)
    : base_(std::move(base)), lane_(lane), rank_(rank), toBase_(std::move(toBase)) {
  const int n = static_cast<int>(toBase_.size());
  if (base_ == nullptr || !base_->carriesLanes() || rank < 0 || rank >= n ||
      toBase_[static_cast<std::size_t>(rank)] != base_->rank())
    throw Error(ErrorCode::InvalidArgument,
                "LaneTransport: rank " + std::to_string(rank) +
                    ": needs a shared transport with lanes, a lane other than 0, and this rank "
                    "mapped to the shared transport's own rank");
  for (int r = 0; r < n; ++r) {
    const int b = toBase_[static_cast<std::size_t>(r)];
    if (b < -1 || b >= base_->size())
      throw Error(ErrorCode::InvalidArgument, "LaneTransport: rank " + std::to_string(r) +
                                                  " maps to rank " + std::to_string(b) +
                                                  " outside the shared transport's " +
                                                  std::to_string(base_->size()) + " ranks");
    if (b != r) identity_ = false;
  }
  if (n != base_->size()) identity_ = false;
  if (lane_ == 0) {  // the owner's view: no lane; the base's mismatches are this view's
    base_->setMismatchObserver([this](int peer, std::uint64_t expected, std::uint64_t received) {
      noteMismatch(peer, expected, received);
    });
    return;
  }
  std::vector<int> peers;  // told when this communicator closes or aborts
  for (int r = 0; r < n; ++r)
    if (r != rank_ && toBase_[static_cast<std::size_t>(r)] >= 0)
      peers.push_back(toBase_[static_cast<std::size_t>(r)]);
  base_->openLane(lane_, std::move(peers));
  // Mismatches on this lane reach this view's observer, with the peer in its numbering. (The
  // shared transport's tag describer is set once by whoever built it: it outlives the views.)
  base_->setLaneMismatchObserver(
      lane_, [this](int basePeer, std::uint64_t expected, std::uint64_t received) {
        for (int r = 0; r < size(); ++r)
          if (toBase_[static_cast<std::size_t>(r)] == basePeer) {
            noteMismatch(r, expected, received);
            return;
          }
      });
}

LaneTransport::~LaneTransport() {
  group_.reset();  // its peers see it gone before the lane closes
  if (lane_ == 0) {
    base_->setMismatchObserver({});
    base_->closeLane(0);
    return;
  }
  base_->setLaneMismatchObserver(lane_, {});
  base_->closeLane(lane_);
}

bool LaneTransport::openGroup(Deadline deadline) {
  if (lane_ == 0) return base_->sharedGroup() != nullptr;
  group_ = base_->openLaneGroup(lane_, toBase_, deadline);
  return group_ != nullptr;
}

int LaneTransport::mapped(int peer, const char* op) const {
  const int n = size();
  if (peer < 0 || peer >= n || peer == rank_ || toBase_[static_cast<std::size_t>(peer)] < 0)
    engine::throwUnreachable(op, rank_, n, peer, " over the shared connections", "");
  return toBase_[static_cast<std::size_t>(peer)];
}

void LaneTransport::postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                             Request& req) {
  const int b = mapped(peer, "postSend");
  req.viewPeer = peer;
  base_->postSendOnLane(lane_, b, data, bytes, tag, req);
}

void LaneTransport::postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                             Request& req) {
  const int b = mapped(peer, "postRecv");
  req.viewPeer = peer;
  base_->postRecvOnLane(lane_, b, data, bytes, tag, req);
}

void LaneTransport::rethrow(const Error& e, const Request& req) const {
  if (identity_ || (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Timeout &&
                    e.code() != ErrorCode::Mismatch))
    throw e;
  const int peer = req.viewPeer;
  throw Error(e.code(), "rank " + std::to_string(rank_) + " (world rank " +
                            std::to_string(base_->rank()) + "), peer " +
                            (peer >= 0 && peer < size() ? describePeer(peer) : "?") + ": " +
                            e.detail());
}

bool LaneTransport::test(Request& req) {
  try {
    return base_->test(req);
  } catch (const Error& e) {
    rethrow(e, req);
  }
}

void LaneTransport::wait(Request& req, Deadline deadline) {
  try {
    base_->wait(req, deadline);
  } catch (const Error& e) {
    rethrow(e, req);
  }
}

std::string LaneTransport::describePeer(int peer) const {
  if (peer < 0 || peer >= size() || toBase_[static_cast<std::size_t>(peer)] < 0)
    return "rank " + std::to_string(peer);
  const int b = toBase_[static_cast<std::size_t>(peer)];
  const std::string shared = base_->describePeer(b);
  if (identity_) return shared;
  return "rank " + std::to_string(peer) + " (world rank " + std::to_string(b) +
         (shared.rfind("rank " + std::to_string(b), 0) == 0 &&
                  shared.size() > 6 + std::to_string(b).size()
              ? shared.substr(5 + std::to_string(b).size())
              : std::string()) +
         ")";
}

void LaneTransport::abort(const std::string& why) {
  base_->abortLane(lane_, why);
}

}  // namespace braid::transport
