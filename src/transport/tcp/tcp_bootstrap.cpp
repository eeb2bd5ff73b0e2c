// Connection setup. Every rank listens on an ephemeral port and publishes it under
// "tcp/addr/<rank>". Rank r connects to ranks 0..r-1 in order, then accepts r+1..size-1 in
// whatever order they arrive. This cannot deadlock: a connect completes in the kernel's backlog
// before the lower rank calls accept, and a rank only waits for the handshake reply of a lower
// rank, which in turn only waits for ranks lower than itself.
//
// Each connection opens with the handshake of common/handshake.hpp (service Transport, context
// {rank, size}): Hello/Reply without a key, Hello/Reply/Proof/Accept with one. The connecting
// rank checks that it reached the rank it meant to; the accepting rank checks that the
// newcomer is a higher rank of a job of the same size that it has not accepted yet. A newcomer
// that fails a check is dropped and logged; only an authenticated one (the job has a key) that
// claims another world size fails the rank with Error(Mismatch).
//
// The accepting side runs every pending handshake at once in one poll loop, each bounded by
// handshakeTimeout, so a stranger that connects and stays silent (or sends garbage, or has the
// wrong key, or an address outside the whitelist) is dropped and logged while the real ranks
// get through. What was dropped is remembered for the timeout message, should a rank never
// arrive.
//
// A lazy transport (tcp_transport.cpp) uses the same pieces one pair at a time: it listens and
// publishes (listenAndPublish), dials a peer on first use (dialRank) and runs an Acceptor with
// its own decision (which settles crossing dials) until the transport stops (serve).
#include "transport/tcp/tcp_bootstrap.hpp"

#include <poll.h>

#include <algorithm>
#include <braid/error.hpp>
#include <climits>
#include <cstdint>
#include <list>
#include <memory>
#include <thread>

#include "common/handshake_io.hpp"
#include "common/peer_policy.hpp"

namespace braid::transport::tcp {

namespace {

// Handshakes in progress at once on one listener; more are dropped (a flood, not a job).
constexpr std::size_t kMaxPendingHandshakes = 256;

std::uint32_t getU32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

std::string msText(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

// Connects to `peer`, retrying refused or failed attempts with a growing pause until deadline.
Fd connectToPeer(int rank, int size, int peer, const std::string& address,
                 const TcpOptions& options, Deadline deadline, const DialHooks* hooks) {
  const auto hostPort = parseHostPort(address);
  if (!hostPort)
    throw Error(ErrorCode::InvalidArgument, "rank " + std::to_string(rank) + ": rank " +
                                                std::to_string(peer) + " published address '" +
                                                address + "', expected host:port");
  std::string lastError = "none";
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (hooks != nullptr && hooks->cancelled && hooks->cancelled()) return Fd();
    Fd fd = connectTo(*hostPort, options.socketBufferBytes, deadline, lastError);
    if (!fd && hooks != nullptr && hooks->peerListened && lastError == errnoText(ECONNREFUSED))
      // The peer listened when it published its address and keeps listening while its
      // transport lives: a refusal now means it is gone.
      throw Error(ErrorCode::PeerLost, "rank " + std::to_string(rank) + " cannot reach rank " +
                                           std::to_string(peer) + " at " + address +
                                           ": connection refused (its transport is closed or "
                                           "its process exited)");
    if (fd) {
      setNoDelay(fd.get());
      security::Initiator initiator(options.security.authKey, security::Service::Transport,
                                    encodeRankContext(rank, size));
      if (hooks != nullptr && hooks->socket) hooks->socket(fd.get());
      const auto hs = [&] {
        // Told -1 however the handshake ends, before the socket can close.
        struct Untell {
          const DialHooks* h;
          ~Untell() {
            if (h != nullptr && h->socket) h->socket(-1);
          }
        } untell{hooks};
        return security::runInitiator(fd.get(), initiator, deadline);
      }();
      if (!hs.ok && hs.failure == security::Failure::Refused && hooks != nullptr &&
          hooks->refused != nullptr) {
        *hooks->refused = hs.error;
        return Fd();
      }
      if (hs.ok) {
        const auto theirs = decodeRankContext(hs.peerContext);
        if (theirs && theirs->rank == peer && theirs->size == size) return fd;
        lastError = theirs ? "reached rank " + std::to_string(theirs->rank) + " of a job of " +
                                 std::to_string(theirs->size) + " ranks"
                           : "not a braid rank";
      } else if (hs.failure == security::Failure::Auth) {
        // Retrying cannot help: the keys differ (or only one side has one).
        throw Error(ErrorCode::Auth, "rank " + std::to_string(rank) +
                                         " failed to authenticate with rank " +
                                         std::to_string(peer) + " at " + address + ": " + hs.error);
      } else {
        lastError = hs.error;
      }
    }
    const auto now = Clock::now();
    if (now >= deadline)
      throw Error(ErrorCode::Timeout,
                  "rank " + std::to_string(rank) + " could not connect to rank " +
                      std::to_string(peer) + " at " + address + " within " +
                      msText(options.connectTimeout) + " (last error: " + lastError + ")");
    std::this_thread::sleep_for(
        std::min<Clock::duration>(pause, deadline - now + std::chrono::milliseconds(1)));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

// One incoming connection whose handshake is in progress.
struct Incoming {
  Incoming(Fd f, std::string from, security::ResponderSession s)
      : fd(std::move(f)), peer(std::move(from)), session(std::move(s)) {}
  Fd fd;
  std::string peer;  // "host:port" it connected from
  security::ResponderSession session;
};

}  // namespace

// Accepts ranks: eagerly rank+1..size-1 (see the top of the file), or, for a lazy transport,
// whoever dials until stopped.
class Acceptor::Impl {
 public:
  Impl(int rank, int size, const TcpOptions& options, std::string self, int listener, Decide decide,
       Take take, Mesh* mesh, Deadline deadline)
      : rank_(rank),
        size_(size),
        options_(options),
        policy_(options.security),
        decide_(std::move(decide)),
        take_(std::move(take)),
        mesh_(mesh),
        listener_(listener),
        deadline_(deadline),
        self_(std::move(self)) {}

  // Eager: until every higher rank arrived, or Error(Timeout) at the deadline.
  void run() {
    missing_ = size_ - rank_ - 1;
    loop(-1, nullptr);
    for (Incoming& in : incoming_) drop(in, "every rank arrived; the connection is not needed");
    incoming_.clear();
  }

  // Lazy: until `stop` is set (wakeFd readable tells).
  void serve(int wakeFd, const std::atomic<bool>& stop) {
    loop(wakeFd, &stop);
    for (Incoming& in : incoming_) drop(in, "the transport closed");
    incoming_.clear();
  }

 private:
  void loop(int wakeFd, const std::atomic<bool>* stop) {
    std::vector<pollfd> fds;
    const std::size_t first = wakeFd >= 0 ? 2 : 1;
    for (;;) {
      if (stop != nullptr ? stop->load() : missing_ == 0) return;
      const auto now = Clock::now();
      if (stop == nullptr && now >= deadline_) throwTimeout();
      expire(now);
      auto wake = stop == nullptr ? deadline_ : now + std::chrono::seconds(1);
      fds.assign(1, pollfd{listener_, POLLIN, 0});
      if (wakeFd >= 0) fds.push_back(pollfd{wakeFd, POLLIN, 0});
      for (const Incoming& in : incoming_) {
        fds.push_back(pollfd{in.fd.get(), POLLIN, 0});
        wake = std::min(wake, in.session.deadline());
      }
      const int rc = ::poll(fds.data(), fds.size(), millisecondsUntil(wake, 1000));
      if (rc < 0 && errno != EINTR)
        throw Error(ErrorCode::Internal, self_ + ": poll while accepting: " + errnoText(errno));
      if (rc <= 0) continue;
      if (stop != nullptr && stop->load()) return;
      // Existing handshakes first (fds[first..] match incoming_ as it was when polled).
      auto it = incoming_.begin();
      for (std::size_t i = first; i < fds.size() && (stop != nullptr || missing_ > 0); ++i) {
        auto current = it++;
        if (fds[i].revents != 0) advance(current);
      }
      if (fds[0].revents != 0) acceptAll();
    }
  }

 private:
  void acceptAll() {
    for (;;) {
      Accepted a = acceptPending(listener_);
      if (!a.fd) return;
      const auto* from = reinterpret_cast<const sockaddr*>(&a.address);
      std::string peer = describeAddress(from, a.length);
      if (!policy_.filter().allows(from, a.length)) {
        report(peer, "address not in BRAID_WHITELIST");
        continue;
      }
      if (incoming_.size() >= kMaxPendingHandshakes) {
        report(peer, "too many handshakes in progress");
        continue;
      }
      setNoDelay(a.fd.get());
      const auto until = std::min(deadline_, Clock::now() + policy_.handshakeTimeout());
      security::Responder responder(policy_.key(), security::Service::Transport,
                                    encodeRankContext(rank_, size_));
      security::ResponderSession session(a.fd.get(), std::move(responder), until);
      incoming_.emplace_back(std::move(a.fd), std::move(peer), std::move(session));
      // Most handshakes have their Hello in already.
      advance(std::prev(incoming_.end()));
      if (missing_ == 0) return;
    }
  }

  void advance(std::list<Incoming>::iterator it) {
    using Progress = security::ResponderSession::Progress;
    Incoming& in = *it;
    switch (in.session.onReadable()) {
      case Progress::Waiting:
        return;
      case Progress::NotHandshake:
        drop(in, "not a braid handshake");
        break;
      case Progress::Failed:
        if (in.session.failure() == security::Failure::Closed && !in.session.sawBytes())
          break;  // connected and left without a byte: a reachability probe
        drop(in, "handshake failed: " + in.session.error());
        break;
      case Progress::Verified:
        admit(in);
        break;
    }
    incoming_.erase(it);
  }

  // The peer passed the handshake: take it if it is a rank this one waits for.
  void admit(Incoming& in) {
    const auto theirs = decodeRankContext(in.session.peerContext());
    if (!theirs) {
      in.session.reject(security::RejectReason::Refused, "not a rank context");
      return drop(in, "not a braid rank");
    }
    if (theirs->size != size_) {
      in.session.reject(security::RejectReason::Refused,
                        "this job has " + std::to_string(size_) + " ranks");
      const std::string claim = "rank " + std::to_string(theirs->rank) + " of a job of " +
                                std::to_string(theirs->size) + " ranks";
      // Only a peer that proved the job's key is a rank of this job, so only then is the
      // disagreement a real misconfiguration. Without a key anybody can send any Hello: it is
      // dropped like garbage, and ranks started with different world sizes are caught through
      // the store at join instead (core/comm_create.cpp).
      if (!policy_.authenticated())
        return drop(in, "claims to be " + claim + ", this job has " + std::to_string(size_) +
                            " (unauthenticated, ignored)");
      throw Error(ErrorCode::Mismatch, "rank " + std::to_string(rank_) + ": authenticated " +
                                           claim + " connected from " + in.peer +
                                           ", this job has " + std::to_string(size_));
    }
    if (const std::string why = decide_(theirs->rank); !why.empty()) {
      in.session.reject(security::RejectReason::Refused, why);
      // Eager: a rank that should not connect here. Lazy: the loser of a crossing dial, normal.
      if (mesh_ == nullptr) {
        in.fd.reset();
        return;
      }
      return drop(in,
                  "rank " + std::to_string(theirs->rank) + " is not expected here (" + why + ")");
    }
    if (!in.session.accept()) {
      take_(theirs->rank, Fd());  // releases what decide reserved
      return drop(in, "the peer does not take the handshake reply");
    }
    take_(theirs->rank, std::move(in.fd));
    --missing_;
  }

  void expire(Deadline now) {
    for (auto it = incoming_.begin(); it != incoming_.end();) {
      if (it->session.deadline() > now) {
        ++it;
        continue;
      }
      drop(*it, "no handshake within " + msText(policy_.handshakeTimeout()));
      it = incoming_.erase(it);
    }
  }

  void report(const std::string& peer, const std::string& why) {
    policy_.reportDropped(self_, peer, why);
    lastDrop_ = peer + ": " + why;
  }

  void drop(Incoming& in, const std::string& why) {
    report(in.peer, why);
    in.fd.reset();
  }

  [[noreturn]] void throwTimeout() const {
    std::vector<int> waiting;
    for (int peer = rank_ + 1; peer < size_; ++peer)
      if (mesh_ != nullptr && !mesh_->links[static_cast<std::size_t>(peer)].fd)
        waiting.push_back(peer);
    throw Error(ErrorCode::Timeout,
                security::connectTimeoutText(self_, options_.connectTimeout, waiting,
                                             policy_.dropped(), "incoming connection", lastDrop_));
  }

  const int rank_;
  const int size_;
  const TcpOptions options_;
  security::PeerPolicy policy_;
  Decide decide_;
  Take take_;
  Mesh* mesh_;  // eager: which ranks arrived (for the timeout's names)
  const int listener_;
  const Deadline deadline_;
  const std::string self_;
  std::list<Incoming> incoming_;
  int missing_ = 0;
  std::string lastDrop_;
};

Acceptor::Acceptor(int rank, int size, const TcpOptions& options, std::string self, int listener,
                   Decide decide, Take take, Mesh* mesh, Deadline deadline)
    : impl_(std::make_unique<Impl>(rank, size, options, std::move(self), listener,
                                   std::move(decide), std::move(take), mesh, deadline)) {}
Acceptor::~Acceptor() = default;
void Acceptor::run() {
  impl_->run();
}
void Acceptor::serve(int wakeFd, const std::atomic<bool>& stop) {
  impl_->serve(wakeFd, stop);
}

std::string addressKey(int rank) {
  return "tcp/addr/" + std::to_string(rank);
}

Fd dialRank(int rank, int size, int peer, const std::string& address, const TcpOptions& options,
            Deadline deadline, const DialHooks& hooks) {
  return connectToPeer(rank, size, peer, address, options, deadline, &hooks);
}

Listener listen(int rank, int size, const TcpOptions& options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::InvalidArgument, "createTcpTransport: rank " + std::to_string(rank) +
                                                " is outside a world of size " +
                                                std::to_string(size));
  const std::string host = options.listenAddress.empty() ? "127.0.0.1" : options.listenAddress;
  std::uint16_t port = 0;
  Listener out;
  try {
    out.fd = listenOn(host, options.socketBufferBytes, port, options.portLow, options.portHigh);
  } catch (const Error& e) {
    throw Error(e.code(), "rank " + std::to_string(rank) + ": " + e.detail());
  }
  out.address = formatHostPort(host, port);
  // Checked before anything is published, so a bad entry fails every rank the same way.
  { security::PeerPolicy check(options.security); }
  return out;
}

namespace {

class StoreAddresses final : public Addresses {
 public:
  explicit StoreAddresses(std::shared_ptr<Store> store) : store_(std::move(store)) {}
  std::string of(int peer, std::chrono::milliseconds timeout) override {
    return store_->getString(addressKey(peer), timeout);
  }

 private:
  std::shared_ptr<Store> store_;
};

class TableAddresses final : public Addresses {
 public:
  TableAddresses(std::shared_ptr<const std::vector<std::string>> entries, int stream)
      : entries_(std::move(entries)), stream_(stream) {}
  std::string of(int peer, std::chrono::milliseconds) override {
    if (peer < 0 || static_cast<std::size_t>(peer) >= entries_->size())
      throw Error(ErrorCode::InvalidArgument, "tcp: no address of rank " + std::to_string(peer) +
                                                  " in a table of " +
                                                  std::to_string(entries_->size()));
    const std::string& e = (*entries_)[static_cast<std::size_t>(peer)];
    std::size_t from = 0;
    for (int s = 0; s < stream_ && from != std::string::npos; ++s) {
      from = e.find(' ', from);
      if (from != std::string::npos) ++from;
    }
    const std::size_t to = from == std::string::npos ? from : e.find(' ', from);
    if (from == std::string::npos || from == e.size() || to == from)
      throw Error(ErrorCode::InvalidArgument,
                  "tcp: rank " + std::to_string(peer) + " published no listener for stream " +
                      std::to_string(stream_) + " (\"" + e +
                      "\"): do all ranks set the same BRAID_SOCKET_NTHREADS and "
                      "BRAID_NSOCKS_PERTHREAD?");
    return e.substr(from, to == std::string::npos ? std::string::npos : to - from);
  }

 private:
  std::shared_ptr<const std::vector<std::string>> entries_;
  int stream_;
};

}  // namespace

std::shared_ptr<Addresses> addressesInStore(std::shared_ptr<Store> store) {
  return std::make_shared<StoreAddresses>(std::move(store));
}

std::shared_ptr<Addresses> addressesInTable(std::shared_ptr<const std::vector<std::string>> entries,
                                            int stream) {
  return std::make_shared<TableAddresses>(std::move(entries), stream);
}

std::vector<std::uint8_t> encodeRankContext(int rank, int size) {
  std::vector<std::uint8_t> out(kRankContextBytes);
  for (int i = 0; i < 4; ++i) {
    out[i] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(rank) >> (8 * i));
    out[4 + i] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(size) >> (8 * i));
  }
  return out;
}

std::optional<RankContext> decodeRankContext(std::span<const std::uint8_t> bytes) {
  if (bytes.size() != kRankContextBytes) return std::nullopt;
  const std::uint32_t rank = getU32(bytes.data());
  const std::uint32_t size = getU32(bytes.data() + 4);
  if (size == 0 || size > static_cast<std::uint32_t>(INT_MAX) || rank >= size) return std::nullopt;
  return RankContext{static_cast<int>(rank), static_cast<int>(size)};
}

Mesh connectMesh(Listener listener, Addresses& peers, int rank, int size,
                 const TcpOptions& options) {
  const Deadline deadline = Clock::now() + options.connectTimeout;
  Mesh mesh;
  mesh.links.resize(static_cast<std::size_t>(size > 0 ? size : 0));
  const std::string self = listener.address;
  mesh.links[static_cast<std::size_t>(rank)].address = self;
  Acceptor acceptor(
      rank, size, options, "rank " + std::to_string(rank) + " (" + self + ")", listener.fd.get(),
      [&](int peer) -> std::string {
        if (peer <= rank || mesh.links[static_cast<std::size_t>(peer)].fd)
          return "rank " + std::to_string(rank) + " does not accept rank " + std::to_string(peer) +
                 " (lower, or already connected)";
        return {};
      },
      [&](int peer, Fd fd) {
        if (!fd) return;
        PeerLink& link = mesh.links[static_cast<std::size_t>(peer)];
        // The address the peer listens on, for error messages; it published before connecting.
        link.address =
            peers.of(peer, std::chrono::ceil<std::chrono::milliseconds>(std::max(
                               deadline - Clock::now(), Clock::duration(std::chrono::seconds(1)))));
        link.fd = std::move(fd);
      },
      &mesh, deadline);
  for (int peer = 0; peer < rank; ++peer) {
    PeerLink& link = mesh.links[static_cast<std::size_t>(peer)];
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        std::max(deadline - Clock::now(), Clock::duration::zero()));
    try {
      link.address = peers.of(peer, left);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank) + " timed out after " +
                                          msText(options.connectTimeout) + " waiting for rank " +
                                          std::to_string(peer) + " to publish its address (" +
                                          e.detail() + ")");
    }
    link.fd = connectToPeer(rank, size, peer, link.address, options, deadline, nullptr);
  }
  acceptor.run();
  return mesh;
}

}  // namespace braid::transport::tcp
