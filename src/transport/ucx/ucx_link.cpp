// The UCX transport's connections: peers' addresses, endpoints and each pair's handshake, made
// for every pair at creation (eager) or when a pair is first used (lazy). The rules are in
// ucx_transport_impl.hpp ("Connections").
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <braid/error.hpp>
#include <string>
#include <vector>

#include "common/handshake.hpp"
#include "common/peer_policy.hpp"
#include "transport/ucx/ucx_transport_impl.hpp"

namespace braid::transport::ucx {

namespace {

// What each side of a pair proves it is: its rank and the job's size.
std::vector<std::uint8_t> rankContext(int rank, int size) {
  std::vector<std::uint8_t> out(8);
  for (int i = 0; i < 4; ++i) {
    out[i] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(rank) >> (8 * i));
    out[4 + i] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(size) >> (8 * i));
  }
  return out;
}

bool contextIs(const std::vector<std::uint8_t>& ctx, int rank, int size, int* theirSize) {
  if (ctx.size() != 8) return false;
  std::uint32_t r = 0, s = 0;
  for (int i = 0; i < 4; ++i) {
    r |= static_cast<std::uint32_t>(ctx[i]) << (8 * i);
    s |= static_cast<std::uint32_t>(ctx[4 + i]) << (8 * i);
  }
  if (theirSize != nullptr) *theirSize = static_cast<int>(s);
  return static_cast<int>(r) == rank && static_cast<int>(s) == size;
}

std::atomic<std::size_t> endpointsMade{0};  // ucxEndpointsMade()

std::string sinceText(Clock::time_point t) {
  return msText(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t));
}

}  // namespace

void UcxTransport::connect(const Lookup& lookup) {
  std::unique_lock<std::mutex> lk(mu_);
  const Deadline deadline = Clock::now() + options_.connectTimeout;
  for (int p = 0; p < size_; ++p) {
    PeerState& ps = peers_[static_cast<std::size_t>(p)];
    ps.description = "rank " + std::to_string(p);
    if (p == rank_) continue;
    std::vector<std::uint8_t> theirs;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        std::max(deadline - Clock::now(), Clock::duration::zero()));
    try {
      theirs = lookup(p, left);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout, self_ + " timed out after " +
                                          msText(options_.connectTimeout) + " waiting for rank " +
                                          std::to_string(p) + " to publish its UCX address (" +
                                          e.detail() + ")");
    }
    std::size_t descBytes = 0;
    if (theirs.size() >= 4)
      for (int i = 0; i < 4; ++i) descBytes |= static_cast<std::size_t>(theirs[i]) << (8 * i);
    if (theirs.size() < 4 || descBytes > 256 || theirs.size() <= 4 + descBytes)
      throw Error(ErrorCode::InvalidArgument, self_ + ": rank " + std::to_string(p) +
                                                  " published a malformed UCX address (" +
                                                  std::to_string(theirs.size()) + " bytes)");
    ps.description += " (" + std::string(theirs.begin() + 4, theirs.begin() + 4 + descBytes) + ")";
    ps.address.assign(theirs.begin() + 4 + static_cast<long>(descBytes), theirs.end());
    ps.inbox = engine::Inbox(rank_, p, ps.description, *this);
    endpointArgs_[static_cast<std::size_t>(p)] = EndpointArg{this, p};
  }
  goodbyeBuf_.resize(8 + security::kMaxReasonBytes);
  hsBuf_.resize(security::kHandshakeHeaderBytes + security::kMaxBodyBytes);
  if (!options_.lazyConnect) {
    for (int p = 0; p < size_; ++p)
      if (p != rank_) makeEndpoint(p);
    for (int p = 0; p < size_; ++p)
      if (p != rank_) startLink(p, false);
    awaitLinks(deadline);
    drain();
    return;
  }
  drain();
  openWaitFds(connectorWake_, connectorEpoll_);
  connector_ = std::thread([this] { connectorLoop(); });
}

// The connector thread (lazy only): drives the worker while nobody of this rank waits on it,
// and nobody did for kConnectorIdle (a rank between two operations drives it again soon).
void UcxTransport::connectorLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    if (waiting_ > 0 || engine_.failure() || worker_ == nullptr) {
      connectorCv_.wait_for(lk, std::chrono::milliseconds(20));
      continue;
    }
    const auto idle = std::chrono::steady_clock::now() - lastDriven_;
    if (idle < kConnectorIdle) {
      connectorCv_.wait_for(lk, kConnectorIdle - idle);
      continue;
    }
    progress();
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;  // events pending: progress again
    // Pairs being set up time out (checkLinks) even when nothing arrives. And the first message
    // of a pair a peer starts (its ring or hello) does not fire the armed worker's event fd
    // (UCX 1.13's tcp takes the new connection in its async thread): while a peer may still
    // start one, look every kConnectorPoll instead of waiting a second for it.
    bool mayBeRung = false;
    for (int p = 0; p < size_ && !mayBeRung; ++p) {
      const PeerState& ps = peers_[static_cast<std::size_t>(p)];
      mayBeRung = p != rank_ && ps.link != PeerState::Link::Ready && !ps.error && !ps.ended;
    }
    const int cap = linking_.empty() && !mayBeRung ? 1000 : kConnectorPoll;
    lk.unlock();
    epoll_event events[2];
    ::epoll_wait(connectorEpoll_.get(), events, 2, cap);
    lk.lock();
  }
}

void UcxTransport::stopConnector() {
  if (!connector_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  connectorCv_.notify_all();
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(connectorWake_.get(), &one, sizeof one);
  connector_.join();
}

// Eager: until every pair is authenticated. A key that differs fails this rank with Auth (and
// tells the ranks it still initiates with, so they drop it now); the others time out naming it.
void UcxTransport::awaitLinks(Deadline deadline) {
  for (;;) {
    progress();
    int missing = 0;
    for (int p = 0; p < size_; ++p) {
      const PeerState& ps = peers_[static_cast<std::size_t>(p)];
      if (p == rank_ || ps.link == PeerState::Link::Ready) continue;
      if (ps.error &&
          (ps.error->code() == ErrorCode::Auth || ps.error->code() == ErrorCode::Mismatch ||
           ps.error->code() == ErrorCode::InvalidArgument)) {
        if (ps.error->code() == ErrorCode::Auth) {
          for (int q = 0; q < rank_; ++q) {
            const PeerState& other = peers_[static_cast<std::size_t>(q)];
            if (other.link != PeerState::Link::Linking || other.error) continue;
            security::Message reject;
            reject.type = security::MessageType::Reject;
            reject.service = security::Service::Transport;
            reject.reason = security::RejectReason::Auth;
            reject.text = "rank " + std::to_string(rank_) + " could not authenticate a peer";
            std::vector<std::uint8_t> wire;
            security::appendMessage(reject, wire);
            sendSide(q, Kind::Handshake, 0, std::move(wire));
          }
          flush(std::chrono::milliseconds(200));
        }
        throw *ps.error;
      }
      ++missing;
    }
    if (missing == 0) return;
    if (Clock::now() >= deadline) {
      for (int p = 0; p < rank_; ++p) {
        const PeerState& ps = peers_[static_cast<std::size_t>(p)];
        if (ps.link != PeerState::Link::Ready)
          throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank_) +
                                              " could not connect to " + ps.description +
                                              " within " + msText(options_.connectTimeout) +
                                              " (last error: " + ps.lastError + ")");
      }
      std::vector<int> waiting;
      for (int p = rank_ + 1; p < size_; ++p)
        if (peers_[static_cast<std::size_t>(p)].link != PeerState::Link::Ready)
          waiting.push_back(p);
      throw Error(ErrorCode::Timeout,
                  security::connectTimeoutText(self_, options_.connectTimeout, waiting,
                                               policy_.dropped(), "handshake", lastDrop_));
    }
    sleep(std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
  }
}

void UcxTransport::makeEndpoint(int peer) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.ep != nullptr) return;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(ps.address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = endpointFailed;
  ep.err_handler.arg = &endpointArgs_[static_cast<std::size_t>(peer)];
  const ucs_status_t s = ucp_ep_create(worker_, &ep, &ps.ep);
  if (s == UCS_OK) {
    endpoints_.fetch_add(1, std::memory_order_relaxed);
    endpointsMade.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ps.ep = nullptr;
  // Peer failure detection is not optional (a dead peer must give PeerLost), and UCX 1.13's
  // shared-memory transports offer it only with their error handling turned on: then no
  // endpoint can be made at all, not even to this rank's own worker. Otherwise the peer's
  // worker is gone (its rank exited or died before this pair connected; UCX's tcp is refused,
  // its shared memory cannot be attached).
  if (s == UCS_ERR_UNREACHABLE && !failureDetectionWorks())
    throw Error(ErrorCode::InvalidArgument,
                self_ + ": UCX has no transport with peer failure detection to " + ps.description +
                    " (ucp_ep_create: " + statusText(s) +
                    "): check that UCX_TLS and UCX_NET_DEVICES reach it; UCX's shared-memory "
                    "transports need UCX_POSIX_ERROR_HANDLING=y (or UCX_SYSV_ERROR_HANDLING=y; "
                    "MM_ERROR_HANDLING=y in UcxOptions::config) for it (docs/ucx.md)");
  throw Error(ErrorCode::PeerLost,
              "rank " + std::to_string(rank_) + " cannot reach " + ps.description +
                  ": its UCX worker is gone (ucp_ep_create: " + statusText(s) + ")");
}

// Whether this worker can make an endpoint with peer failure detection to itself (once, and
// only after an endpoint to a peer failed as unreachable).
bool UcxTransport::failureDetectionWorks() {
  if (!selfProbe_) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ucp_address_t* address = nullptr;
    std::size_t addressBytes = 0;
    if (ucp_worker_get_address(worker_, &address, &addressBytes) != UCS_OK) return true;
    ep.address = address;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ucp_ep_h self = nullptr;
    const ucs_status_t s = ucp_ep_create(worker_, &ep, &self);
    ucp_worker_release_address(worker_, address);
    if (s == UCS_OK) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      const ucs_status_ptr_t p = ucp_ep_close_nbx(self, &param);
      if (p != nullptr && !UCS_PTR_IS_ERR(p)) ucp_request_free(p);
    }
    selfProbe_ = s != UCS_ERR_UNREACHABLE;
  }
  return *selfProbe_;
}

// The pair's handshake starts: this rank sends its hello (it is the higher rank), or, the lower
// rank, waits for the peer's, after ringing it when this side needs the pair first.
void UcxTransport::startLink(int peer, bool ring) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.link != PeerState::Link::Idle || peerError(peer)) return;
  try {
    makeEndpoint(peer);
  } catch (const Error& e) {
    failPeer(peer, e);
    return;
  }
  ps.link = PeerState::Link::Linking;
  ps.linkStarted = Clock::now();
  ps.lastError = "none";
  linking_.push_back(peer);
  const std::string& key = options_.security.authKey;
  if (peer < rank_) {
    ps.initiator = std::make_unique<security::Initiator>(key, security::Service::Transport,
                                                         rankContext(rank_, size_));
    std::vector<std::uint8_t> hello;
    ps.initiator->appendHello(hello);
    sendSide(peer, Kind::Handshake, 0, std::move(hello));
    ps.lastError = "no answer to its hello";
  } else {
    ps.responder = std::make_unique<security::Responder>(key, security::Service::Transport,
                                                         rankContext(rank_, size_));
    if (ring) sendSide(peer, Kind::Handshake, kRingSeq, {});
  }
}

// One handshake message from `peer` (the one handshake receive took it).
void UcxTransport::onHandshake(int peer, std::uint64_t seq, std::span<const std::uint8_t> bytes) {
  if (peer < 0 || peer >= size_ || peer == rank_) return;  // not a rank of this job
  if (tearingDown_ || engine_.failure()) return;           // no new pair now
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (peerError(peer) || ps.link == PeerState::Link::Ready) return;
  if (seq == kRingSeq) {
    // A lower rank needs the pair: this rank initiates (unless it has already).
    if (peer < rank_) startLink(peer, false);
    return;
  }
  if (ps.link == PeerState::Link::Idle) {
    // A higher rank's hello for a pair this rank has not needed yet; a lower rank speaks only
    // in answer to this rank's hello, which was not sent.
    if (peer < rank_) return;
    startLink(peer, false);
    if (ps.link != PeerState::Link::Linking) return;
  }
  handshakeStep(peer, bytes);
}

void UcxTransport::handshakeStep(int peer, std::span<const std::uint8_t> bytes) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  security::Message m;
  const auto decoded = security::decodeMessage(bytes, m);
  std::vector<std::uint8_t> out;
  auto send = [&] {
    if (!out.empty()) sendSide(peer, Kind::Handshake, 0, std::move(out));
    out.clear();
  };
  if (peer < rank_) {
    security::Initiator& ini = *ps.initiator;
    if (decoded.status != security::DecodeStatus::Complete) {
      ps.lastError = "not a braid handshake: " + decoded.error;
      return;
    }
    const auto st = ini.onMessage(m, out);
    send();
    if (st == security::HandshakeState::Done) {
      int theirSize = 0;
      if (contextIs(ini.peerContext(), peer, size_, &theirSize))
        linkReady(peer);
      else
        ps.lastError = "reached another rank or a job of " + std::to_string(theirSize) + " ranks";
    } else if (st == security::HandshakeState::Failed) {
      if (ini.failure() == security::Failure::Auth)
        failPeer(peer, Error(ErrorCode::Auth, "rank " + std::to_string(rank_) +
                                                  " failed to authenticate with " + ps.description +
                                                  ": " + ini.error()));
      else
        ps.lastError = ini.error();
    }
    return;
  }
  auto drop = [&](const std::string& why) {
    policy_.reportDropped(self_, ps.description, why);
    lastDrop_ = ps.description + ": " + why;
    ps.lastError = why;
    ps.responder = std::make_unique<security::Responder>(
        options_.security.authKey, security::Service::Transport, rankContext(rank_, size_));
  };
  if (decoded.status != security::DecodeStatus::Complete) return drop("not a braid handshake");
  security::Responder& resp = *ps.responder;
  const auto st = resp.onMessage(m, out);
  send();
  if (st == security::HandshakeState::Failed) return drop("handshake failed: " + resp.error());
  if (st != security::HandshakeState::Verified) return;
  int theirSize = 0;
  if (contextIs(resp.peerContext(), peer, size_, &theirSize)) {
    resp.accept(out);
    send();
    linkReady(peer);
    return;
  }
  resp.reject(security::RejectReason::Refused, "this job has " + std::to_string(size_) + " ranks",
              out);
  send();
  if (policy_.authenticated() && theirSize != size_)
    return failPeer(
        peer, Error(ErrorCode::Mismatch, self_ + ": authenticated " + ps.description +
                                             " belongs to a job of " + std::to_string(theirSize) +
                                             " ranks, this job has " + std::to_string(size_)));
  drop("not rank " + std::to_string(peer) + " of this job");
}

// The pair is authenticated: its messages are taken from now on, and the sends posted meanwhile
// go out in the order they were posted.
void UcxTransport::linkReady(int peer) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  endLink(peer);
  ps.link = PeerState::Link::Ready;
  ps.address = {};
  postHeaderRecv(peer);
  while (!ps.held.empty() && !peerError(peer)) {
    Op* op = ps.held.front();
    ps.held.pop_front();
    startSend(op, op->req->data);
  }
  // Lanes closed or aborted here before the pair connected (ucx_lanes.cpp), still gone.
  std::vector<std::pair<std::uint64_t, bool>> untold;
  untold.swap(ps.untold);
  for (const auto& [lane, aborted] : untold) {
    if (lanes_.gone(lane)) sendLaneGone(peer, lane, aborted);
  }
}

// The handshake's state goes (the pair is ready, or failed).
void UcxTransport::endLink(int peer) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.link != PeerState::Link::Linking) return;
  ps.link = PeerState::Link::Idle;
  ps.initiator.reset();
  ps.responder.reset();
  linking_.erase(std::find(linking_.begin(), linking_.end(), peer));
}

// Lazy: a pair not authenticated within connectTimeout of its start fails when this rank has
// requests waiting for it, and is forgotten otherwise (a peer started it; it may start again).
void UcxTransport::checkLinks() {
  const auto now = Clock::now();
  std::vector<int> late;
  for (int p : linking_)
    if (now - peers_[static_cast<std::size_t>(p)].linkStarted >= options_.connectTimeout)
      late.push_back(p);
  for (int p : late) {
    PeerState& ps = peers_[static_cast<std::size_t>(p)];
    if (!ps.held.empty() || ps.inbox.firstPosted() != nullptr) {
      failPeer(
          p, Error(ErrorCode::Timeout,
                   "rank " + std::to_string(rank_) + " could not connect to " + ps.description +
                       " within " + msText(options_.connectTimeout) + " (" + linkReason(p) + ")"));
    } else {
      endLink(p);
    }
  }
}

std::string UcxTransport::linkReason(int peer) const {
  const PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.link != PeerState::Link::Linking) return "";
  return "the pair's handshake with " + ps.description + " has not finished: " +
         (peer < rank_ ? "this rank sent its hello " : "this rank rang it or answered its hello ") +
         sinceText(ps.linkStarted) + " ago; last error: " + ps.lastError;
}

void UcxTransport::sendSide(int peer, Kind kind, std::uint64_t seq,
                            std::vector<std::uint8_t> bytes) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.ep == nullptr) return;
  sideSends_.emplace_back(std::move(bytes), Slot{});
  auto& [wire, slot] = sideSends_.back();
  arm(slot, this, Slot::Owner::Other);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = sendDone;
  param.user_data = &slot;
  launched(slot,
           ucp_tag_send_nbx(ps.ep, wire.data(), wire.size(), makeTag(kind, rank_, seq), &param));
}

}  // namespace braid::transport::ucx

namespace braid::transport {

std::size_t ucxEndpointsMade() noexcept {
  return ucx::endpointsMade.load(std::memory_order_relaxed);
}

}  // namespace braid::transport
