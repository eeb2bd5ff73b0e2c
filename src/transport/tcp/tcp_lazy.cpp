// Lazy connection setup of the TCP transport (docs/architecture.md, "When connections are
// made"): the dialer threads, the acceptor thread, and what a waiter is told while its pair is
// not connected yet. The class is in tcp_transport_impl.hpp.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <braid/error.hpp>
#include <chrono>
#include <string>

#include "transport/tcp/socket.hpp"
#include "transport/tcp/tcp_transport_impl.hpp"

namespace braid::transport::tcp {

// ---- lazy connection setup ----
//
// A pair connects when a request to the peer is first posted on either side: the poster's
// dialer threads dial (started on demand, up to kMaxDialers at once, so a slow peer holds up
// only its own pair), the other side's acceptor thread
// (always polling the listener, independent of who waits) takes it. When both dial at once
// the higher rank's dial wins: a rank refuses a lower rank's dial while its own dial to that
// rank is in progress, and always takes a higher rank's, so exactly one connection is made.
// The lower rank, refused, waits for the higher rank's dial (Link::Awaiting).

void TcpTransport::startLazy(Lazy lazy) {
  lazy_ = true;
  addresses_ = std::move(lazy.addresses);
  listener_ = std::move(lazy.listener);
  link_.assign(static_cast<std::size_t>(size_), Link::None);
  link_[static_cast<std::size_t>(rank_)] = Link::Connected;
  lastDialError_.assign(static_cast<std::size_t>(size_), std::string());
  acceptWake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!acceptWake_) throw Error(ErrorCode::Internal, "tcp transport: eventfd: " + errnoText(errno));
  acceptor_ = std::thread([this] { acceptLoop(); });
}

void TcpTransport::stopDials() {
  std::lock_guard<std::mutex> g(dialSocketMu_);
  for (int s : dialSockets_) ::shutdown(s, SHUT_RDWR);
}

void TcpTransport::stopLazy() {
  if (!lazy_) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopSetup_ = true;
    dialCv_.notify_all();
  }
  stopDials();
  if (acceptWake_) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(acceptWake_.get(), &one, sizeof one);
  }
  if (acceptor_.joinable()) acceptor_.join();
  // No dialer is added once stopSetup_ is set (startConnecting checks it under mu_).
  for (std::thread& d : dialers_)
    if (d.joinable()) d.join();
  lazy_ = false;
}

void TcpTransport::startConnecting(int peer) {
  Link& link = link_[static_cast<std::size_t>(peer)];
  if (link != Link::None || engine_.failure() || stopSetup_) return;
  link = Link::Dialing;
  dialQueue_.push_back(peer);
  if (idleDialers_ == 0 && dialers_.size() < kMaxDialers)
    dialers_.emplace_back([this] { dialLoop(); });
  else
    dialCv_.notify_one();
}

std::string TcpTransport::lookupAddress(int peer, std::chrono::milliseconds timeout) {
  const Deadline until = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    try {
      return addresses_->of(
          peer, std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(200)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      if (stopSetup_ || Clock::now() >= until)
        throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank_) + " timed out after " +
                                            std::to_string(timeout.count()) +
                                            " ms waiting for rank " + std::to_string(peer) +
                                            " to publish its address (" + e.detail() + ")");
    }
  }
}

void TcpTransport::attachPeer(int peer, Fd fd, const std::string& address) {
  link_[static_cast<std::size_t>(peer)] = Link::Connected;
  connected_.fetch_add(1, std::memory_order_relaxed);
  socketsOpened.fetch_add(1, std::memory_order_relaxed);
  Connection& c = connections_[static_cast<std::size_t>(peer)];
  c.attach(std::move(fd), "rank " + std::to_string(peer) + " (" + address + ")");
  if (const auto it = untold_.find(peer); it != untold_.end()) {
    for (const UntoldLane& u : it->second) {
      // Still gone here (a lane opened again under the same id is another communicator's).
      if (lanes_.gone(u.lane)) c.sendLaneGone(u.lane, u.aborted);
    }
    untold_.erase(it);
  }
  notifyCompletions();
  wakeBackground();
  kick();  // a driver asleep in epoll_wait picks up the new socket's queued work
}

void TcpTransport::dialLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopSetup_) {
    if (dialQueue_.empty()) {
      ++idleDialers_;
      dialCv_.wait(lk);
      --idleDialers_;
      continue;
    }
    const int peer = dialQueue_.front();
    dialQueue_.pop_front();
    if (link_[static_cast<std::size_t>(peer)] != Link::Dialing) continue;
    lk.unlock();
    Fd fd;
    std::string address = "?";
    std::string refused;
    std::optional<Error> error;
    try {
      address = lookupAddress(peer, options_.connectTimeout);
      tcp::DialHooks hooks;
      hooks.cancelled = [this] { return stopSetup_.load(); };
      int mine = -1;
      hooks.socket = [this, &mine](int s) {
        std::lock_guard<std::mutex> g(dialSocketMu_);
        if (mine >= 0) dialSockets_.erase(mine);
        mine = s;
        if (s < 0) return;
        dialSockets_.insert(s);
        if (stopSetup_) ::shutdown(s, SHUT_RDWR);
      };
      hooks.peerListened = true;
      hooks.refused = &refused;
      fd = tcp::dialRank(rank_, size_, peer, address, options_,
                         Clock::now() + options_.connectTimeout, hooks);
    } catch (const Error& e) {
      error = e;
    } catch (const std::exception& e) {
      error = Error(ErrorCode::Internal, "rank " + std::to_string(rank_) + ": dialing rank " +
                                             std::to_string(peer) + ": " + e.what());
    }
    lk.lock();
    if (stopSetup_ || engine_.failure()) break;
    Link& link = link_[static_cast<std::size_t>(peer)];
    if (link == Link::Connected || link == Link::Accepting) continue;  // its dial won
    if (error) {
      link = Link::Failed;
      connections_[static_cast<std::size_t>(peer)].attach(
          Fd(), "rank " + std::to_string(peer) + " (" + address + ")");
      connections_[static_cast<std::size_t>(peer)].failUnconnected(*error);
      notifyCompletions();
    } else if (fd) {
      attachPeer(peer, std::move(fd), address);
    } else if (!refused.empty()) {
      // A crossing dial: the higher rank's wins, so it will connect here.
      link = Link::Awaiting;
      lastDialError_[static_cast<std::size_t>(peer)] = refused;
    }
  }
}

std::string TcpTransport::acceptDecision(int peer) {
  std::lock_guard<std::mutex> lk(mu_);
  Link& link = link_[static_cast<std::size_t>(peer)];
  if (engine_.failure() || stopSetup_)
    return "the transport of rank " + std::to_string(rank_) + " failed";
  switch (link) {
    case Link::Connected:
    case Link::Accepting:
      return "rank " + std::to_string(rank_) + " is already connected to rank " +
             std::to_string(peer);
    case Link::Failed:
      return "the connection of rank " + std::to_string(rank_) + " to rank " +
             std::to_string(peer) + " failed";
    case Link::Dialing:
      if (peer < rank_)
        return "rank " + std::to_string(rank_) + " dials rank " + std::to_string(peer) +
               " itself (the higher rank's dial wins)";
      break;
    case Link::None:
    case Link::Awaiting:
      break;
  }
  link = Link::Accepting;
  return {};
}

void TcpTransport::acceptTake(int peer, Fd fd) {
  std::string address = "?";
  if (fd) {
    try {  // published before the peer dialed: at once
      address = lookupAddress(peer, std::chrono::milliseconds(1000));
    } catch (const Error&) {
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  Link& link = link_[static_cast<std::size_t>(peer)];
  if (!fd || engine_.failure() || stopSetup_) {
    if (link == Link::Accepting) {
      link = Link::None;
      if (connections_[static_cast<std::size_t>(peer)].hasPending()) startConnecting(peer);
    }
    return;
  }
  attachPeer(peer, std::move(fd), address);
}

void TcpTransport::acceptLoop() {
  try {
    const std::string self = connections_[static_cast<std::size_t>(rank_)].description();
    tcp::Acceptor acceptor(
        rank_, size_, options_, self, listener_.get(),
        [this](int peer) { return acceptDecision(peer); },
        [this](int peer, Fd fd) { acceptTake(peer, std::move(fd)); }, nullptr, Deadline::max());
    acceptor.serve(acceptWake_.get(), stopSetup_);
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lk(mu_);
    failTransport(e);
    notifyCompletions();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lk(mu_);
    failTransport(Error(ErrorCode::Internal,
                        "rank " + std::to_string(rank_) + ": tcp acceptor: " + e.what()));
    notifyCompletions();
  }
  listener_.reset();  // peers that dial from now on are refused: this rank is gone for them
}

std::string TcpTransport::connectReason(int peer) const {
  const std::string p = "rank " + std::to_string(peer);
  switch (link_[static_cast<std::size_t>(peer)]) {
    case Link::Dialing:
      return "this rank's connection to " + p + " is not made yet (" + p +
             " has not answered the dial)";
    case Link::Awaiting:
      return p + " never connected to this rank (it refused this rank's dial: " +
             lastDialError_[static_cast<std::size_t>(peer)] + ")";
    case Link::Accepting:
      return p + " is connecting to this rank (handshake in progress)";
    default:
      return "no connection to " + p + " was made";
  }
}

}  // namespace braid::transport::tcp
