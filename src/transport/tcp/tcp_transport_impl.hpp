// The TCP transport's class (internal to src/transport/tcp/): tcp_transport.cpp defines
// construction, posting, completion, lanes and the driving of the epoll set; tcp_lazy.cpp the
// lazy connection setup (dialer and acceptor threads). The public entry points are in
// tcp_transport.hpp.
#pragma once

#include <atomic>
#include <braid/error.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/fd.hpp"
#include "transport/engine.hpp"
#include "transport/lane_book.hpp"
#include "transport/tcp/tcp_bootstrap.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace braid::transport::tcp {

// Receives at least this large need the background thread when nobody waits (smaller ones sit
// in the kernel's socket buffer without holding up the sender).
inline constexpr std::size_t kBackgroundRecvBytes = 64 * 1024;

/// Sockets opened or accepted by every TCP transport of this process (tcpSocketsOpened()).
extern std::atomic<std::size_t> socketsOpened;

class TcpTransport final : public Transport, private CompletionSink {
 public:
  using State = Request::State;

  /// `onFailure` (optional) is told of every connection or transport failure, with mu_ held (it
  /// must only record). Pending receives of at least `backgroundRecvBytes` are background work.
  TcpTransport(int rank, int size, const TcpOptions& options, Mesh mesh,
               std::function<void(const Error&)> onFailure = {},
               std::size_t backgroundRecvBytes = kBackgroundRecvBytes);
  /// A lazy transport (TcpOptions::lazyConnect): `mesh` holds no sockets yet; `listener` is
  /// this rank's published listener, `addresses` where the peers' addresses are.
  struct Lazy {
    Fd listener;
    std::shared_ptr<Addresses> addresses;
  };
  TcpTransport(int rank, int size, const TcpOptions& options, Mesh mesh, Lazy lazy,
               std::function<void(const Error&)> onFailure,
               std::size_t backgroundRecvBytes = kBackgroundRecvBytes);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override;
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override;
  bool test(Request& req) override;
  void wait(Request& req, Deadline deadline) override;
  std::string describePeer(int peer) const override;
  void abort(const std::string& why) override;
  std::size_t connectionCount() const override {
    return connected_.load(std::memory_order_relaxed);
  }
  bool carriesLanes() const override { return true; }
  void openLane(std::uint64_t lane, std::vector<int> peers) override;
  void closeLane(std::uint64_t lane) override;
  void abortLane(std::uint64_t lane, const std::string& why) override;
  bool peerLeftLane(std::uint64_t lane, int peer) const override {
    if (peer < 0 || peer >= size_) return false;
    std::lock_guard<std::mutex> lk(mu_);
    return connections_[static_cast<std::size_t>(peer)].peerLaneError(lane) != nullptr;
  }
  // Queues the "lane gone" control frame to each peer of the lane (tcp_connection.hpp).
  void tellLanePeers(std::uint64_t lane, const std::vector<int>& peers, bool aborted);
  void postSendOnLane(std::uint64_t lane, int peer, const void* data, std::size_t bytes,
                      std::uint64_t tag, Request& req) override {
    prepare("postSend", peer, data, bytes, tag, true, req);
    req.lane = lane;
    std::lock_guard<std::mutex> lk(mu_);
    post(req);
  }
  void postRecvOnLane(std::uint64_t lane, int peer, void* data, std::size_t bytes,
                      std::uint64_t tag, Request& req) override {
    prepare("postRecv", peer, data, bytes, tag, false, req);
    req.lane = lane;
    std::lock_guard<std::mutex> lk(mu_);
    post(req);
  }

 private:
  // CompletionSink (called with mu_ held).
  void finish(Request& req, State state, bool connectionError) override;
  void finishAlone(Request& req, Error error) override;
  std::string tagText(std::uint64_t tag) const override;
  void mismatchSeen(int peer, std::uint64_t expected, std::uint64_t received) const override {
    noteMismatch(peer, expected, received);
  }
  void mismatchSeenOnLane(int peer, std::uint64_t expected, std::uint64_t received,
                          std::uint64_t lane) const override {
    noteMismatch(peer, expected, received, lane);
  }
  void connectionFailed(const Error& error) override {
    if (onFailure_) onFailure_(error);
  }
  bool laneClosed(std::uint64_t lane) const override { return lanes_.closed(lane); }

  void prepare(const char* op, int peer, const void* data, std::size_t bytes, std::uint64_t tag,
               bool isSend, Request& req) {
    engine::armRequest(
        req, op, rank_, size_, peer, data, bytes, tag, isSend, true, "",
        [] { return std::string(); }, [this](int p) { return describePeer(p); });
  }
  // Everything below requires mu_.
  void post(Request& req);
  void failTransport(Error error);
  [[noreturn]] void throwFailure(const Request& req) const;
  void drive(std::unique_lock<std::mutex>& lk, int timeoutMs, Request* sleeper);
  void notifyCompletions();
  void wakeBackground();
  void kick() const;
  void leaveWait();
  void progressLoop();

  // ---- lazy connection setup (docs/architecture.md, "When connections are made") ----
  enum class Link : std::uint8_t { None, Dialing, Awaiting, Accepting, Connected, Failed };
  void startLazy(Lazy lazy);
  void stopLazy();
  void startConnecting(int peer);                                          // mu_ held
  void attachPeer(int peer, Fd fd, const std::string& address);            // mu_ held
  std::string lookupAddress(int peer, std::chrono::milliseconds timeout);  // mu_ not held
  std::string connectReason(int peer) const;                               // mu_ held
  std::string stallText(const Request& r) const;                           // mu_ held
  std::string acceptDecision(int peer);                                    // takes mu_
  void acceptTake(int peer, Fd fd);                                        // takes mu_
  void dialLoop();
  void acceptLoop();

  const int rank_;
  const int size_;
  const std::chrono::microseconds spin_;
  const std::chrono::microseconds busyPoll_;  // spin_ when TcpOptions::busyPoll, else 0
  const bool backgroundAttended_;             // TcpOptions::backgroundAttended
  const std::function<void(const Error&)> onFailure_;
  const std::size_t backgroundRecvBytes_;
  engine::Engine engine_;
  std::mutex& mu_;  // engine_.mutex()
  Fd epoll_;
  Fd wake_;
  std::vector<Connection> connections_;  // indexed by rank; this rank's has no socket

  std::condition_variable waitCv_;        // waiters that are not driving
  std::condition_variable backgroundCv_;  // the background thread
  bool driving_ = false;
  bool backgroundDriving_ = false;
  bool backgroundIdle_ = false;
  bool stopping_ = false;
  int waiters_ = 0;
  int cvWaiters_ = 0;
  std::size_t backgroundWork_ = 0;     // pending requests counted with kAuxBackground
  Request* sleeperRequest_ = nullptr;  // what the driver sleeping in epoll_wait waits for
  bool kickSleeper_ = false;
  std::thread progress_;
  std::atomic<std::size_t> connected_{0};  // sockets opened or accepted

  LaneBook lanes_;  // requires mu_
  // Lazy: lanes closed or aborted here while the pair had no connection yet, per peer; the
  // peer is told once it connects.
  struct UntoldLane {
    std::uint64_t lane;
    bool aborted;
  };
  std::unordered_map<int, std::vector<UntoldLane>> untold_;

  // Lazy only. link_, dialQueue_, lastDialError_, dialers_ and idleDialers_ require mu_.
  bool lazy_ = false;
  TcpOptions options_;
  std::shared_ptr<Addresses> addresses_;
  Fd listener_;
  Fd acceptWake_;  // eventfd: wakes the acceptor thread to stop
  std::vector<Link> link_;
  std::vector<std::string> lastDialError_;
  std::deque<int> dialQueue_;
  std::condition_variable dialCv_;
  std::atomic<bool> stopSetup_{false};
  std::mutex dialSocketMu_;
  std::unordered_set<int> dialSockets_;  // the dials in progress (shut down to stop them)
  std::thread acceptor_;
  // Dialer threads, started on demand: one more when a dial is queued and none is idle, up to
  // kMaxDialers, so a peer that is slow to answer holds up only its own pair.
  static constexpr std::size_t kMaxDialers = 4;
  std::vector<std::thread> dialers_;
  int idleDialers_ = 0;
  void stopDials();  // dialSocketMu_ not held
};

}  // namespace braid::transport::tcp
