// TcpStoreServer: one thread, one epoll set, non-blocking sockets.
//
// The thread owns everything (the key-value map, the connections, the parked requests), so
// nothing here is locked. A GET or WAIT whose keys are missing is parked: the connection stops
// reading (one request at a time per connection) and waits in the waiter list of its first
// missing key and in the deadline set. A SET or ADD of that key moves it on to its next missing
// key or answers it; the deadline set answers TIMEOUT when the client's timeout elapses. A
// WAITANY none of whose keys is present waits in the waiter list of every one of its keys. The
// destructor wakes the thread through an eventfd, joins it, and every fd closes with its owner.
//
// Admission (docs/security.md). A connection from an address outside the whitelist is closed at
// accept. Every other one starts in the handshake (common/handshake_io.hpp), driven by the same
// loop as requests, so a silent or slow client holds up nobody; it has handshakeTimeout to
// finish, else it is dropped. With an auth key only a client that proved it holds the key gets
// past the handshake; without one, a client that skips the handshake and sends requests
// straight away is served too (tools and tests that speak the raw protocol).
//
// Memory bound (docs/security.md). Everything the server holds for its clients is counted, in
// two budgets of SecurityOptions::storeMaxBytes each: (1) the keys and values stored (with a
// fixed per-entry overhead) and the request frame each connection is reading, (2) the replies
// not yet sent (a GET's reply is a copy of the value; its own budget, so that a full store still
// serves reads). A connection reads at most to the end of its current frame, and a frame is
// admitted (its whole size reserved) once its header is in; a frame, a SET or ADD, or a GET's
// reply that would take its budget past the bound is refused with an ERROR reply naming the
// bound, and logged. The refused frame's bytes are read
// and thrown away, so the connection stays in step and usable. Without a key every client is
// unauthenticated, and what the clients of one host hold together is bounded too
// (storeMaxPeerBytes), so one stranger cannot take the whole bound.

#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <braid/error.hpp>
#include <braid/store.hpp>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/fd.hpp"
#include "common/handshake_io.hpp"
#include "common/peer_policy.hpp"
#include "common/socket_address.hpp"
#include "store/store_protocol.hpp"

namespace braid {

namespace proto = store_protocol;

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kListenId = 0;
constexpr std::uint64_t kWakeId = 1;
constexpr std::uint64_t kFirstConnectionId = 2;
constexpr std::size_t kReadChunkBytes = 64 * 1024;
constexpr std::size_t kReadBudgetBytes = 4 * 1024 * 1024;
constexpr int kMaxEvents = 64;
// Deadlines further out than this are clamped, so a "forever" timeout cannot overflow.
constexpr std::chrono::hours kMaxParkTime{24 * 365};
// ONCLOSE registrations one connection may hold: a process's liveness connection registers two
// for every communicator rank it holds over this server (core/liveness.hpp); their bytes count
// against the memory bound too.
constexpr std::size_t kMaxOnClosePerConnection = 8192;

struct Parked {
  proto::RequestType type = proto::RequestType::Get;
  std::vector<std::string> keys;
  Clock::time_point deadline;
  // The keys whose waiter lists hold this request: the first missing one (GET, WAIT), every
  // key (WAITANY).
  std::vector<std::string> waitingOn;
};

struct Connection {
  std::uint64_t id = 0;
  Fd fd;
  std::string peer;  // "host:port" of the client, for the log
  std::string host;  // its numeric host: what the per-peer bound counts by
  // Set until the client passed the handshake; no request is read before that.
  std::unique_ptr<security::ResponderSession> handshake;
  std::vector<std::uint8_t> in;   // received bytes not yet decoded
  std::vector<std::uint8_t> out;  // encoded replies not yet sent, from outSent on
  std::size_t outSent = 0;
  std::optional<Parked> parked;
  std::uint32_t events = 0;  // the interest currently registered with epoll
  // Memory accounting: the whole size of the frame being read once admitted (0 before its
  // header is in), what is counted for this connection now, and the bytes of a refused frame
  // still to be read and thrown away.
  std::size_t frameBytes = 0;
  std::size_t consumed = 0;      // bytes at the front of `in` serve() has decoded (erased after)
  std::size_t counted = 0;       // charged to the stored-and-requests budget
  std::size_t countedReply = 0;  // charged to the replies budget
  std::size_t discard = 0;
  // ONCLOSE registrations: set when the connection closes (charged to `host` meanwhile).
  std::vector<std::pair<std::string, std::vector<std::uint8_t>>> onClose;
  std::size_t onCloseBytes = 0;
};

// Bytes held, in total and per client host.
struct Budget {
  std::size_t total = 0;
  std::unordered_map<std::string, std::size_t> byHost;
  void charge(const std::string& host, std::size_t add, std::size_t remove) {
    total = total + add - remove;
    auto& mine = byHost[host];
    mine = mine + add - remove;
    if (mine == 0) byHost.erase(host);
  }
  std::size_t of(const std::string& host) const {
    auto it = byHost.find(host);
    return it == byHost.end() ? 0 : it->second;
  }
};

// A stored key and what it costs: the bytes of key and value plus a fixed overhead, charged to
// the host that set it.
struct Entry {
  std::vector<std::uint8_t> value;
  std::string owner;
};
constexpr std::size_t kEntryOverheadBytes = 64;
std::size_t entryBytes(const std::string& key, std::size_t valueBytes) {
  return key.size() + valueBytes + kEntryOverheadBytes;
}

std::uint32_t frameLength(const std::vector<std::uint8_t>& in) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(in[static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}

}  // namespace

struct TcpStoreServer::Impl {
  Impl(const std::string& host, std::uint16_t port, const SecurityOptions& security);
  ~Impl();

  void run() noexcept;
  void loop();
  void accept();
  template <typename Fn>
  void guarded(std::uint64_t id, Fn&& fn);
  void onEvent(std::uint64_t id, std::uint32_t events);
  void continueHandshake(Connection& c);
  void drop(Connection& c, const std::string& why);
  void expireHandshakes();
  void readFrom(Connection& c);
  void serve(Connection& c);
  void handle(Connection& c, proto::Request& req);
  bool tryAnswerParked(Connection& c);
  bool tryAnswerWaitAny(Connection& c);
  void onKeyChanged(const std::string& key);
  void expireDeadlines();
  void unpark(Connection& c);
  void reply(Connection& c, const proto::Response& resp);
  void flush(Connection& c);
  void updateInterest(Connection& c);
  void close(std::uint64_t id);
  int epollTimeoutMs() const;
  bool present(const std::string& key) const { return data_.find(key) != data_.end(); }
  // Memory bound: why `extra` more bytes for `host` (`extraForHost` of them charged to it) would
  // break a bound, or empty when they fit.
  std::string overBound(const std::string& host, std::size_t extra, std::size_t extraForHost,
                        bool reply = false);
  void charge(const std::string& host, std::size_t add, std::size_t remove);
  // Deletes one key, returning its bytes to its owner's quota; the entry after it.
  auto eraseKey(std::unordered_map<std::string, Entry>::iterator it) {
    charge(it->second.owner, 0, entryBytes(it->first, it->second.value.size()));
    return data_.erase(it);
  }
  // Answers a delete with how many keys it removed.
  void replyRemoved(Connection& c, proto::Response& resp, std::int64_t removed) {
    resp.type = proto::ResponseType::Integer;
    resp.integer = removed;
    keys_.store(data_.size(), std::memory_order_relaxed);
    reply(c, resp);
  }
  void account(Connection& c);
  void refuse(Connection& c, const std::string& what, const std::string& why);
  std::string bytesText(std::size_t b) const { return std::to_string(b) + " bytes"; }

  std::string address_;  // "host:port" as bound, for error messages
  std::uint16_t port_ = 0;
  security::PeerPolicy policy_;
  Fd listen_;
  Fd epoll_;
  Fd wake_;
  std::atomic<bool> stop_{false};
  // Written by the server thread, read by requestCount()/keyCount() from any thread.
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::size_t> keys_{0};
  std::atomic<std::size_t> connectionsNow_{0};

  // Owned by the server thread once it starts.
  std::unordered_map<std::string, Entry> data_;
  const std::size_t maxBytes_;
  const std::size_t maxPeerBytes_;
  Budget held_;     // stored entries and request frames
  Budget replies_;  // replies not yet sent
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections_;
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiters_;
  std::set<std::pair<Clock::time_point, std::uint64_t>> deadlines_;
  std::set<std::pair<Clock::time_point, std::uint64_t>> handshakeDeadlines_;
  std::vector<std::uint64_t> resumable_;  // unparked connections that may hold buffered requests
  std::uint64_t nextId_ = kFirstConnectionId;

  std::thread thread_;  // last: started once everything above exists, joined first
};

TcpStoreServer::Impl::Impl(const std::string& host, std::uint16_t port,
                           const SecurityOptions& security)
    : policy_(security),
      maxBytes_(security.storeMaxBytes),
      maxPeerBytes_(security.storeMaxPeerBytes) {
  address_ = formatHostPort(host.empty() ? "*" : host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0)
    throw Error(ErrorCode::InvalidArgument,
                "store server: cannot resolve " + address_ + ": " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);

  int lastErr = 0;
  const char* lastCall = "socket";
  for (const addrinfo* ai = list.get(); ai != nullptr && !listen_; ai = ai->ai_next) {
    Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s) {
      lastErr = errno;
      lastCall = "socket";
      continue;
    }
    int one = 1;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) {
      int zero = 0;  // "::" also serves IPv4 clients
      ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (::bind(s.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      lastErr = errno;
      lastCall = "bind";
      continue;
    }
    if (::listen(s.get(), SOMAXCONN) != 0) {
      lastErr = errno;
      lastCall = "listen";
      continue;
    }
    listen_ = std::move(s);
  }
  if (!listen_)
    throw Error(ErrorCode::Internal, std::string("store server: ") + lastCall + " on " + address_ +
                                         " failed: " + errnoText(lastErr));
  setNoDelay(listen_.get());  // inherited by accepted sockets on Linux

  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0)
    throw Error(ErrorCode::Internal,
                "store server: getsockname on " + address_ + " failed: " + errnoText(errno));
  port_ = portOf(reinterpret_cast<sockaddr*>(&bound));
  address_ = formatHostPort(host.empty() ? "*" : host, port_);

  epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_)
    throw Error(ErrorCode::Internal,
                "store server " + address_ + ": epoll_create1 failed: " + errnoText(errno));
  wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_)
    throw Error(ErrorCode::Internal,
                "store server " + address_ + ": eventfd failed: " + errnoText(errno));
  for (auto [fd, id] : {std::pair{listen_.get(), kListenId}, std::pair{wake_.get(), kWakeId}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      throw Error(ErrorCode::Internal,
                  "store server " + address_ + ": epoll_ctl failed: " + errnoText(errno));
  }
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::Impl::~Impl() {
  stop_.store(true);
  const std::uint64_t one = 1;
  // Cannot fail in a way that matters: the counter only needs to become non-zero.
  [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void TcpStoreServer::Impl::run() noexcept {
  try {
    loop();
  } catch (...) {
    // Only an epoll_wait failure gets here. Dropping every connection makes each client
    // fail with PeerLost instead of waiting out its timeout.
  }
  connections_.clear();
}

// Runs fn for one connection; a failure there (a client asking for more memory than this host
// has) closes that connection and leaves the others alone.
template <typename Fn>
void TcpStoreServer::Impl::guarded(std::uint64_t id, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception&) {
    close(id);
  }
}

void TcpStoreServer::Impl::loop() {
  epoll_event events[kMaxEvents];
  while (!stop_.load()) {
    const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, epollTimeoutMs());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::Internal,
                  "store server " + address_ + ": epoll_wait failed: " + errnoText(errno));
    }
    for (int i = 0; i < n; ++i) {
      const std::uint64_t id = events[i].data.u64;
      if (id == kWakeId) return;
      if (id == kListenId) {
        try {
          accept();
        } catch (const std::exception&) {
          // Out of memory for one more connection: its fd has closed; the listener stays.
        }
        continue;
      }
      guarded(id, [&] { onEvent(id, events[i].events); });
    }
    expireDeadlines();
    expireHandshakes();
    // Requests that arrived while their connection was parked, now that it is not.
    while (!resumable_.empty()) {
      const std::uint64_t id = resumable_.back();
      resumable_.pop_back();
      guarded(id, [&] {
        auto it = connections_.find(id);
        if (it != connections_.end()) serve(*it->second);
      });
    }
  }
}

void TcpStoreServer::Impl::accept() {
  for (;;) {
    sockaddr_storage from{};
    socklen_t fromLen = sizeof from;
    Fd fd(::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&from), &fromLen,
                    SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) return;  // EAGAIN, or a failure (EMFILE, ECONNABORTED) the next round retries
    const auto* fromAddr = reinterpret_cast<const sockaddr*>(&from);
    std::string peer = formatHostPort(numericHost(fromAddr, fromLen), portOf(fromAddr));
    if (!policy_.filter().allows(fromAddr, fromLen)) {
      policy_.reportDropped("store server " + address_, peer, "address not in BRAID_WHITELIST");
      continue;  // fd closes here
    }
    setNoDelay(fd.get());
    auto c = std::make_unique<Connection>();
    c->id = nextId_++;
    c->peer = std::move(peer);
    c->host = numericHost(fromAddr, fromLen);
    const auto deadline = Clock::now() + policy_.handshakeTimeout();
    c->handshake = std::make_unique<security::ResponderSession>(
        fd.get(), security::Responder(policy_.key(), security::Service::Store, {}), deadline);
    c->fd = std::move(fd);
    c->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->events;
    ev.data.u64 = c->id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->fd.get(), &ev) != 0) continue;
    handshakeDeadlines_.emplace(deadline, c->id);
    connections_.emplace(c->id, std::move(c));
    connectionsNow_.store(connections_.size(), std::memory_order_relaxed);
  }
}

void TcpStoreServer::Impl::drop(Connection& c, const std::string& why) {
  policy_.reportDropped("store server " + address_, c.peer, why);
  // Unread bytes at close turn the FIN into a reset, which could overtake a Reject the client
  // should read (say, a request it pipelined behind its Hello): read them first.
  std::uint8_t sink[4096];
  for (int i = 0; i < 16 && ::recv(c.fd.get(), sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
  close(c.id);
}

// Feeds the handshake what arrived; once the client is admitted its connection serves requests.
void TcpStoreServer::Impl::continueHandshake(Connection& c) {
  using Progress = security::ResponderSession::Progress;
  security::ResponderSession& hs = *c.handshake;
  switch (hs.onReadable()) {
    case Progress::Waiting:
      return;
    case Progress::Failed:
      // A client that connects and leaves without a byte (a reachability probe) is not news.
      if (hs.failure() == security::Failure::Closed && !hs.sawBytes()) return close(c.id);
      return drop(c, "handshake failed: " + hs.error());
    case Progress::NotHandshake:
      if (policy_.authenticated())
        return drop(c, "not a braid handshake (this store requires authentication)");
      c.in = hs.takeBuffered();  // a raw-protocol client of an unauthenticated store
      break;
    case Progress::Verified:
      if (!hs.accept()) return drop(c, "the client does not take the handshake reply");
      break;
  }
  handshakeDeadlines_.erase({hs.deadline(), c.id});
  c.handshake.reset();
  serve(c);
}

void TcpStoreServer::Impl::expireHandshakes() {
  const auto now = Clock::now();
  while (!handshakeDeadlines_.empty() && handshakeDeadlines_.begin()->first <= now) {
    const std::uint64_t id = handshakeDeadlines_.begin()->second;
    handshakeDeadlines_.erase(handshakeDeadlines_.begin());
    auto it = connections_.find(id);
    if (it == connections_.end() || !it->second->handshake) continue;
    drop(*it->second,
         "no handshake within " + std::to_string(policy_.handshakeTimeout().count()) + " ms");
  }
}

void TcpStoreServer::Impl::onEvent(std::uint64_t id, std::uint32_t events) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;  // closed earlier in this round
  Connection& c = *it->second;
  if (c.handshake) {
    if (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR)) continueHandshake(c);
    return;
  }
  if (events & EPOLLERR) return close(id);
  if (events & EPOLLOUT) {
    flush(c);
    if (!connections_.count(id)) return;
  }
  const bool hangUp = events & (EPOLLHUP | EPOLLRDHUP);
  if (c.events & EPOLLIN) {
    if (hangUp || (events & EPOLLIN)) readFrom(c);  // reads up to the EOF, then closes
  } else if (hangUp) {
    close(id);  // not reading (parked, or replies backed up), and nobody is left to answer
  }
}

// Reads what has arrived, serving each complete request as it comes. Stops after
// kReadBudgetBytes, so one client streaming a large value does not hold up the others (epoll is
// level-triggered and brings us back). Reads at most to the end of the current frame, which is
// admitted against the memory bound once its header is in.
void TcpStoreServer::Impl::readFrom(Connection& c) {
  const std::uint64_t id = c.id;
  for (std::size_t budget = kReadBudgetBytes; budget > 0;) {
    std::size_t want = 0;
    std::uint8_t sink[kReadChunkBytes];
    std::uint8_t* into = sink;
    if (c.discard > 0) {
      want = std::min(c.discard, kReadChunkBytes);
    } else if (c.in.size() < proto::kFrameHeaderBytes) {
      want = proto::kFrameHeaderBytes - c.in.size();
    } else {
      // (serve() has closed a connection whose header claims more than kMaxFrameBytes.)
      const std::size_t frame = proto::kFrameHeaderBytes + frameLength(c.in);
      if (c.in.size() >= frame) {  // a whole frame is in already (cannot happen; be safe)
        serve(c);
        return;
      }
      if (c.frameBytes == 0) {
        const std::size_t extra = frame - c.in.size();
        if (const std::string why = overBound(c.host, extra, extra); !why.empty()) {
          c.discard = extra;
          c.in.clear();
          refuse(c, "a request of " + bytesText(frame), why);
          if (!connections_.count(id)) return;
          continue;
        }
        c.frameBytes = frame;
        account(c);
      }
      want = std::min(frame - c.in.size(), kReadChunkBytes);
    }
    const std::size_t old = c.in.size();
    if (c.discard == 0) {
      c.in.resize(old + want);
      into = c.in.data() + old;
    }
    const ssize_t n = ::recv(c.fd.get(), into, want, 0);
    const int err = errno;
    if (c.discard == 0) c.in.resize(old + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n == 0) return close(id);  // the client went away; its pending request dies with it
    if (n < 0) {
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      return close(id);
    }
    budget -= std::min(budget, static_cast<std::size_t>(n));
    if (c.discard > 0) {
      c.discard -= static_cast<std::size_t>(n);
      continue;
    }
    serve(c);
    if (!connections_.count(id)) return;
    if (!(c.events & EPOLLIN)) return;  // parked, or replies backed up
  }
}

// Refuses a request over the memory bound: a log line and an ERROR reply (which may close c).
// A frame refused before it was read is thrown away as it comes (Connection::discard), so the
// client reads the refusal as the answer to its request and the connection stays in step.
void TcpStoreServer::Impl::refuse(Connection& c, const std::string& what, const std::string& why) {
  policy_.reportRefused("store server " + address_, c.peer, what + ": " + why);
  proto::Response resp;
  resp.type = proto::ResponseType::Error;
  resp.message = "refused " + what + ": " + why;
  if (resp.message.size() > proto::kMaxKeyBytes) resp.message.resize(proto::kMaxKeyBytes);
  reply(c, resp);
}

std::string TcpStoreServer::Impl::overBound(const std::string& host, std::size_t extra,
                                            std::size_t extraForHost, bool reply) {
  const Budget& b = reply ? replies_ : held_;
  const std::string what = reply ? "unsent replies hold " : "the store holds ";
  if (extra > maxBytes_ || b.total > maxBytes_ - extra)
    return what + bytesText(b.total) + " of the bound of " + bytesText(maxBytes_) +
           " (SecurityOptions::storeMaxBytes, BRAID_STORE_MAX_BYTES)";
  if (!policy_.authenticated()) {
    const std::size_t mine = b.of(host);
    if (extraForHost > maxPeerBytes_ || mine > maxPeerBytes_ - extraForHost)
      return std::string(reply ? "unsent replies to " : "the clients from ") + host + " hold " +
             bytesText(mine) + " of the " + bytesText(maxPeerBytes_) +
             " one unauthenticated host may (SecurityOptions::storeMaxPeerBytes, "
             "BRAID_STORE_MAX_PEER_BYTES; set BRAID_AUTH_KEY to authenticate clients)";
  }
  return {};
}

void TcpStoreServer::Impl::charge(const std::string& host, std::size_t add, std::size_t remove) {
  held_.charge(host, add, remove);
}

// Brings what is counted for c up to date: its frame (the admitted size while it is read) and
// its unsent replies.
void TcpStoreServer::Impl::account(Connection& c) {
  const std::size_t now = std::max(c.in.size() - c.consumed, c.frameBytes);
  if (now != c.counted) {
    held_.charge(c.host, now, c.counted);
    c.counted = now;
  }
  const std::size_t reply = c.out.size() - c.outSent;
  if (reply != c.countedReply) {
    replies_.charge(c.host, reply, c.countedReply);
    c.countedReply = reply;
  }
}

// Decodes and handles the buffered requests, until one parks or the reply backlog is full.
void TcpStoreServer::Impl::serve(Connection& c) {
  const std::uint64_t id = c.id;
  std::size_t used = 0;
  while (!c.parked && c.out.size() - c.outSent <= proto::kMaxFrameBytes) {
    proto::Request req;
    const auto r = proto::decodeRequest(std::span(c.in).subspan(used), req);
    if (r.status == proto::DecodeStatus::Incomplete) break;
    if (r.status == proto::DecodeStatus::Malformed) return close(id);
    used += r.frameBytes;
    // Decoded: what the frame held moves to the store or to the reply.
    c.frameBytes = 0;
    c.consumed = used;
    account(c);
    requests_.fetch_add(1, std::memory_order_relaxed);
    handle(c, req);
    if (!connections_.count(id)) return;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(used));
  c.consumed = 0;
  account(c);
  updateInterest(c);
}

void TcpStoreServer::Impl::handle(Connection& c, proto::Request& req) {
  proto::Response resp;
  switch (req.type) {
    case proto::RequestType::Set: {
      const std::string& key = req.keys[0];
      auto it = data_.find(key);
      const std::size_t now = entryBytes(key, req.value.size());
      const std::size_t before = it == data_.end() ? 0 : entryBytes(key, it->second.value.size());
      const bool mine = it != data_.end() && it->second.owner == c.host;
      // The frame's bytes were released when it was decoded; the value is charged instead.
      if (const std::string why = overBound(c.host, now - std::min(now, before),
                                            mine ? now - std::min(now, before) : now);
          !why.empty())
        return refuse(c, "SET of " + bytesText(now) + " under '" + key.substr(0, 64) + "'", why);
      if (it == data_.end()) it = data_.emplace(key, Entry{}).first;
      charge(it->second.owner, 0, before);
      charge(c.host, now, 0);
      it->second.value = std::move(req.value);
      it->second.owner = c.host;
      keys_.store(data_.size(), std::memory_order_relaxed);  // before the reply is seen
      reply(c, resp);
      onKeyChanged(key);
      return;
    }
    case proto::RequestType::Add: {
      const std::string& key = req.keys[0];
      if (!present(key)) {
        const std::size_t bytes = entryBytes(key, proto::kCounterBytes);
        if (const std::string why = overBound(c.host, bytes, bytes); !why.empty())
          return refuse(c, "ADD creating '" + key.substr(0, 64) + "'", why);
        data_.emplace(key, Entry{{}, c.host});
        charge(c.host, bytes - proto::kCounterBytes, 0);  // the counter's 8 bytes come below
      }
      Entry& entry = data_.at(key);
      auto& cell = entry.value;
      if (cell.empty()) charge(entry.owner, proto::kCounterBytes, 0);
      if (!cell.empty() && cell.size() != proto::kCounterBytes) {
        resp.type = proto::ResponseType::Error;
        resp.message = "the value under the key is " + std::to_string(cell.size()) +
                       " bytes, not an 8-byte counter";
        reply(c, resp);
        return;
      }
      // Two's-complement wrap-around instead of signed overflow.
      const auto sum = static_cast<std::uint64_t>(proto::decodeCounter(cell)) +
                       static_cast<std::uint64_t>(req.delta);
      cell = proto::encodeCounter(static_cast<std::int64_t>(sum));
      resp.type = proto::ResponseType::Integer;
      resp.integer = static_cast<std::int64_t>(sum);
      keys_.store(data_.size(), std::memory_order_relaxed);
      reply(c, resp);
      onKeyChanged(key);
      return;
    }
    case proto::RequestType::OnClose: {
      // Kept with the connection (and charged to its host) until it closes; close() sets it.
      const std::size_t bytes = entryBytes(req.keys[0], req.value.size());
      if (c.onClose.size() >= kMaxOnClosePerConnection)
        return refuse(
            c, "ONCLOSE under '" + req.keys[0].substr(0, 64) + "'",
            "a connection may register at most " + std::to_string(kMaxOnClosePerConnection));
      if (const std::string why = overBound(c.host, bytes, bytes); !why.empty())
        return refuse(
            c, "ONCLOSE of " + bytesText(bytes) + " under '" + req.keys[0].substr(0, 64) + "'",
            why);
      charge(c.host, bytes, 0);
      c.onCloseBytes += bytes;
      c.onClose.emplace_back(std::move(req.keys[0]), std::move(req.value));
      reply(c, resp);
      return;
    }
    case proto::RequestType::UnClose: {
      for (auto it = c.onClose.begin(); it != c.onClose.end(); ++it) {
        if (it->first != req.keys[0]) continue;
        const std::size_t bytes = entryBytes(it->first, it->second.size());
        charge(c.host, 0, bytes);
        c.onCloseBytes -= bytes;
        c.onClose.erase(it);
        break;
      }
      reply(c, resp);
      return;
    }
    case proto::RequestType::Delete: {
      std::int64_t removed = 0;
      for (const std::string& key : req.keys) {
        auto it = data_.find(key);
        if (it == data_.end()) continue;
        eraseKey(it);
        ++removed;
      }
      // Waiters are filed under keys still missing, so none waits on a deleted key's presence.
      replyRemoved(c, resp, removed);
      return;
    }
    case proto::RequestType::DeletePrefix: {
      // A scan of every key: rare (once per communicator's end), and the store is small.
      const std::string& prefix = req.keys[0];
      std::int64_t removed = 0;
      for (auto it = data_.begin(); it != data_.end();) {
        if (it->first.compare(0, prefix.size(), prefix) != 0) {
          ++it;
          continue;
        }
        it = eraseKey(it);
        ++removed;
      }
      replyRemoved(c, resp, removed);
      return;
    }
    case proto::RequestType::NumKeys:
      resp.type = proto::ResponseType::Integer;
      resp.integer = static_cast<std::int64_t>(data_.size());
      reply(c, resp);
      return;
    case proto::RequestType::Check:
      resp.type = proto::ResponseType::Bool;
      resp.flag = std::all_of(req.keys.begin(), req.keys.end(),
                              [&](const std::string& k) { return present(k); });
      reply(c, resp);
      return;
    case proto::RequestType::Get:
    case proto::RequestType::Wait:
    case proto::RequestType::WaitAny: {
      Parked p;
      p.type = req.type;
      p.keys = std::move(req.keys);
      const auto wait = std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(std::min<std::uint64_t>(req.timeoutMs, INT64_MAX)),
          kMaxParkTime);
      p.deadline = Clock::now() + wait;
      c.parked = std::move(p);
      if (tryAnswerParked(c)) return;
      deadlines_.emplace(c.parked->deadline, c.id);
      return;
    }
  }
}

// Answers c's parked request when its keys are all present (or its deadline has passed);
// otherwise files it under its first missing key. True when answered.
bool TcpStoreServer::Impl::tryAnswerParked(Connection& c) {
  Parked& p = *c.parked;
  if (p.type == proto::RequestType::WaitAny) return tryAnswerWaitAny(c);
  auto missing =
      std::find_if(p.keys.begin(), p.keys.end(), [&](const std::string& k) { return !present(k); });
  proto::Response resp;
  if (missing == p.keys.end()) {
    if (p.type == proto::RequestType::Get) {
      const auto& value = data_.at(p.keys[0]).value;
      // The reply is a copy held until sent: it counts against the bound like anything else.
      if (const std::string why = overBound(c.host, value.size(), value.size(), true);
          !why.empty()) {
        resp.type = proto::ResponseType::Error;
        resp.message = "refused the reply to GET '" + p.keys[0].substr(0, 64) + "' (" +
                       bytesText(value.size()) + "): " + why;
        policy_.reportRefused("store server " + address_, c.peer, resp.message);
      } else {
        resp.type = proto::ResponseType::Value;
        resp.value = value;
      }
    }
  } else if (Clock::now() >= p.deadline) {
    resp.type = proto::ResponseType::Timeout;
    std::copy_if(missing, p.keys.end(), std::back_inserter(resp.keys),
                 [&](const std::string& k) { return !present(k); });
  } else {
    p.waitingOn = {*missing};
    waiters_[*missing].push_back(c.id);
    return false;
  }
  c.parked.reset();
  reply(c, resp);
  return true;
}

// WAITANY: answers the index of the first of its keys present, or TIMEOUT; otherwise files it
// under every key. True when answered.
bool TcpStoreServer::Impl::tryAnswerWaitAny(Connection& c) {
  Parked& p = *c.parked;
  unpark(c);
  const auto first =
      std::find_if(p.keys.begin(), p.keys.end(), [&](const std::string& k) { return present(k); });
  proto::Response resp;
  if (first != p.keys.end()) {
    resp.type = proto::ResponseType::Integer;
    resp.integer = first - p.keys.begin();
  } else if (Clock::now() >= p.deadline) {
    resp.type = proto::ResponseType::Timeout;
    resp.keys = p.keys;
  } else {
    p.waitingOn = p.keys;
    for (const std::string& k : p.waitingOn) waiters_[k].push_back(c.id);
    return false;
  }
  c.parked.reset();
  reply(c, resp);
  return true;
}

void TcpStoreServer::Impl::onKeyChanged(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const std::vector<std::uint64_t> ids = std::move(it->second);
  waiters_.erase(it);
  for (std::uint64_t id : ids) {
    auto cit = connections_.find(id);
    if (cit == connections_.end() || !cit->second->parked) continue;
    Connection& c = *cit->second;
    const auto deadline = c.parked->deadline;
    if (tryAnswerParked(c)) {
      deadlines_.erase({deadline, id});
      resumable_.push_back(id);
    }
  }
}

void TcpStoreServer::Impl::expireDeadlines() {
  const auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const std::uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = connections_.find(id);
    if (it == connections_.end() || !it->second->parked) continue;
    Connection& c = *it->second;
    unpark(c);
    c.parked->deadline = now;  // tryAnswerParked now answers TIMEOUT for whatever is missing
    tryAnswerParked(c);
    resumable_.push_back(id);
  }
}

// Takes c's parked request out of its waiter lists (it stays in c.parked).
void TcpStoreServer::Impl::unpark(Connection& c) {
  for (const std::string& key : c.parked->waitingOn) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) continue;
    std::erase(it->second, c.id);
    if (it->second.empty()) waiters_.erase(it);
  }
  c.parked->waitingOn.clear();
}

void TcpStoreServer::Impl::reply(Connection& c, const proto::Response& resp) {
  if (!proto::appendResponse(resp, c.out)) return close(c.id);  // cannot happen for valid input
  flush(c);
}

void TcpStoreServer::Impl::flush(Connection& c) {
  while (c.outSent < c.out.size()) {
    const ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.outSent, c.out.size() - c.outSent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return close(c.id);
    }
    c.outSent += static_cast<std::size_t>(n);
  }
  if (c.outSent == c.out.size()) {
    c.out.clear();
    c.outSent = 0;
  }
  account(c);
  updateInterest(c);
}

// Reads while the connection may take a request (not parked, reply backlog within one frame);
// watches for writability while replies are pending. RDHUP always, to notice a client leaving.
void TcpStoreServer::Impl::updateInterest(Connection& c) {
  const std::size_t backlog = c.out.size() - c.outSent;
  std::uint32_t want = EPOLLRDHUP;
  if (!c.parked && backlog <= proto::kMaxFrameBytes) want |= EPOLLIN;
  if (backlog > 0) want |= EPOLLOUT;
  if (want == c.events) return;
  const bool resumed = (want & EPOLLIN) && !(c.events & EPOLLIN);
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) return close(c.id);
  c.events = want;
  if (resumed && !c.in.empty()) resumable_.push_back(c.id);
}

void TcpStoreServer::Impl::close(std::uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  if (c.parked) {
    unpark(c);
    deadlines_.erase({c.parked->deadline, id});
  }
  if (c.handshake) handshakeDeadlines_.erase({c.handshake->deadline(), id});
  held_.charge(c.host, 0, c.counted);
  replies_.charge(c.host, 0, c.countedReply);
  // ONCLOSE: the registered keys are set once the connection is gone (after every request it
  // sent was served, so nothing the client wrote can follow them).
  auto onClose = std::move(c.onClose);
  const std::string host = c.host;
  charge(host, 0, c.onCloseBytes);
  // Closing the fd removes it from the epoll set.
  connections_.erase(it);
  connectionsNow_.store(connections_.size(), std::memory_order_relaxed);
  if (stop_.load()) return;
  for (auto& [key, value] : onClose) {
    auto entry = data_.find(key);
    const std::size_t before =
        entry == data_.end() ? 0 : entryBytes(key, entry->second.value.size());
    if (entry == data_.end()) entry = data_.emplace(key, Entry{}).first;
    charge(entry->second.owner, 0, before);
    charge(host, entryBytes(key, value.size()), 0);
    entry->second.value = std::move(value);
    entry->second.owner = host;
    onKeyChanged(key);
  }
  keys_.store(data_.size(), std::memory_order_relaxed);
}

int TcpStoreServer::Impl::epollTimeoutMs() const {
  if (!resumable_.empty()) return 0;
  if (deadlines_.empty() && handshakeDeadlines_.empty()) return -1;
  auto next = Clock::time_point::max();
  if (!deadlines_.empty()) next = deadlines_.begin()->first;
  if (!handshakeDeadlines_.empty()) next = std::min(next, handshakeDeadlines_.begin()->first);
  const auto left = next - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up, so a wake-up never comes before the deadline it is for.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<std::int64_t>(ms, 60 * 1000));
}

TcpStoreServer::TcpStoreServer(const std::string& host, std::uint16_t port,
                               const SecurityOptions& security)
    : impl_(std::make_unique<Impl>(host, port, security)) {}

TcpStoreServer::~TcpStoreServer() = default;

std::uint16_t TcpStoreServer::port() const noexcept {
  return impl_->port_;
}

std::uint64_t TcpStoreServer::requestCount() const noexcept {
  return impl_->requests_.load(std::memory_order_relaxed);
}

std::size_t TcpStoreServer::keyCount() const noexcept {
  return impl_->keys_.load(std::memory_order_relaxed);
}

std::size_t TcpStoreServer::connectionCount() const noexcept {
  return impl_->connectionsNow_.load(std::memory_order_relaxed);
}

}  // namespace braid
