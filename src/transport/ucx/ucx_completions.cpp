// The UCX transport's completions (the rules are in ucx_transport_impl.hpp): progressing the
// worker, the fired slots drained in batches, headers matched to posted receives (or held),
// payloads delivered, operations made and finished (posting and waiting are in
// ucx_transport.cpp, failure and teardown in ucx_teardown.cpp).
#include <algorithm>
#include <braid/error.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "transport/ucx/ucx_transport_impl.hpp"

namespace braid::transport::ucx {

namespace {

using State = Request::State;

}  // namespace

void UcxTransport::progress() {
  drain();
  // One call unless a large payload moves: each call polls every transport of the worker (over
  // tcp an epoll_wait), and a second one after a small message found nothing more (8 B
  // allreduce between two hosts 8.7 -> 8.1 us); a rendezvous advances a step per call, and
  // draining it in a row keeps its pace (shared memory, 16 MiB allreduce).
  if (ucp_worker_progress(worker_) != 0) {
    sideLeft_ = true;
    if (payloadsInFlight() > 0)
      for (int i = 0; i < 63 && ucp_worker_progress(worker_) != 0; ++i) {
      }
  }
  drain();
  if (sideLeft_) takeSideMessages();
  reap();
  if (options_.lazyConnect && !linking_.empty()) checkLinks();
}

void UcxTransport::drain() {
  // The completions are taken in batches (a completion handled may post an operation that
  // completes at once); the two batch vectors keep their storage, so a steady state allocates
  // nothing. What fires during a nested call (a completion's handler posting) is taken by the
  // drain under way, in order.
  if (draining_) return;
  struct Draining {
    UcxTransport& t;
    explicit Draining(UcxTransport& self) : t(self) { t.draining_ = true; }
    ~Draining() {
      t.draining_ = false;
      t.batch_.clear();
    }
  } draining(*this);
  while (!fired_.empty()) {
    batch_.clear();
    batch_.swap(fired_);
    for (Slot* s : batch_) {
      if (s->handle != nullptr) {
        ucp_request_free(s->handle);
        s->handle = nullptr;
      }
      s->outstanding = false;
      switch (s->owner) {
        case Slot::Owner::Send:
        case Slot::Owner::PayloadRecv: {
          Op* op = static_cast<Op*>(s->op);
          if ((s->status != UCS_OK ||
               (s->owner == Slot::Owner::PayloadRecv && s->length != op->bytes)) &&
              op->fail == Op::Fail::None) [[unlikely]]
            opSlotFailed(*s, *op);
          if (--op->pending == 0) finishOp(op);
          break;
        }
        case Slot::Owner::Header:
          if (s->status == UCS_OK) [[likely]]
            onHeader(s->peer);
          else
            headerSlotFailed(*s);
          break;
        case Slot::Owner::Goodbye:
          onGoodbyeSlot(*s);
          break;
        case Slot::Owner::Handshake:
          if (s->status == UCS_OK)
            onHandshake(senderOf(s->senderTag), s->senderTag & kSeqMask,
                        std::span<const std::uint8_t>(hsBuf_.data(), s->length));
          break;
        case Slot::Owner::Other:
          break;
      }
    }
  }
}

// Takes the goodbyes and handshakes waiting in UCX's unexpected queue (after the worker moved
// something: every message that arrives is one of its events). They come from any sender, and
// an any-sender receive kept posted for them made UCX search its wildcard queue for every
// message (ucp_tag_exp_search_all, ~110 instructions per message). One of each kind is received
// at a time, into goodbye_ / hs_; one still being received (a message in several fragments)
// leaves the rest of its kind for a later round.
void UcxTransport::takeSideMessages() {
  for (;;) {
    if (closing_ || engine_.failure()) return;
    const bool byeFree = !goodbye_.outstanding;
    const bool hsFree = !hs_.outstanding;
    sideLeft_ = !byeFree || !hsFree;
    if (!byeFree && !hsFree) return;
    // Goodbye and Handshake are the two kinds with the top bit set.
    const ucp_tag_t tag = byeFree && hsFree ? std::uint64_t{1} << 63
                          : byeFree         ? makeTag(Kind::Goodbye, 0, 0)
                                            : makeTag(Kind::Handshake, 0, 0);
    const ucp_tag_t mask = byeFree && hsFree ? std::uint64_t{1} << 63 : kKindMask;
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, tag, mask, 1, &info);
    if (msg == nullptr) return;
    const bool bye = (info.sender_tag & kKindMask) == makeTag(Kind::Goodbye, 0, 0);
    Slot& s = bye ? goodbye_ : hs_;
    std::vector<std::uint8_t>& buf = bye ? goodbyeBuf_ : hsBuf_;
    arm(s, this, bye ? Slot::Owner::Goodbye : Slot::Owner::Handshake);
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = recvDone;
    param.user_data = &s;
    // Longer than the buffer: the slot fires with UCS_ERR_MESSAGE_TRUNCATED and is ignored.
    launched(s, ucp_tag_msg_recv_nbx(worker_, buf.data(), buf.size(), msg, &param), &info);
    drain();  // handles it now if it completed inside the call
  }
}

// A send or a large payload's receive of `op` ended badly: the op fails with its peer (or with
// the transport, when the transport failed). Out of line: drain()'s loop stays small.
void UcxTransport::opSlotFailed(const Slot& s, Op& op) {
  const int peer = op.peer;
  const PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (s.status != UCS_OK) {
    if (engine_.failure()) {
      op.fail = Op::Fail::Transport;
      return;
    }
    op.fail = Op::Fail::Peer;
    if (s.status == UCS_ERR_MESSAGE_TRUNCATED)
      failPeer(peer,
               Error(ErrorCode::Mismatch, "rank " + std::to_string(rank_) + " received more than " +
                                              std::to_string(op.bytes) + " bytes (" +
                                              tagText(op.tag) + ") from " + ps.description));
    else
      failPeer(peer, Error(ErrorCode::PeerLost, "rank " + std::to_string(rank_) +
                                                    " lost its connection to " + ps.description +
                                                    ": " + statusText(s.status) + " during " +
                                                    (op.isSend ? "a send" : "a recv") + " of " +
                                                    std::to_string(op.bytes) + " bytes"));
    return;
  }
  // A payload of another size than its header said.
  op.fail = Op::Fail::Peer;
  failPeer(peer, Error(ErrorCode::Mismatch, "rank " + std::to_string(rank_) + " expected " +
                                                std::to_string(op.bytes) + " bytes from " +
                                                ps.description + " but received " +
                                                std::to_string(s.length)));
}

void UcxTransport::headerSlotFailed(const Slot& s) {
  if (s.status == UCS_ERR_CANCELED) return;
  failPeer(s.peer,
           Error(ErrorCode::Mismatch, "rank " + std::to_string(rank_) + " received a malformed " +
                                          "message from " +
                                          peers_[static_cast<std::size_t>(s.peer)].description +
                                          ": " + statusText(s.status)));
}

// A goodbye (or the acknowledgement of this rank's) arrived.
void UcxTransport::onGoodbyeSlot(const Slot& s) {
  if (s.status != UCS_OK) return;
  const int peer = senderOf(s.senderTag);
  if ((s.senderTag & kSeqMask) == kGoodbyeAckSeq) {
    if (peer >= 0 && peer < size_ && peer != rank_)
      peers_[static_cast<std::size_t>(peer)].goodbyeAcked = true;
    return;
  }
  // A peer that never authenticated sent nothing this rank took: its goodbye says
  // nothing (and is not trusted).
  if (peer >= 0 && peer < size_ && peer != rank_ && s.length >= 8 &&
      peers_[static_cast<std::size_t>(peer)].link == PeerState::Link::Ready) {
    PeerState& ps = peers_[static_cast<std::size_t>(peer)];
    if (!ps.finalSeq) {
      ps.finalSeq = loadLe64(goodbyeBuf_.data());
      ps.goodbyeReason.assign(goodbyeBuf_.begin() + 8,
                              goodbyeBuf_.begin() + static_cast<long>(s.length));
      // The peer closes its endpoint once this arrives: what it sent before has left
      // its socket by then (teardown).
      sendSide(peer, Kind::Goodbye, kGoodbyeAckSeq, {});
    }
    endCheck(peer);
  }
}

void UcxTransport::malformedHeader(int peer, std::size_t got) {
  failPeer(peer, Error(ErrorCode::Mismatch,
                       "rank " + std::to_string(rank_) + " received a malformed header (" +
                           std::to_string(got) + " bytes) from " +
                           peers_[static_cast<std::size_t>(peer)].description));
}

// A header arrived from `peer`: its inbox takes it (or, stalled, the backlog keeps it).
void UcxTransport::onHeader(int peer) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.error) return;
  const std::size_t got = ps.header.length;
  bool ok = got >= kHeaderBytes;
  std::uint64_t tag = 0, lane = 0, wireBytes = 0;
  std::size_t bytes = 0;
  if (ok) {
    tag = loadLe64(ps.headerBuf.data());
    wireBytes = loadLe64(ps.headerBuf.data() + 8);
    lane = loadLe64(ps.headerBuf.data() + 16);
    bytes = static_cast<std::size_t>(wireBytes);
    ok = bytes <= kInlineBytes ? got == kHeaderBytes + bytes : got == kHeaderBytes;
  }
  if (ok && wireBytes == kControlBytes) {
    ++ps.recvSeq;
    if (ps.backlog.empty()) {
      onLaneGone(peer, lane, tag);
    } else {  // after the messages ahead of it
      ps.backlog.push().reset(tag, lane, true, 0, 0);
    }
    if (!ps.error && !closing_ && !(ps.finalSeq && ps.recvSeq >= *ps.finalSeq))
      postHeaderRecv(peer);
    endCheck(peer);
    return;
  }
  if (!ok) [[unlikely]] {
    malformedHeader(peer, got);
    return;
  }
  const std::uint64_t seq = ps.recvSeq++;
  const std::uint8_t* payload = ps.headerBuf.data() + kHeaderBytes;
  if (!ps.backlog.empty() || !take(peer, tag, lane, bytes, seq, payload)) {
    if (ps.error) return;
    Arrived& a = ps.backlog.push();
    a.reset(tag, lane, false, bytes, seq);
    if (bytes <= kInlineBytes) a.payload.assign(payload, payload + bytes);
  }
  if (!ps.error && !closing_ && !(ps.finalSeq && ps.recvSeq >= *ps.finalSeq)) postHeaderRecv(peer);
  endCheck(peer);
}

// Hands the peer's message `seq` to its inbox; false when the inbox stalls on it (or the
// peer failed).
bool UcxTransport::take(int peer, std::uint64_t tag, std::uint64_t lane, std::size_t bytes,
                        std::uint64_t seq, const std::uint8_t* payload) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  std::optional<Error> mismatch;
  // A message no receive of its lane wants while other receives wait is held aside (as over
  // TCP), so one communicator's stream never stands in another's way.
  const bool closed = laneClosed(lane);
  switch (ps.inbox.arrive(tag, bytes, SIZE_MAX, mismatch, lane, true, closed)) {
    case engine::Inbox::Arrival::Stall:
    case engine::Inbox::Arrival::TooLarge:  // (every size is held)
      return false;
    case engine::Inbox::Arrival::Mismatch:
      // The stream cannot be trusted past a mismatch (as over TCP): the link fails, and with
      // it the receive.
      failPeer(peer, *mismatch);
      return false;
    case engine::Inbox::Arrival::Done:
      return true;
    case engine::Inbox::Arrival::Receiving:
      break;
  }
  if (bytes > kInlineBytes) {
    if (Request* r = ps.inbox.rxDetach()) {
      startPayloadRecv(*r, seq);
    } else if (closed) {
      // Of a communicator gone here: dropped; its payload stays inside UCX until the end.
      ps.inbox.rxComplete();
    } else {
      ps.inbox.rxPark();
      ps.parked.push_back({tag, lane, seq});
    }
    return true;
  }
  std::uint8_t* dst = ps.inbox.rxSpace(bytes);
  if (dst == nullptr) {
    failPeer(peer, ps.inbox.cannotHold());
    return false;
  }
  std::memcpy(dst, payload, bytes);
  ps.inbox.rxCommit(bytes);
  ps.inbox.rxComplete();
  return true;
}

// Hands the backlog to the inbox until it stalls again.
void UcxTransport::deliver(int peer) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  while (!ps.backlog.empty() && !ps.error) {
    Arrived& a = ps.backlog.front();
    if (a.control) {
      const std::uint64_t kind = a.tag, lane = a.lane;
      ps.backlog.pop();
      onLaneGone(peer, lane, kind);
      continue;
    }
    if (!take(peer, a.tag, a.lane, a.bytes, a.seq, a.payload.data())) break;
    if (ps.error) break;
    // The slot keeps a small payload's storage for the next message; a larger one is freed (a
    // rank with thousands of peers would otherwise keep up to kInlineBytes per slot per peer).
    if (a.payload.capacity() > kKeptPayloadBytes) std::vector<std::uint8_t>().swap(a.payload);
    ps.backlog.pop();
  }
  endCheck(peer);
}

// A peer that said goodbye sends nothing past its last message: once every message it sent has
// reached the inbox, the receives still waiting for it cannot be satisfied.
void UcxTransport::endPeer(int peer) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.recvSeq < *ps.finalSeq || ps.error || ps.ended || !ps.backlog.empty()) return;
  if (ps.header.outstanding && ps.header.handle != nullptr)
    ucp_request_cancel(worker_, ps.header.handle);
  ps.ended = Error(ErrorCode::PeerLost, "rank " + std::to_string(rank_) + " lost " +
                                            ps.description + ": it " + ps.goodbyeReason);
  while (Request* r = ps.inbox.firstPosted()) {
    ps.inbox.withdraw(*r);
    finish(*r, State::Failed, true);
  }
  doom(peer);
}

void UcxTransport::doom(int peer) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.doomedAt || ps.error) return;
  ps.doomedAt = Clock::now();
  ++doomed_;
}

// Fails the peers doomed at least kGrace ago: a broken one once nothing of it waits inside
// UCX any more, an ended one with whatever is still pending with it.
void UcxTransport::reap() {
  if (doomed_ == 0) return;
  const auto now = Clock::now();
  for (int p = 0; p < size_; ++p) {
    PeerState& ps = peers_[static_cast<std::size_t>(p)];
    if (!ps.doomedAt || ps.error || now - *ps.doomedAt < kGrace) continue;
    if (ps.ended) {
      failPeer(p, *ps.ended);
      continue;
    }
    if (ps.header.outstanding && !ps.header.fired) {
      ucp_tag_recv_info_t info{};
      if (ucp_tag_probe_nb(worker_, makeTag(Kind::Header, p, ps.recvSeq), kFullMask, 0, &info) !=
          nullptr)
        continue;  // more has arrived: the header receive takes it at the next progress
    } else if (ps.header.fired) {
      continue;
    }
    failPeer(p, *ps.broken);
  }
}

// A live Op for `req` (to `peer`): a spare one when there is one.
Op* UcxTransport::newOp(int peer, Request& req) {
  std::unique_ptr<Op> op;
  if (spareOps_.empty()) {
    op = std::make_unique<Op>();
  } else {
    op = std::move(spareOps_.back());
    spareOps_.pop_back();
  }
  // (Its slots are armed when used.)
  op->req = &req;
  op->peer = peer;
  op->isSend = false;
  op->bytes = req.bytes;
  op->tag = req.tag;
  op->lane = req.lane;
  op->seq = 0;
  op->pending = 0;
  op->fail = Op::Fail::None;
  op->liveIndex = live_.size();
  live_.push_back(op.get());
  return op.release();
}

// The request of an Op whose ucp operations have all completed.
void UcxTransport::finishOp(Op* op) {
  Request* detached = op->req;
  const Op::Fail fail = op->fail;
  Op* last = live_.back();
  live_[op->liveIndex] = last;
  last->liveIndex = op->liveIndex;
  live_.pop_back();
  // Kept for the next message, its wire buffer with it (a few are enough: an Op is needed per
  // message in flight, and most are small).
  if (spareOps_.size() < 64) {
    spareOps_.emplace_back(op);
  } else {
    delete op;
  }
  if (detached == nullptr) return;  // of a lane closed meanwhile (closeLane): nobody waits
  Request& req = *detached;
  if (fail == Op::Fail::None)
    finish(req, State::Done, false);
  else
    finish(req, State::Failed, fail == Op::Fail::Peer);
}

// The sends held for a pair that will not be authenticated now.
void UcxTransport::failHeld(PeerState& ps, Op::Fail why) {
  while (!ps.held.empty()) {
    Op* op = ps.held.front();
    ps.held.pop_front();
    op->fail = why;
    finishOp(op);
  }
}

void UcxTransport::finish(Request& req, State state, bool peerError) {
  engine_.publish(req, state, peerError);  // the last touch
  if (sleepers_ > 0) kick();
}

void UcxTransport::finishAlone(Request& req, Error error) {
  engine_.publishAlone(req, std::move(error));  // the last touch
  if (sleepers_ > 0) kick();
}

}  // namespace braid::transport::ucx
