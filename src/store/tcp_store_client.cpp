// TcpStore: one connection to a TcpStoreServer, one request at a time.
//
// A mutex serialises requests. Each request runs against a deadline: opTimeout for SET/ADD/CHECK,
// and for GET/WAIT the caller's timeout plus kReplySlack, since the server itself answers TIMEOUT
// when the caller's timeout elapses and the slack only covers its reply's way back. Should the
// client's own deadline pass, or the connection fail mid-request, the connection's state is
// unknown (a late reply could be taken for the next request's), so it is closed and the next
// request reconnects.
//
// Every connection opens with the handshake (common/handshake.hpp). With an auth key it runs to
// the end while connecting: both sides prove they hold the key, and a server that disagrees
// fails the connect with Error(Auth) at once (retrying cannot help), while a server that drops
// the connection during the handshake (a whitelist that does not list this host) is retried
// like a refused connect until connectTimeout. Without a key the Hello goes out at connect and
// the server's answer is read before the first reply, under that request's deadline: no extra
// round trip, and a server that wants a key still fails the request with Error(Auth).

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <braid/error.hpp>
#include <braid/store.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.hpp"
#include "common/handshake_io.hpp"
#include "common/socket_address.hpp"
#include "store/store_protocol.hpp"

namespace braid {

namespace proto = store_protocol;

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A refused connect costs microseconds, and ranks launched together usually find rank 0's
// server not listening yet for a few ms: a first pause of 10 ms made a 2-rank creation take
// 18-19 ms instead of 8 (docs/benchmarks.md, "Store connect retries").
constexpr milliseconds kFirstRetryDelay{1};
constexpr milliseconds kMaxRetryDelay{100};
constexpr milliseconds kReplySlack{2000};
// Timeouts further out than this are clamped, so "forever" cannot overflow a time_point.
constexpr milliseconds kMaxTimeout{std::chrono::hours(24 * 365)};
// Error messages list at most this many keys of a long WAIT/CHECK.
constexpr std::size_t kKeysInMessages = 8;

milliseconds clampTimeout(milliseconds t) {
  return std::clamp(t, milliseconds(0), kMaxTimeout);
}

// Milliseconds until deadline for poll(), rounded up, at least 0.
int pollTimeoutMs(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 60 * 60 * 1000));
}

std::string joinKeys(const std::vector<std::string>& keys) {
  std::string s;
  for (std::size_t i = 0; i < keys.size() && i < kKeysInMessages; ++i)
    s += (i == 0 ? "'" : ", '") + keys[i] + "'";
  if (keys.size() > kKeysInMessages)
    s += " and " + std::to_string(keys.size() - kKeysInMessages) + " more";
  return s;
}

// "GET 'key'", "WAIT ['a', 'b']": how errors name a request.
std::string describe(const proto::Request& req) {
  const bool many = req.type == proto::RequestType::Wait || req.type == proto::RequestType::Check ||
                    req.type == proto::RequestType::Delete;
  return std::string(proto::toString(req.type)) + " " +
         (many ? "[" + joinKeys(req.keys) + "]" : joinKeys(req.keys));
}

// Which bound of the wire format a request breaks (appendRequest refused it).
std::string boundBroken(const proto::Request& req) {
  for (const auto& k : req.keys)
    if (k.size() > proto::kMaxKeyBytes)
      return "a key of " + std::to_string(k.size()) + " bytes exceeds " +
             std::to_string(proto::kMaxKeyBytes);
  if (req.keys.size() > proto::kMaxKeys)
    return std::to_string(req.keys.size()) + " keys exceed " + std::to_string(proto::kMaxKeys);
  if (req.value.size() > proto::kMaxValueBytes)
    return "a value of " + std::to_string(req.value.size()) + " bytes exceeds " +
           std::to_string(proto::kMaxValueBytes);
  return "the request exceeds " + std::to_string(proto::kMaxFrameBytes) + " bytes";
}

// Why one connection attempt failed, for the final error message.
struct Attempt {
  Fd fd;
  std::string error;
  bool refused = false;  // ECONNREFUSED: nothing listens there (any more)
};

// One non-blocking connect to one address, bounded by deadline.
Attempt connectOnce(const addrinfo& ai, Clock::time_point deadline) {
  Attempt a;
  Fd s(::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
  if (!s) {
    a.error = "socket: " + errnoText(errno);
    return a;
  }
  if (::connect(s.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      a.refused = errno == ECONNREFUSED;
      a.error = errnoText(errno);
      return a;
    }
    pollfd p{s.get(), POLLOUT, 0};
    int rc;
    do rc = ::poll(&p, 1, pollTimeoutMs(deadline));
    while (rc < 0 && errno == EINTR);
    if (rc == 0) {
      a.error = "connect timed out";
      return a;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (rc < 0)
      err = errno;
    else if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = errno;
    if (err != 0) {
      a.refused = err == ECONNREFUSED;
      a.error = errnoText(err);
      return a;
    }
  }
  // A connect to a closed port of this host can, when the kernel happens to pick the same
  // ephemeral port, succeed by connecting the socket to itself.
  sockaddr_storage local{}, peer{};
  socklen_t localLen = sizeof local, peerLen = sizeof peer;
  if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&local), &localLen) == 0 &&
      ::getpeername(s.get(), reinterpret_cast<sockaddr*>(&peer), &peerLen) == 0 &&
      localLen == peerLen && std::memcmp(&local, &peer, localLen) == 0) {
    a.error = errnoText(ECONNREFUSED) + ", self-connect";
    return a;
  }
  setNoDelay(s.get());
  a.fd = std::move(s);
  return a;
}

}  // namespace

struct TcpStore::Impl {
  Impl(std::string host, std::uint16_t port, milliseconds connectTimeout, milliseconds opTimeout,
       std::string authKey)
      : host_(std::move(host)),
        port_(port),
        address_(formatHostPort(host_, port)),
        connectTimeout_(clampTimeout(connectTimeout)),
        opTimeout_(clampTimeout(opTimeout)),
        authKey_(std::move(authKey)) {}

  /// Connects, retrying until the connect timeout (or `cap`, if sooner); `giveUpWhenRefused`:
  /// throws Error(PeerLost) as soon as every address refused the connection.
  void connect(Clock::time_point cap = Clock::time_point::max(), bool giveUpWhenRefused = false);
  void finishHandshake(const proto::Request& req, Clock::time_point deadline);
  proto::Response request(const proto::Request& req, Clock::time_point deadline,
                          bool giveUpWhenRefused = false);
  void sendAll(const std::vector<std::uint8_t>& bytes, const proto::Request& req,
               Clock::time_point deadline);
  void recvExactly(std::uint8_t* data, std::size_t n, const proto::Request& req,
                   Clock::time_point deadline);
  [[noreturn]] void fail(ErrorCode code, const std::string& message);
  Clock::time_point opDeadline() const { return Clock::now() + opTimeout_; }
  Clock::time_point waitDeadline(milliseconds timeout) const {
    return Clock::now() + clampTimeout(timeout) + kReplySlack;
  }

  const std::string host_;
  const std::uint16_t port_;
  const std::string address_;  // "host:port", for error messages
  const milliseconds connectTimeout_;
  const milliseconds opTimeout_;
  const std::string authKey_;

  mutable std::mutex mu_;  // serialises requests; guards everything below
  // fd_ changes under fdMu_ too, so that disconnect() can shut it down without mu_.
  std::mutex fdMu_;
  Fd fd_;
  // An ONCLOSE was registered: the connection is never re-established (setOnClose()).
  bool pinned_ = false;
  std::string localAddress_;
  // Without a key: the handshake whose answer has not been read yet.
  std::optional<security::Initiator> pendingHandshake_;
};

void TcpStore::Impl::connect(Clock::time_point cap, bool giveUpWhenRefused) {
  const auto start = Clock::now();
  const auto deadline = std::min(start + connectTimeout_, cap);
  const std::string service = std::to_string(port_);
  auto delay = kFirstRetryDelay;
  std::string lastError = "no attempt";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    // Name resolution failures are retried too: the store's name may not be published yet.
    const int rc = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &found);
    if (rc != 0) {
      lastError = std::string("cannot resolve the host: ") + ::gai_strerror(rc);
    } else {
      std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
      bool allRefused = true;
      for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
        Attempt a = connectOnce(*ai, deadline);
        if (!a.fd) {
          lastError = a.error;
          allRefused = allRefused && a.refused;
          continue;
        }
        security::Initiator initiator(authKey_, security::Service::Store, {});
        pendingHandshake_.reset();
        if (authKey_.empty()) {
          std::vector<std::uint8_t> hello;
          initiator.appendHello(hello);
          // A new socket's buffer takes the few bytes of a Hello at once.
          if (::send(a.fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
              static_cast<ssize_t>(hello.size())) {
            lastError = "handshake: send: " + errnoText(errno);
            continue;
          }
          pendingHandshake_.emplace(std::move(initiator));
        } else {
          const auto hs = security::runInitiator(a.fd.get(), initiator, deadline);
          if (!hs.ok) {
            if (hs.failure == security::Failure::Auth)
              throw Error(ErrorCode::Auth, "store at " + address_ + ": " + hs.error);
            lastError = "handshake: " + hs.error;
            if (hs.failure == security::Failure::Closed)
              lastError += " (is this host's address in the store's BRAID_WHITELIST?)";
            continue;
          }
        }
        sockaddr_storage local{};
        socklen_t len = sizeof local;
        if (::getsockname(a.fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0)
          localAddress_ = numericHost(reinterpret_cast<sockaddr*>(&local), len);
        {
          std::lock_guard<std::mutex> g(fdMu_);
          fd_ = std::move(a.fd);
        }
        return;
      }
      if (giveUpWhenRefused && allRefused)
        throw Error(ErrorCode::PeerLost, "store at " + address_ + " refused the connection (" +
                                             lastError + "): its server is gone");
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(delay, deadline - now));
    delay = std::min(delay * 2, kMaxRetryDelay);
  }
  const auto waited = std::chrono::duration_cast<milliseconds>(deadline - start);
  throw Error(ErrorCode::Timeout, "cannot reach the store at " + address_ + " within " +
                                      std::to_string(waited.count()) +
                                      " ms (last error: " + lastError + ")");
}

void TcpStore::Impl::fail(ErrorCode code, const std::string& message) {
  {
    std::lock_guard<std::mutex> g(fdMu_);
    fd_.reset();
  }  // the connection's state is unknown now; the next request reconnects
  pendingHandshake_.reset();
  throw Error(code, message);
}

void TcpStore::Impl::sendAll(const std::vector<std::uint8_t>& bytes, const proto::Request& req,
                             Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      fail(ErrorCode::PeerLost, "store at " + address_ + " failed during " + describe(req) +
                                    ": send: " + errnoText(errno));
    pollfd p{fd_.get(), POLLOUT, 0};
    const int rc = ::poll(&p, 1, pollTimeoutMs(deadline));
    if (rc == 0)
      fail(ErrorCode::Timeout,
           "store at " + address_ + " did not take " + describe(req) + " within its deadline");
    if (rc < 0 && errno != EINTR)
      fail(ErrorCode::Internal,
           "store " + describe(req) + " at " + address_ + ": poll: " + errnoText(errno));
  }
}

void TcpStore::Impl::recvExactly(std::uint8_t* data, std::size_t n, const proto::Request& req,
                                 Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd_.get(), data + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0)
      fail(ErrorCode::PeerLost,
           "store at " + address_ + " closed the connection during " + describe(req));
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      fail(ErrorCode::PeerLost, "store at " + address_ + " failed during " + describe(req) +
                                    ": recv: " + errnoText(errno));
    pollfd p{fd_.get(), POLLIN, 0};
    const int rc = ::poll(&p, 1, pollTimeoutMs(deadline));
    if (rc == 0)
      fail(ErrorCode::Timeout,
           "store at " + address_ + " did not answer " + describe(req) + " within its deadline");
    if (rc < 0 && errno != EINTR)
      fail(ErrorCode::Internal,
           "store " + describe(req) + " at " + address_ + ": poll: " + errnoText(errno));
  }
}

// Reads the server's answer to the Hello that connect() sent without waiting (no key).
void TcpStore::Impl::finishHandshake(const proto::Request& req, Clock::time_point deadline) {
  security::Initiator& initiator = *pendingHandshake_;
  std::vector<std::uint8_t> in(security::kHandshakeHeaderBytes);
  recvExactly(in.data(), in.size(), req, deadline);
  security::Message m;
  auto r = security::decodeMessage(in, m);
  if (r.status == security::DecodeStatus::Incomplete && r.frameBytes > in.size()) {
    in.resize(r.frameBytes);
    recvExactly(in.data() + security::kHandshakeHeaderBytes,
                in.size() - security::kHandshakeHeaderBytes, req, deadline);
    r = security::decodeMessage(in, m);
  }
  if (r.status != security::DecodeStatus::Complete)
    fail(ErrorCode::Mismatch, "store at " + address_ + " is not a braid store (" + r.error +
                                  "), answering " + describe(req));
  std::vector<std::uint8_t> out;
  initiator.onMessage(m, out);
  if (initiator.state() == security::HandshakeState::Failed) {
    const bool auth = initiator.failure() == security::Failure::Auth;
    fail(auth ? ErrorCode::Auth : ErrorCode::Mismatch,
         "store at " + address_ + ": " + initiator.error() + " (before " + describe(req) + ")");
  }
  pendingHandshake_.reset();
}

proto::Response TcpStore::Impl::request(const proto::Request& req, Clock::time_point deadline,
                                        bool giveUpWhenRefused) {
  std::vector<std::uint8_t> frame;
  if (!proto::appendRequest(req, frame))
    throw Error(ErrorCode::InvalidArgument, "store " + describe(req).substr(0, 256) + " at " +
                                                address_ + ": " + boundBroken(req));
  if (!fd_) {
    if (pinned_)
      throw Error(ErrorCode::PeerLost, "store " + describe(req).substr(0, 256) + " at " + address_ +
                                           ": this client's connection (which carries an ONCLOSE "
                                           "registration) is closed and is not re-established");
    // Only a best-effort request (addIfReachable) bounds reconnecting by its own deadline.
    connect(giveUpWhenRefused ? deadline : Clock::time_point::max(), giveUpWhenRefused);
  }
  if (!pendingHandshake_) {
    sendAll(frame, req, deadline);
  } else {
    try {
      sendAll(frame, req, deadline);
      finishHandshake(req, deadline);
    } catch (const Error& e) {
      // Dropped before it answered the Hello: most likely at accept, by the whitelist.
      if (e.code() != ErrorCode::PeerLost) throw;
      throw Error(ErrorCode::PeerLost, e.detail() +
                                           ", before it answered the handshake (is this host's "
                                           "address in the store's BRAID_WHITELIST?)");
    }
  }

  std::vector<std::uint8_t> in(proto::kFrameHeaderBytes);
  recvExactly(in.data(), in.size(), req, deadline);
  proto::Response resp;
  auto r = proto::decodeResponse(in, resp);
  if (r.status == proto::DecodeStatus::Incomplete) {
    in.resize(r.frameBytes);
    recvExactly(in.data() + proto::kFrameHeaderBytes, in.size() - proto::kFrameHeaderBytes, req,
                deadline);
    r = proto::decodeResponse(in, resp);
  }
  if (r.status != proto::DecodeStatus::Complete)
    fail(ErrorCode::Mismatch,
         "store at " + address_ + " sent a malformed reply to " + describe(req) + ": " + r.error);
  return resp;
}

TcpStore::TcpStore(const std::string& host, std::uint16_t port, milliseconds connectTimeout,
                   milliseconds opTimeout, const SecurityOptions& security)
    : impl_(std::make_unique<Impl>(host, port, connectTimeout, opTimeout, security.authKey)) {
  std::lock_guard<std::mutex> lk(impl_->mu_);
  impl_->connect();
}

TcpStore::~TcpStore() = default;

namespace {

[[noreturn]] void unexpectedReply(const std::string& address, const proto::Request& req,
                                  const proto::Response& resp) {
  if (resp.type == proto::ResponseType::Error)
    throw Error(ErrorCode::InvalidArgument,
                "store at " + address + " refused " + describe(req) + ": " + resp.message);
  throw Error(ErrorCode::Mismatch, "store at " + address + " sent an unexpected reply (type " +
                                       std::to_string(static_cast<int>(resp.type)) + ") to " +
                                       describe(req));
}

}  // namespace

void TcpStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  proto::Request req;
  req.type = proto::RequestType::Set;
  req.keys = {key};
  req.value = value;
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->opDeadline());
  if (resp.type != proto::ResponseType::Ok) unexpectedReply(impl_->address_, req, resp);
}

std::vector<std::uint8_t> TcpStore::get(const std::string& key, milliseconds timeout) {
  proto::Request req;
  req.type = proto::RequestType::Get;
  req.keys = {key};
  req.timeoutMs = static_cast<std::uint64_t>(clampTimeout(timeout).count());
  std::lock_guard<std::mutex> lk(impl_->mu_);
  auto resp = impl_->request(req, impl_->waitDeadline(timeout));
  if (resp.type == proto::ResponseType::Value) return std::move(resp.value);
  if (resp.type == proto::ResponseType::Timeout)
    throw Error(ErrorCode::Timeout, "store GET: key '" + key + "' not set within " +
                                        std::to_string(timeout.count()) + " ms (store at " +
                                        impl_->address_ + ")");
  unexpectedReply(impl_->address_, req, resp);
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  proto::Request req;
  req.type = proto::RequestType::Add;
  req.keys = {key};
  req.delta = delta;
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->opDeadline());
  if (resp.type != proto::ResponseType::Integer) unexpectedReply(impl_->address_, req, resp);
  return resp.integer;
}

std::int64_t TcpStore::addIfReachable(const std::string& key, std::int64_t delta,
                                      milliseconds timeout) {
  proto::Request req;
  req.type = proto::RequestType::Add;
  req.keys = {key};
  req.delta = delta;
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, std::min(impl_->opDeadline(), Clock::now() + timeout),
                                   /*giveUpWhenRefused=*/true);
  if (resp.type != proto::ResponseType::Integer) unexpectedReply(impl_->address_, req, resp);
  return resp.integer;
}

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  proto::Request req;
  req.type = proto::RequestType::Wait;
  req.keys = keys;
  req.timeoutMs = static_cast<std::uint64_t>(clampTimeout(timeout).count());
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->waitDeadline(timeout));
  if (resp.type == proto::ResponseType::Ok) return;
  if (resp.type == proto::ResponseType::Timeout)
    throw Error(ErrorCode::Timeout, "store WAIT: keys [" + joinKeys(resp.keys) +
                                        "] not set within " + std::to_string(timeout.count()) +
                                        " ms (store at " + impl_->address_ + ")");
  unexpectedReply(impl_->address_, req, resp);
}

std::size_t TcpStore::waitAny(const std::vector<std::string>& keys, milliseconds timeout) {
  if (keys.empty())
    throw Error(ErrorCode::InvalidArgument,
                "store WAITANY: no key given (store at " + impl_->address_ + ")");
  proto::Request req;
  req.type = proto::RequestType::WaitAny;
  req.keys = keys;
  req.timeoutMs = static_cast<std::uint64_t>(clampTimeout(timeout).count());
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->waitDeadline(timeout));
  if (resp.type == proto::ResponseType::Integer && resp.integer >= 0 &&
      static_cast<std::size_t>(resp.integer) < keys.size())
    return static_cast<std::size_t>(resp.integer);
  if (resp.type == proto::ResponseType::Timeout)
    throw Error(ErrorCode::Timeout, "store WAITANY: none of the keys [" + joinKeys(keys) +
                                        "] set within " + std::to_string(timeout.count()) +
                                        " ms (store at " + impl_->address_ + ")");
  unexpectedReply(impl_->address_, req, resp);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  proto::Request req;
  req.type = proto::RequestType::Check;
  req.keys = keys;
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->opDeadline());
  if (resp.type != proto::ResponseType::Bool) unexpectedReply(impl_->address_, req, resp);
  return resp.flag;
}

std::int64_t TcpStore::deleteKeys(const std::vector<std::string>& keys) {
  if (keys.empty()) return 0;
  proto::Request req;
  req.type = proto::RequestType::Delete;
  req.keys = keys;
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->opDeadline());
  if (resp.type != proto::ResponseType::Integer) unexpectedReply(impl_->address_, req, resp);
  return resp.integer;
}

std::int64_t TcpStore::deletePrefix(const std::string& prefix) {
  proto::Request req;
  req.type = proto::RequestType::DeletePrefix;
  req.keys = {prefix};
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->opDeadline());
  if (resp.type != proto::ResponseType::Integer) unexpectedReply(impl_->address_, req, resp);
  return resp.integer;
}

std::int64_t TcpStore::numKeys() {
  proto::Request req;
  req.type = proto::RequestType::NumKeys;
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->opDeadline());
  if (resp.type != proto::ResponseType::Integer) unexpectedReply(impl_->address_, req, resp);
  return resp.integer;
}

void TcpStore::setOnClose(const std::string& key, const std::vector<std::uint8_t>& value) {
  proto::Request req;
  req.type = proto::RequestType::OnClose;
  req.keys = {key};
  req.value = value;
  std::lock_guard<std::mutex> lk(impl_->mu_);
  impl_->pinned_ = true;
  const auto resp = impl_->request(req, impl_->opDeadline());
  if (resp.type != proto::ResponseType::Ok) unexpectedReply(impl_->address_, req, resp);
}

void TcpStore::cancelOnClose(const std::string& key) {
  proto::Request req;
  req.type = proto::RequestType::UnClose;
  req.keys = {key};
  std::lock_guard<std::mutex> lk(impl_->mu_);
  const auto resp = impl_->request(req, impl_->opDeadline());
  if (resp.type != proto::ResponseType::Ok) unexpectedReply(impl_->address_, req, resp);
}

std::unique_ptr<TcpStore> TcpStore::connectAgain() const {
  SecurityOptions security;
  security.authKey = impl_->authKey_;
  return std::make_unique<TcpStore>(impl_->host_, impl_->port_, impl_->connectTimeout_,
                                    impl_->opTimeout_, security);
}

const std::string& TcpStore::address() const noexcept {
  return impl_->address_;
}

void TcpStore::disconnect() {
  std::lock_guard<std::mutex> g(impl_->fdMu_);
  // shutdown, not close: a thread in a request keeps a valid fd, and its recv returns at once.
  if (impl_->fd_) ::shutdown(impl_->fd_.get(), SHUT_RDWR);
}

std::string TcpStore::localAddress() const {
  std::lock_guard<std::mutex> lk(impl_->mu_);
  return impl_->localAddress_;
}

}  // namespace braid
