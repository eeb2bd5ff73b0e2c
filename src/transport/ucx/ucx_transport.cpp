// The UCX transport: see ucx_transport_impl.hpp for the wire format, matching and failure rules.
// Here: construction, posting and waiting; completions are in ucx_completions.cpp, the handshake
// in ucx_link.cpp, lanes in ucx_lanes.cpp, peer failure and teardown in ucx_teardown.cpp.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <braid/error.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "common/crypto.hpp"
#include "common/handshake.hpp"
#include "common/peer_policy.hpp"
#include "transport/ucx/ucx_transport_impl.hpp"

namespace braid::transport {
namespace ucx {

std::string msText(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

std::string statusText(ucs_status_t s) {
  return ucs_status_string(s);
}

void sendDone(void*, ucs_status_t status, void* user) {
  auto* s = static_cast<Slot*>(user);
  if (s->fired) return;
  s->fired = true;
  s->status = status;
  s->self->onFired(s);
}

void recvDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* s = static_cast<Slot*>(user);
  if (s->fired) return;
  s->fired = true;
  s->status = status;
  if (status == UCS_OK && info != nullptr) {
    s->length = info->length;
    s->senderTag = info->sender_tag;
  }
  s->self->onFired(s);
}

void endpointFailed(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* a = static_cast<EndpointArg*>(arg);
  a->self->onEndpointError(a->peer, status);
}

void arm(Slot& s, UcxTransport* self, Slot::Owner owner) {
  s.self = self;
  s.owner = owner;
  s.handle = nullptr;
  s.outstanding = true;
  s.fired = false;
  s.status = UCS_OK;
  s.length = 0;
}

void launched(Slot& s, ucs_status_ptr_t p, const ucp_tag_recv_info_t* info) {
  if (p == nullptr) {
    if (s.fired) return;  // the callback ran already
    s.fired = true;
    s.status = UCS_OK;
    if (info != nullptr) {
      s.length = info->length;
      s.senderTag = info->sender_tag;
    }
    s.self->onFired(&s);
  } else if (UCS_PTR_IS_ERR(p)) {
    s.fired = true;
    s.status = UCS_PTR_STATUS(p);
    s.self->onFired(&s);
  } else {
    // Pending, or completed inside the call (the callback ran): freed when drained.
    s.handle = p;
  }
}

void checkUcs(ucs_status_t s, const std::string& self, const char* what) {
  if (s != UCS_OK)
    throw Error(ErrorCode::Internal, self + ": " + what + " failed: " + statusText(s));
}

namespace {

using State = Request::State;

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

UcxTransport::UcxTransport(int rank, int size, const UcxOptions& options)
    : rank_(rank),
      size_(size),
      options_(options),
      busyPoll_(options.busyPoll),
      engine_(rank),
      mu_(engine_.mutex()),
      policy_(options.security) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::InvalidArgument, "createUcxTransport: rank " + std::to_string(rank) +
                                                " is outside a world of size " +
                                                std::to_string(size));
  if (size > kMaxRanks)
    throw Error(ErrorCode::InvalidArgument,
                "createUcxTransport: world size " + std::to_string(size) +
                    " is more than the UCX transport's " + std::to_string(kMaxRanks) + " ranks");
  self_ = "rank " + std::to_string(rank) + " (host " + hostName() + ", pid " +
          std::to_string(::getpid()) + ")";
  // Every peer's state exists from the start (no endpoint yet), so a transport destroyed before
  // connect() (the factory drops an opened worker it turns out not to need) tears down cleanly.
  peers_.resize(static_cast<std::size_t>(size_));
  endpointArgs_.resize(static_cast<std::size_t>(size_));
  std::unique_lock<std::mutex> lk(mu_);
  try {
    open();
  } catch (...) {
    teardown();
    throw;
  }
}

// A wake-up eventfd and an epoll set of it and the worker's event fd: how a thread sleeps
// until the worker or another thread has something for it.
void UcxTransport::openWaitFds(Fd& wake, Fd& epoll) const {
  wake.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!wake || !epoll)
    throw Error(ErrorCode::Internal, self_ + ": eventfd/epoll: " + std::strerror(errno));
  for (int fd : {workerFd_, wake.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      throw Error(ErrorCode::Internal, self_ + ": epoll_ctl: " + std::strerror(errno));
  }
}

UcxTransport::~UcxTransport() {
  stopConnector();
  std::unique_lock<std::mutex> lk(mu_);
  teardown();
}

void UcxTransport::open() {
  ucp_config_t* config = nullptr;
  // UCX reads its own variables here (UCX_TLS, UCX_NET_DEVICES, ...).
  checkUcs(ucp_config_read(nullptr, nullptr, &config), self_, "ucp_config_read");
  for (const auto& [key, value] : options_.config) {
    const std::string name = key.rfind("UCX_", 0) == 0 ? key.substr(4) : key;
    const ucs_status_t s = ucp_config_modify(config, name.c_str(), value.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      throw Error(ErrorCode::InvalidArgument, self_ + ": UCX rejects the setting UCX_" + name +
                                                  "=" + value + ": " + statusText(s));
    }
  }
  if (const std::string seg = transport::tcpRxSegmentFor(
          options_, std::getenv("UCX_TCP_RX_SEG_SIZE"), std::getenv("UCX_TLS"));
      !seg.empty()) {
    const ucs_status_t s = ucp_config_modify(config, kRxSegmentSetting, seg.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      throw Error(ErrorCode::Internal,
                  self_ + ": UCX rejects " + kRxSegmentSetting + "=" + seg + ": " + statusText(s));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<std::size_t>(size_);
  params.mt_workers_shared = 0;
  const ucs_status_t initStatus = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  checkUcs(initStatus, self_, "ucp_init");

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  // Any thread may call in, one at a time (mu_).
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  wp.events = UCP_WAKEUP_TAG_SEND | UCP_WAKEUP_TAG_RECV;
  checkUcs(ucp_worker_create(context_, &wp, &worker_), self_, "ucp_worker_create");
  checkUcs(ucp_worker_get_efd(worker_, &workerFd_), self_, "ucp_worker_get_efd");
  openWaitFds(wakeFd_, epollFd_);

  // Publish {u32 description bytes, description, worker address}.
  ucp_address_t* address = nullptr;
  std::size_t addressBytes = 0;
  checkUcs(ucp_worker_get_address(worker_, &address, &addressBytes), self_,
           "ucp_worker_get_address");
  const std::string mine = self_.substr(self_.find('(') + 1, self_.size() - self_.find('(') - 2);
  std::vector<std::uint8_t> value(4 + mine.size() + addressBytes);
  for (int i = 0; i < 4; ++i)
    value[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(mine.size() >> (8 * i));
  std::memcpy(value.data() + 4, mine.data(), mine.size());
  std::memcpy(value.data() + 4 + mine.size(), address, addressBytes);
  ucp_worker_release_address(worker_, address);
  published_ = std::move(value);
}

// ---- posting ----

void UcxTransport::prepare(const char* op, int peer, const void* data, std::size_t bytes,
                           std::uint64_t tag, bool isSend, Request& req) {
  engine::armRequest(
      req, op, rank_, size_, peer, data, bytes, tag, isSend, true, "", [] { return std::string(); },
      [this](int p) { return describePeer(p); });
}

void UcxTransport::postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                            Request& req) {
  prepare("postSend", peer, data, bytes, tag, true, req);
  std::lock_guard<std::mutex> lk(mu_);
  send(req);
}

void UcxTransport::send(Request& req) {
  const int peer = req.peer;
  if (engine_.failure()) return finish(req, State::Failed, false);
  if (laneFailed(req)) return;
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.link == PeerState::Link::Idle) startLink(peer, peer > rank_);
  if (peerError(peer)) return finish(req, State::Failed, true);
  Op* op = newOp(peer, req);
  op->isSend = true;
  if (ps.link == PeerState::Link::Ready)
    startSend(op, req.data);
  else
    ps.held.push_back(op);  // sent once the pair is authenticated (linkReady)
  drain();
}

// A request of a lane this rank aborted, or a send on a lane the peer left: failed at once
// (true). (A receive on a lane the peer left still takes what arrived before it left.)
bool UcxTransport::laneFailed(Request& req) {
  if (req.lane == 0) return false;
  if (lanes_.aborted(req.lane) != nullptr ||
      (req.isSend && peers_[static_cast<std::size_t>(req.peer)].laneGone.count(req.lane) != 0)) {
    finish(req, State::Failed, false);
    return true;
  }
  return false;
}

void UcxTransport::startSend(Op* op, const void* data) {
  PeerState& ps = peers_[static_cast<std::size_t>(op->peer)];
  const Request& r = *op->req;
  op->seq = ps.sendSeq++;
  const bool inlined = r.bytes <= kInlineBytes;
  // (resize only where the size differs: the call is not inlined, and an Op is reused)
  if (const std::size_t n = kHeaderBytes + (inlined ? r.bytes : 0); op->wire.size() != n)
    op->wire.resize(n);
  storeLe64(op->wire.data(), r.tag);
  storeLe64(op->wire.data() + 8, r.bytes);
  storeLe64(op->wire.data() + 16, r.lane);
  if (inlined && r.bytes > 0) std::memcpy(op->wire.data() + kHeaderBytes, data, r.bytes);
  op->pending = inlined ? 1 : 2;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = sendDone;
  for (int i = 0; i < op->pending; ++i) {
    Slot& s = op->slots[i];
    arm(s, this, Slot::Owner::Send);
    s.op = op;
    s.peer = op->peer;
    param.user_data = &s;
    launched(s, i == 0 ? ucp_tag_send_nbx(ps.ep, op->wire.data(), op->wire.size(),
                                          makeTag(Kind::Header, rank_, op->seq), &param)
                       : ucp_tag_send_nbx(ps.ep, data, r.bytes,
                                          makeTag(Kind::Payload, rank_, op->seq), &param));
  }
}

void UcxTransport::postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                            Request& req) {
  prepare("postRecv", peer, data, bytes, tag, false, req);
  std::lock_guard<std::mutex> lk(mu_);
  receive(req);
}

void UcxTransport::receive(Request& req) {
  const int peer = req.peer;
  if (engine_.failure()) return finish(req, State::Failed, false);
  if (laneFailed(req)) return;
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  // A receive connects the pair too, so a peer that is gone is PeerLost rather than a timeout.
  if (ps.link == PeerState::Link::Idle) startLink(peer, peer > rank_);
  if (ps.error) return finish(req, State::Failed, true);
  std::optional<Error> mismatch;
  switch (ps.inbox.post(req, mismatch)) {
    case engine::Inbox::Posted::Mismatch:
      // The stream cannot be trusted past a mismatch (as over TCP): the link fails.
      failPeer(peer, *mismatch);
      finish(req, State::Failed, true);
      break;
    case engine::Inbox::Posted::Done:
    case engine::Inbox::Posted::Failed:
      break;
    case engine::Inbox::Posted::Receiving: {
      // A large message held with its payload inside UCX (rxPark): fetch it now.
      Request* r = ps.inbox.rxDetach();
      const auto it = std::find_if(ps.parked.begin(), ps.parked.end(), [&](const auto& p) {
        return p.tag == r->tag && p.lane == r->lane;
      });
      const std::uint64_t seq = it->seq;
      ps.parked.erase(it);
      startPayloadRecv(*r, seq);
      break;
    }
    case engine::Inbox::Posted::Queued:
      if (ps.ended && ps.backlog.empty()) {  // nothing more comes from that peer
        ps.inbox.withdraw(req);
        finish(req, State::Failed, true);
      } else {
        // The peer's stream may have stalled for want of this receive.
        if (!engine::isP2P(req.tag)) deliver(peer);
        // Nothing more comes on a lane the peer left (once what it sent before is taken).
        if (req.lane != 0 && ps.laneGone.count(req.lane) != 0 && ps.backlog.empty() &&
            ps.inbox.withdraw(req))
          finish(req, State::Failed, false);
      }
      break;
  }
  drain();
}

void UcxTransport::postHeaderRecv(int peer) {
  PeerState& ps = peers_[static_cast<std::size_t>(peer)];
  if (ps.headerBuf.size() != kHeaderBytes + kInlineBytes)
    ps.headerBuf.resize(kHeaderBytes + kInlineBytes);
  arm(ps.header, this, Slot::Owner::Header);
  ps.header.peer = peer;
  postTagRecv(ps.header, ps.headerBuf.data(), ps.headerBuf.size(),
              makeTag(Kind::Header, peer, ps.recvSeq), kFullMask);
}

// A tagged receive into `s` (armed by the caller).
void UcxTransport::postTagRecv(Slot& s, void* data, std::size_t bytes, ucp_tag_t tag,
                               ucp_tag_t mask) {
  // Completions always come through the callback: UCX 1.13 does not describe a receive that
  // completes inside the call (param.recv_info is filled only from 1.16), and the length and
  // sender of every receive here matter.
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = recvDone;
  param.user_data = &s;
  launched(s, ucp_tag_recv_nbx(worker_, data, bytes, tag, mask, &param), &s.info);
}

// The payload of the peer's message `seq`, straight into the request (UCX's rendezvous).
void UcxTransport::startPayloadRecv(Request& req, std::uint64_t seq) {
  Op* op = newOp(req.peer, req);
  op->seq = seq;
  Slot& s = op->slots[0];
  arm(s, this, Slot::Owner::PayloadRecv);
  s.op = op;
  s.peer = op->peer;
  op->pending = 1;
  postTagRecv(s, req.data, req.bytes, makeTag(Kind::Payload, op->peer, seq), kFullMask);
}

// ---- waiting ----

void UcxTransport::kick() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wakeFd_.get(), &one, sizeof one);
}

// Arms the worker and sleeps until it or the wake-up fd has an event, or `until` (mu_ held on
// entry and exit, released while asleep).
void UcxTransport::sleep(Deadline until) {
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // events pending: progress again
  ++sleepers_;
  // A doomed peer is reaped when its grace ends, whether or not an event comes (read under mu_).
  const long long cap = doomed_ > 0 ? 20 : 100;
  mu_.unlock();
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
  epoll_event events[2];
  ::epoll_wait(epollFd_.get(), events, 2, static_cast<int>(std::clamp<long long>(left, 0, cap)));
  std::uint64_t value = 0;
  [[maybe_unused]] const ssize_t n = ::read(wakeFd_.get(), &value, sizeof value);
  mu_.lock();
  --sleepers_;
}

bool UcxTransport::test(Request& req) {
  State s = req.state.load(std::memory_order_acquire);
  if (s == State::Done || s == State::Idle) return true;
  std::unique_lock<std::mutex> lk(mu_);
  if (req.state.load(std::memory_order_acquire) == State::Pending) {
    progress();
    lastDriven_ = Clock::now();  // a rank polling with test() drives the worker too
  }
  s = req.state.load(std::memory_order_acquire);
  if (s == State::Failed) throwFailure(req);
  return s == State::Done;
}

void UcxTransport::wait(Request& req, Deadline deadline) {
  const State s = req.state.load(std::memory_order_acquire);
  if (s == State::Done || s == State::Idle) return;
  std::unique_lock<std::mutex> lk(mu_);
  // While a thread waits here it drives the worker; the connector thread stands aside.
  ++waiting_;
  struct Leave {
    int& n;
    Clock::time_point& driven;
    ~Leave() {
      --n;
      driven = Clock::now();
    }
  } leave{waiting_, lastDriven_};
  engine::waitLoop(
      lk, req, deadline,
      engine::WaitPolicy{options_.spin, busyPoll_ ? options_.spin : std::chrono::microseconds(0)},
      [&] { progress(); },
      [&](Deadline until) {
        // A rendezvous moves only while the workers are polled (UCX 1.13's shared-memory and
        // CMA protocols raise no event for their steps: with a sleeping sender a 2 MiB message
        // took 18 ms instead of 0.3): while one of this rank's is in flight, keep polling,
        // yielding the CPU between polls, until it completes. A rank whose large send waits
        // for a receive not yet posted therefore polls (and yields) instead of sleeping.
        if (payloadsInFlight() > 0) {
          lk.unlock();
          std::this_thread::yield();
          lk.lock();
          progress();
          return;
        }
        sleep(until);
        progress();
      },
      [&](const Request& r) { throwFailure(r); },
      [&](const Request& r) {
        const PeerState& ps = peers_[static_cast<std::size_t>(r.peer)];
        failTransport(engine::timeoutError(rank_, r, ps.description, stallReason(r)));
        if (r.state.load(std::memory_order_acquire) == State::Failed) throwFailure(r);
        throw *engine_.failure();
      });
}

int UcxTransport::payloadsInFlight() const {
  int n = 0;
  for (const Op* op : live_)
    if (op->pending > 0 && (!op->isSend || op->bytes > kInlineBytes)) ++n;
  return n;
}

std::string UcxTransport::stallReason(const Request& req) const {
  const PeerState& ps = peers_[static_cast<std::size_t>(req.peer)];
  if (ps.link == PeerState::Link::Linking) return linkReason(req.peer);
  for (const Op* op : live_)
    if (op->req == &req)
      return req.isSend ? ps.description + " has not taken it yet"
                        : "its payload is still arriving from " + ps.description;
  if (req.isSend) return "";
  if (!ps.backlog.empty())
    return "ahead of it from " + ps.description + " waits " + tagText(ps.backlog.front().tag) +
           " (" + std::to_string(ps.backlog.front().bytes) +
           " bytes), which no posted receive of this rank matches";
  return "nothing for it has arrived from " + ps.description + ps.inbox.heldText(ps.description);
}

void UcxTransport::throwFailure(const Request& req) const {
  if (req.lane != 0 && engine::Engine::failedByTransport(req) && !engine_.failure()) {
    const PeerState& ps = peers_[static_cast<std::size_t>(req.peer)];
    const auto gone = ps.laneGone.find(req.lane);
    if (gone != ps.laneGone.end()) throw gone->second;                    // the peer left the lane
    if (const Error* aborted = lanes_.aborted(req.lane)) throw *aborted;  // aborted here
  }
  engine_.throwFailure(req, peerError(req.peer), describePeer(req.peer));
}

std::string UcxTransport::describePeer(int peer) const {
  if (peer < 0 || peer >= size_) return "rank " + std::to_string(peer);
  return peers_[static_cast<std::size_t>(peer)].description;
}

void UcxTransport::abort(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (worker_ == nullptr) return;
  failTransport(Error(ErrorCode::Aborted, why));
  kick();
}

}  // namespace ucx

bool ucxTlsMayUseTcp(std::string_view tls) {
  if (tls.empty()) return true;  // UCX's default: all
  bool exclude = false;
  if (tls.front() == '^') {
    exclude = true;
    tls.remove_prefix(1);
  }
  bool named = false;
  while (!tls.empty()) {
    const std::size_t comma = tls.find(',');
    std::string_view item = tls.substr(0, comma);
    tls.remove_prefix(comma == std::string_view::npos ? tls.size() : comma + 1);
    if (!item.empty() && item.front() == '\\') item.remove_prefix(1);  // (UCX: not an alias)
    if (item == "tcp" || (!exclude && item == "all")) named = true;
  }
  return exclude ? !named : named;
}

std::string tcpRxSegmentFor(const UcxOptions& options, const char* fromEnvironment,
                            const char* tlsFromEnvironment) {
  if (options.chunkBytes == 0 || fromEnvironment != nullptr) return "";
  std::optional<std::string_view> tls;
  if (tlsFromEnvironment != nullptr) tls = tlsFromEnvironment;
  for (const auto& entry : options.config) {
    const std::string_view key(entry.first);
    if (key.ends_with(kRxSegmentSetting)) return "";
    if (key == "TLS" || key == "UCX_TLS") tls = entry.second;
  }
  if (tls && !tls->empty() && !ucxTlsMayUseTcp(*tls)) return "";
  const std::size_t bytes =
      std::clamp(options.chunkBytes + kRxSegmentHeaders, kUcxDefaultRxSegment, kMaxRxSegment);
  return std::to_string(bytes);
}

bool ucxAvailable() noexcept {
  return true;
}

std::string ucxUnavailableReason() {
  return "";
}

std::string ucxVersion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::unique_ptr<Transport> createUcxTransport(Store& store, int rank, int size,
                                              const UcxOptions& options) {
  auto t = std::make_unique<ucx::UcxTransport>(rank, size, options);
  const std::string prefix = options.keyPrefix + "/addr/";
  store.set(prefix + std::to_string(rank), t->published());
  t->connect([&](int peer, std::chrono::milliseconds left) {
    return store.get(prefix + std::to_string(peer), left);
  });
  return t;
}

namespace {

class UcxOpened final : public UcxListening {
 public:
  explicit UcxOpened(std::unique_ptr<ucx::UcxTransport> t) : t_(std::move(t)) {}
  std::string entry() const override { return crypto::toHex(t_->published()); }
  std::unique_ptr<ucx::UcxTransport> take() { return std::move(t_); }

 private:
  std::unique_ptr<ucx::UcxTransport> t_;
};

}  // namespace

std::unique_ptr<UcxListening> openUcx(int rank, int size, const UcxOptions& options) {
  return std::make_unique<UcxOpened>(std::make_unique<ucx::UcxTransport>(rank, size, options));
}

std::unique_ptr<Transport> createUcxTransport(std::unique_ptr<UcxListening> opened,
                                              std::vector<std::string> entries, int rank, int size,
                                              const UcxOptions& options) {
  auto* mine = dynamic_cast<UcxOpened*>(opened.get());
  if (mine == nullptr || entries.size() != static_cast<std::size_t>(size))
    throw Error(ErrorCode::InvalidArgument, "createUcxTransport: rank " + std::to_string(rank) +
                                                ": " + std::to_string(entries.size()) +
                                                " address entries for " + std::to_string(size) +
                                                " ranks, or no opened worker");
  // The worker was opened with `options`; how to wait is known only now (the factory decides
  // it from the gathered hosts).
  std::unique_ptr<ucx::UcxTransport> t = mine->take();
  t->setBusyPoll(options.busyPoll);
  t->connect([&](int peer, std::chrono::milliseconds) {
    const std::string& hex = entries[static_cast<std::size_t>(peer)];
    std::vector<std::uint8_t> bytes;
    if (!crypto::fromHex(hex, bytes))
      throw Error(ErrorCode::InvalidArgument,
                  "createUcxTransport: rank " + std::to_string(rank) + ": rank " +
                      std::to_string(peer) + " published no UCX worker address (\"" +
                      hex.substr(0, 32) + "\"): does every rank use BRAID_TRANSPORT=ucx?");
    return bytes;
  });
  return t;
}

}  // namespace braid::transport
