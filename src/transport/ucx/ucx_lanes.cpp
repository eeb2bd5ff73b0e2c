// The UCX transport's lanes: several communicators on one worker and its endpoints (the shared
// connections of docs/architecture.md, "Shared connections"), as over TCP. Every header carries
// its communicator's lane; each peer's engine::Inbox matches per lane, and holds a message no
// receive of its lane wants while other receives wait, so one communicator never stands in
// another's way. A lane closed (its communicator destroyed) or aborted here is told to the
// lane's peers by a control header (byte count all ones, kind as tag) in the peer's message
// order, after the lane's last messages: their receives of the lane from this rank fail with
// PeerLost at once, and the other lanes go on.
#include <algorithm>
#include <braid/error.hpp>
#include <string>
#include <vector>

#include "transport/ucx/ucx_transport_impl.hpp"

namespace braid::transport::ucx {

void UcxTransport::postSendOnLane(std::uint64_t lane, int peer, const void* data, std::size_t bytes,
                                  std::uint64_t tag, Request& req) {
  prepare("postSend", peer, data, bytes, tag, true, req);
  req.lane = lane;
  std::lock_guard<std::mutex> lk(mu_);
  send(req);
}

void UcxTransport::postRecvOnLane(std::uint64_t lane, int peer, void* data, std::size_t bytes,
                                  std::uint64_t tag, Request& req) {
  prepare("postRecv", peer, data, bytes, tag, false, req);
  req.lane = lane;
  std::lock_guard<std::mutex> lk(mu_);
  receive(req);
}

void UcxTransport::openLane(std::uint64_t lane, std::vector<int> peers) {
  std::lock_guard<std::mutex> lk(mu_);
  lanes_.open(lane, std::move(peers), rank_, size_, "this rank's UCX endpoints");
}

bool UcxTransport::peerLeftLane(std::uint64_t lane, int peer) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (peer < 0 || peer >= size_) return false;
  return peers_[static_cast<std::size_t>(peer)].laneGone.count(lane) != 0;
}

void UcxTransport::closeLane(std::uint64_t lane) {
  std::lock_guard<std::mutex> lk(mu_);
  if (worker_ == nullptr) return;
  const std::vector<int> peers = lanes_.close(lane);
  // Nothing of the lane may stay with the transport: its requests belong to a communicator
  // that is going away. Receives posted and sends not started fail now; a small send already
  // in UCX carries a copy of its data and completes unseen; a large one, or a payload arriving,
  // still uses the communicator's buffer: the link to that peer closes (UCX stops the transfer),
  // as a TCP connection does when a frame is cut.
  endLaneRequests(lane, Op::Fail::Transport);
  std::vector<int> cut;
  for (Op* op : live_)
    if (op->lane == lane && op->pending > 0 && op->req != nullptr &&
        (!op->isSend || op->bytes > kInlineBytes))
      cut.push_back(op->peer);
  for (int p : cut)
    failPeer(p,
             Error(ErrorCode::PeerLost,
                   "rank " + std::to_string(rank_) + " closed its UCX link to " + describePeer(p) +
                       ": a communicator sharing it was destroyed in the middle of a message"));
  if (!cut.empty())
    progressUntil(
        Clock::now() + std::chrono::milliseconds(2000),
        [&] {
          for (const Op* op : live_)
            if (op->lane == lane && op->pending > 0 && op->req != nullptr &&
                (!op->isSend || op->bytes > kInlineBytes))
              return false;
          return true;
        },
        false);
  for (Op* op : live_)
    if (op->lane == lane) op->req = nullptr;  // completes unseen
  for (PeerState& ps : peers_) {
    ps.inbox.dropLane(lane);
    std::erase_if(ps.parked, [&](const PeerState::Parked& p) { return p.lane == lane; });
  }
  tellLanePeers(lane, peers, false);
  if (sleepers_ > 0) kick();
}

void UcxTransport::abortLane(std::uint64_t lane, const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (worker_ == nullptr) return;
  if (lanes_.onlyOpen(lane)) {
    // No other communicator uses these endpoints: fail the transport, as abort() does, so that
    // the peers see this rank lost at once.
    failTransport(Error(ErrorCode::Aborted, why));
    kick();
    return;
  }
  const std::vector<int>& peers = lanes_.abort(lane, Error(ErrorCode::Aborted, why));
  endLaneRequests(lane, Op::Fail::Transport);
  for (Op* op : live_) {
    if (op->lane != lane || op->pending == 0) continue;
    if (op->fail == Op::Fail::None) op->fail = Op::Fail::Transport;  // the lane's error
    if (!op->isSend && op->slots[0].outstanding && op->slots[0].handle != nullptr)
      ucp_request_cancel(worker_, op->slots[0].handle);
  }
  tellLanePeers(lane, peers, true);  // the peers' operations on the lane fail at once
  kick();
}

// Receives of the lane posted and sends of it not started yet: failed now (`why`: Transport,
// the lane's own error; throwFailure tells which).
void UcxTransport::endLaneRequests(std::uint64_t lane, Op::Fail why) {
  for (PeerState& ps : peers_) {
    if (ps.error) continue;
    ps.inbox.failLane(lane);  // (nothing is ever half received into a request here)
    std::vector<Op*> mine;
    for (Op* op : ps.held)
      if (op->lane == lane) mine.push_back(op);
    std::erase_if(ps.held, [&](const Op* op) { return op->lane == lane; });
    for (Op* op : mine) {
      op->fail = why;
      finishOp(op);
    }
  }
}

void UcxTransport::tellLanePeers(std::uint64_t lane, const std::vector<int>& peers, bool aborted) {
  for (int p : peers)
    if (p >= 0 && p < size_ && p != rank_) sendLaneGone(p, lane, aborted);
}

// The control header, in the peer's message order; a pair not connected yet is told when it
// connects (linkReady), so a receive of the lane the peer posts to this rank (which connects
// the pair) learns it then.
void UcxTransport::sendLaneGone(int peer, std::uint64_t lane, bool aborted) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.error || ps.ended) return;
  if (ps.link != PeerState::Link::Ready) {
    ps.untold.emplace_back(lane, aborted);
    return;
  }
  std::vector<std::uint8_t> wire(kHeaderBytes);
  storeLe64(wire.data(), aborted ? kLaneAborted : kLaneDestroyed);
  storeLe64(wire.data() + 8, kControlBytes);
  storeLe64(wire.data() + 16, lane);
  sendSide(peer, Kind::Header, ps.sendSeq++, std::move(wire));
}

void UcxTransport::onLaneGone(int peer, std::uint64_t lane, std::uint64_t kind) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if ((kind != kLaneDestroyed && kind != kLaneAborted) || lane == 0) {
    failPeer(peer,
             Error(ErrorCode::Mismatch,
                   "rank " + std::to_string(rank_) + " received an unknown control message (kind " +
                       std::to_string(kind) + ", lane " + std::to_string(lane) + ") from " +
                       ps.description + ": a corrupt stream or another braid version"));
    return;
  }
  if (laneClosed(lane)) return;  // gone on this rank too
  ps.laneGone.emplace(           // the first reason stays (an abort, then the destruction)
      lane, Error(ErrorCode::PeerLost,
                  "rank " + std::to_string(rank_) + ": " + ps.description +
                      " left the communicator on lane " + std::to_string(lane) +
                      " of the shared connections (it was " +
                      (kind == kLaneAborted ? "aborted" : "destroyed") +
                      " there) before this operation with it completed; nothing more comes "
                      "from it on that communicator"));
  ps.inbox.failLane(lane);
}

}  // namespace braid::transport::ucx
