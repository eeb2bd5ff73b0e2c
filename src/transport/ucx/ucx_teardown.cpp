// The UCX transport's failure and teardown paths (the rules are in ucx_transport_impl.hpp): a
// peer's endpoint failing, a peer failed or gone, the whole transport failed or aborted, and
// the orderly end (goodbyes, flushing, settling outstanding requests, closing the endpoints and
// the worker).
#include <algorithm>
#include <braid/error.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "common/handshake.hpp"
#include "transport/ucx/ucx_transport_impl.hpp"

namespace braid::transport::ucx {

namespace {

/// Closes an endpoint at once (UCX fails the sends still on it) and forgets it.
void closeForced(ucp_ep_h& ep) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  const ucs_status_ptr_t p = ucp_ep_close_nbx(ep, &param);
  if (p != nullptr && !UCS_PTR_IS_ERR(p)) ucp_request_free(p);
  ep = nullptr;
}

}  // namespace

const std::optional<Error>& UcxTransport::peerError(int peer) const {
  const PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  return ps.error ? ps.error : ps.ended;
}

void UcxTransport::onEndpointError(int peer, ucs_status_t status) {
  if (closing_) return;
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.broken || ps.error) return;
  // What the peer sent before the connection broke may still be on its way or wait inside UCX
  // (its unexpected queue): that is delivered first (reap).
  ps.broken =
      Error(ErrorCode::PeerLost, "rank " + std::to_string(rank_) + " lost its connection to " +
                                     ps.description + ": " + statusText(status));
  doom(peer);
  if (sleepers_ > 0) kick();
}

void UcxTransport::failPeer(int peer, Error error) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.error) return;
  if (ps.doomedAt) --doomed_;
  ps.error = error;
  ps.inbox.failAll(true);
  ps.backlog.clear();
  ps.parked.clear();
  if (ps.header.outstanding && ps.header.handle != nullptr)
    ucp_request_cancel(worker_, ps.header.handle);
  for (Op* op : live_) {
    if (op->peer != peer || op->pending == 0) continue;
    if (op->fail == Op::Fail::None) op->fail = Op::Fail::Peer;
    if (!op->isSend && op->slots[0].outstanding && op->slots[0].handle != nullptr)
      ucp_request_cancel(worker_, op->slots[0].handle);
  }
  endLink(peer);
  failHeld(ps, Op::Fail::Peer);
  // Tell the peer (it sees PeerLost instead of waiting), then drop the endpoint: UCX fails the
  // sends still on it.
  if (ps.ep != nullptr) {
    std::vector<std::uint8_t> bye(8);
    storeLe64(bye.data(), ps.sendSeq);
    const std::string why = "closed its link to rank " + std::to_string(rank_) + " (" +
                            error.detail().substr(0, 150) + ")";
    bye.insert(bye.end(), why.begin(), why.end());
    sendSide(peer, Kind::Goodbye, 0, std::move(bye));
    closeForced(ps.ep);
  }
}

void UcxTransport::sendGoodbyes(const std::string& why) {
  for (int p = 0; p < size_; ++p) {
    PeerState& ps = peers_[static_cast<std::size_t>(p)];
    if (p == rank_ || ps.ep == nullptr || ps.error) continue;
    std::vector<std::uint8_t> bye(8);
    storeLe64(bye.data(), ps.sendSeq);
    const std::string text = why.substr(0, security::kMaxReasonBytes);
    bye.insert(bye.end(), text.begin(), text.end());
    sendSide(p, Kind::Goodbye, 0, std::move(bye));
    // A peer acknowledges the goodbye of an authenticated pair only (it ignores the others).
    ps.goodbyeSent = ps.link == PeerState::Link::Ready;
  }
}

// Until every peer told goodbye acknowledged it, or its endpoint failed or closed, at most
// `bound` (mu_ held). UCX's tcp completes a send once the bytes are in the socket, and closing
// a socket that still has bytes to read resets the connection, which throws away what is still
// queued to go out: the messages before the goodbye would be lost with it. The peer's
// acknowledgement says its UCX has read them. A peer whose own goodbye came is closing too: it
// reads nothing more of this rank's (its communicator is gone), and it acknowledges this rank's
// goodbye only if that came before it finished, so it is not waited for (over shared memory a
// peer that had closed first left this rank waiting out kGrace, 0.5 s); this rank's
// acknowledgement of its goodbye leaves before the endpoints close (teardown).
void UcxTransport::awaitGoodbyeAcks(std::chrono::milliseconds bound) {
  progressUntil(
      Clock::now() + bound,
      [&] {
        for (const PeerState& ps : peers_)
          if (ps.goodbyeSent && !ps.goodbyeAcked && !ps.finalSeq && !ps.error && !ps.broken &&
              ps.ep != nullptr)
            return false;
        return true;
      },
      true);
}

void UcxTransport::failTransport(Error error) {
  if (!engine_.fail(error)) return;
  sendGoodbyes("failed (" + error.detail().substr(0, 200) + ")");
  for (PeerState& ps : peers_) {
    ps.inbox.failAll(false);
    ps.backlog.clear();
    ps.parked.clear();
    if (ps.header.outstanding && ps.header.handle != nullptr)
      ucp_request_cancel(worker_, ps.header.handle);
    failHeld(ps, Op::Fail::Transport);
  }
  // Nothing a peer says matters any more: what it sends from now on is discarded at teardown.
  for (Slot* s : {&goodbye_, &hs_})
    if (s->outstanding && s->handle != nullptr) ucp_request_cancel(worker_, s->handle);
  for (Op* op : live_) {
    if (op->fail == Op::Fail::None) op->fail = Op::Fail::Transport;
    if (!op->isSend && op->slots[0].outstanding && op->slots[0].handle != nullptr)
      ucp_request_cancel(worker_, op->slots[0].handle);
  }
  // Give the goodbyes a moment to leave, then close the endpoints, which fails the sends still
  // on them; no request is reported failed while UCX may still write its buffer.
  flush(std::chrono::milliseconds(200));
  closeEndpoints();
  settle(std::chrono::milliseconds(2000), false);
}

void UcxTransport::closeEndpoints() {
  closing_ = true;
  for (PeerState& ps : peers_) {
    if (ps.ep != nullptr) closeForced(ps.ep);
  }
}

bool UcxTransport::anyOutstanding(bool sideOnly) const {
  for (const auto& [wire, slot] : sideSends_)
    if (slot.outstanding) return true;
  if (sideOnly) return false;
  for (const Op* op : live_)
    if (op->pending > 0) return true;
  for (const PeerState& ps : peers_)
    if (ps.header.outstanding) return true;
  return goodbye_.outstanding || hs_.outstanding;
}

// Waits (at most `bound`) until everything posted on the worker has completed at its peer.
void UcxTransport::flush(std::chrono::milliseconds bound) {
  sideSends_.emplace_back(std::vector<std::uint8_t>{}, Slot{});
  Slot& slot = sideSends_.back().second;
  arm(slot, this, Slot::Owner::Other);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = sendDone;
  param.user_data = &slot;
  launched(slot, ucp_worker_flush_nbx(worker_, &param));
  progressUntil(
      Clock::now() + bound, [&] { return !slot.outstanding; }, false);
}

// Progresses until no ucp operation is outstanding (or only side sends are checked), at most
// `bound`.
void UcxTransport::settle(std::chrono::milliseconds bound, bool sideOnly) {
  progressUntil(
      Clock::now() + bound, [&] { return !anyOutstanding(sideOnly); }, false);
}

// Progresses the worker until done() or `until`. Between polls it yields the CPU (UCX's
// shared-memory protocols raise no event for their steps), or, with `onEvents`, sleeps on the
// worker's events, at most 5 ms at a time.
void UcxTransport::progressUntil(Deadline until, const std::function<bool()>& done, bool onEvents) {
  for (;;) {
    progress();
    if (done() || Clock::now() >= until) return;
    if (onEvents)
      sleep(std::min(until, Clock::now() + std::chrono::milliseconds(5)));
    else
      std::this_thread::yield();
  }
}

void UcxTransport::teardown() {
  tearingDown_ = true;
  if (worker_ != nullptr) {
    if (!engine_.failure()) {
      // What this rank sent and acknowledged (rendezvous completions included) reaches the
      // peers before the goodbye does, so a peer never takes the goodbye for a loss of a
      // message that was on its way; then the goodbye itself, then the endpoints close.
      flush(std::chrono::milliseconds(2000));
      sendGoodbyes("closed its transport");
      flush(std::chrono::milliseconds(1000));
      awaitGoodbyeAcks(std::chrono::milliseconds(2000));
      settle(std::chrono::milliseconds(200), true);  // acknowledgements sent meanwhile
    }
    closing_ = true;
    for (PeerState& ps : peers_)
      if (ps.header.outstanding && ps.header.handle != nullptr)
        ucp_request_cancel(worker_, ps.header.handle);
    for (Slot* s : {&goodbye_, &hs_})
      if (s->outstanding && s->handle != nullptr) ucp_request_cancel(worker_, s->handle);
    for (Op* op : live_)
      if (!op->isSend && op->slots[0].outstanding && op->slots[0].handle != nullptr)
        ucp_request_cancel(worker_, op->slots[0].handle);
    closeEndpoints();
    settle(std::chrono::milliseconds(2000), false);
    discardUnexpected();
    // Requests the caller never waited for: their state is theirs, the bookkeeping is ours.
    for (Op* op : live_)
      if (op->pending == 0) delete op;
    live_.clear();
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
  epollFd_.reset();
  wakeFd_.reset();
}

// Takes what peers sent that nobody will receive now (their goodbyes once ours was cancelled,
// payloads of mismatched messages), so that destroying the worker does not warn about each.
void UcxTransport::discardUnexpected() {
  const Deadline until = Clock::now() + std::chrono::milliseconds(200);
  std::vector<std::uint8_t> sink;
  while (Clock::now() < until) {
    ucp_worker_progress(worker_);
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
    if (msg == nullptr) return;
    sink.resize(info.length);
    Slot slot;
    arm(slot, this, Slot::Owner::Other);
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = recvDone;
    param.user_data = &slot;
    launched(slot, ucp_tag_msg_recv_nbx(worker_, sink.data(), sink.size(), msg, &param));
    while (!slot.fired && Clock::now() < until) ucp_worker_progress(worker_);
    fired_.clear();
    if (slot.handle != nullptr) {
      if (!slot.fired) ucp_request_cancel(worker_, slot.handle);
      ucp_request_free(slot.handle);
    }
    if (!slot.fired) return;
  }
}

}  // namespace braid::transport::ucx
