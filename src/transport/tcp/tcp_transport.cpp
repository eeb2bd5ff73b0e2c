// The TCP transport: who moves the bytes, and when (framing and matching are in
// tcp_connection.cpp, connection setup in tcp_bootstrap.cpp).
//
// One mutex guards all state. The epoll set is driven by one thread at a time, the "driver"
// (driving_): a waiter, test(), or the background thread. A waiter spins for `spin` polling
// with the mutex held, then sleeps in epoll_wait WITHOUT the mutex, so posts and abort() are
// never stuck behind a sleep. Whatever must wake the sleeping driver (the completion of the very
// request it sleeps on, abort, a waiter taking over from the background thread, destruction)
// writes the wake eventfd, which sits in the epoll set. Waiters that are not driving sleep on a
// condition variable, notified on every completion and whenever the driver leaves.
//
// The background thread stays asleep unless work is outstanding that nobody waits for: a send
// not yet fully written, or a receive large enough to hold up its sender. Even then it first
// leaves the work to its owner for kBackgroundGrace, since a blocking caller is usually about to
// wait on it, and it steps aside (the waiter kicks it) as soon as a thread waits.
#include "transport/tcp/tcp_transport.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <braid/error.hpp>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "transport/engine.hpp"
#include "transport/lane_book.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/tcp/tcp_bootstrap.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tcp/tcp_streams.hpp"

namespace braid::transport {

namespace {

using tcp::Connection;
using State = Request::State;

constexpr int kMaxEvents = 64;
// Longest single sleep in epoll_wait or on the condition variable: waiters recheck at least
// this often.
constexpr int kMaxSleepMs = 50;
// Receives at least this large need the background thread when nobody waits (smaller ones sit
// in the kernel's socket buffer without holding up the sender).
constexpr std::size_t kBackgroundRecvBytes = 64 * 1024;
constexpr auto kBackgroundGrace = std::chrono::microseconds(200);
// The background thread's epoll sleep: whatever needs it sooner (a waiter taking over, abort,
// destruction) writes the wake eventfd.
constexpr int kBackgroundSleepMs = 1000;
constexpr std::uint64_t kWakeId = ~std::uint64_t{0};

// Request::aux while pending: counted in backgroundWork_ (once finished, the engine's).
constexpr std::size_t kAuxBackground = 1;

std::atomic<std::size_t> socketsOpened{0};  // by every TCP transport of this process

// Holds the right to drive the epoll set (TcpTransport::driving_) for one round.
class DrivingToken {
 public:
  explicit DrivingToken(bool& driving) : driving_(driving) { driving_ = true; }
  ~DrivingToken() { driving_ = false; }
  DrivingToken(const DrivingToken&) = delete;
  DrivingToken& operator=(const DrivingToken&) = delete;

 private:
  bool& driving_;
};

class TcpTransport final : public Transport, private tcp::CompletionSink {
 public:
  /// `onFailure` (optional) is told of every connection or transport failure, with mu_ held (it
  /// must only record). Pending receives of at least `backgroundRecvBytes` are background work.
  TcpTransport(int rank, int size, const TcpOptions& options, tcp::Mesh mesh,
               std::function<void(const Error&)> onFailure = {},
               std::size_t backgroundRecvBytes = kBackgroundRecvBytes);
  /// A lazy transport (TcpOptions::lazyConnect): `mesh` holds no sockets yet; `listener` is
  /// this rank's published listener, `addresses` where the peers' addresses are.
  struct Lazy {
    Fd listener;
    std::shared_ptr<tcp::Addresses> addresses;
  };
  TcpTransport(int rank, int size, const TcpOptions& options, tcp::Mesh mesh, Lazy lazy,
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
  std::shared_ptr<tcp::Addresses> addresses_;
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

TcpTransport::TcpTransport(int rank, int size, const TcpOptions& options, tcp::Mesh mesh,
                           std::function<void(const Error&)> onFailure,
                           std::size_t backgroundRecvBytes)
    : rank_(rank),
      size_(size),
      spin_(options.spin),
      busyPoll_(options.busyPoll ? options.spin : std::chrono::microseconds(0)),
      onFailure_(std::move(onFailure)),
      backgroundRecvBytes_(backgroundRecvBytes),
      engine_(rank),
      mu_(engine_.mutex()) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_)
    throw Error(ErrorCode::Internal, "tcp transport: epoll_create1: " + errnoText(errno));
  wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) throw Error(ErrorCode::Internal, "tcp transport: eventfd: " + errnoText(errno));
  epoll_event wakeEvent{};
  wakeEvent.events = EPOLLIN;
  wakeEvent.data.u64 = kWakeId;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &wakeEvent) != 0)
    throw Error(ErrorCode::Internal, "tcp transport: epoll_ctl: " + errnoText(errno));
  tcp::CompletionSink& sink = *this;
  connections_.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    tcp::PeerLink& link = mesh.links[static_cast<std::size_t>(r)];
    if (link.fd) {
      connected_.fetch_add(1, std::memory_order_relaxed);
      socketsOpened.fetch_add(1, std::memory_order_relaxed);
    }
    connections_.emplace_back(rank, r,
                              link.address.empty()
                                  ? "rank " + std::to_string(r)
                                  : "rank " + std::to_string(r) + " (" + link.address + ")",
                              std::move(link.fd), epoll_.get(), sink);
  }
  progress_ = std::thread([this] { progressLoop(); });
}

TcpTransport::TcpTransport(int rank, int size, const TcpOptions& options, tcp::Mesh mesh, Lazy lazy,
                           std::function<void(const Error&)> onFailure,
                           std::size_t backgroundRecvBytes)
    : TcpTransport(rank, size, options, std::move(mesh), std::move(onFailure),
                   backgroundRecvBytes) {
  options_ = options;
  try {
    startLazy(std::move(lazy));
  } catch (...) {
    stopLazy();
    throw;  // the delegated constructor's destructor stops the progress thread
  }
}

TcpTransport::~TcpTransport() {
  stopLazy();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    backgroundCv_.notify_all();
  }
  kick();
  progress_.join();
  // The sockets close with connections_: peers still running read EOF and report PeerLost.
}

std::string TcpTransport::describePeer(int peer) const {
  if (peer < 0 || peer >= size_) return "rank " + std::to_string(peer);
  return connections_[static_cast<std::size_t>(peer)].description();
}

std::string TcpTransport::tagText(std::uint64_t tag) const {
  return describeTag(tag);
}

// ---- posting ----

void TcpTransport::post(Request& req) {
  if (req.lane != 0) {
    if (lanes_.aborted(req.lane) != nullptr) {
      finish(req, State::Failed, false);
      notifyCompletions();
      return;
    }
  }
  if (lazy_) startConnecting(req.peer);
  engine_.post(req, connections_[static_cast<std::size_t>(req.peer)], *this);
  // Still pending after the attempt on the caller's thread: may need the background thread.
  if (req.state.load(std::memory_order_relaxed) == State::Pending &&
      (req.isSend || req.bytes >= backgroundRecvBytes_)) {
    req.aux |= kAuxBackground;
    ++backgroundWork_;
    wakeBackground();
  }
  notifyCompletions();
}

void TcpTransport::postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                            Request& req) {
  prepare("postSend", peer, data, bytes, tag, true, req);
  std::lock_guard<std::mutex> lk(mu_);
  post(req);
}

void TcpTransport::postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                            Request& req) {
  prepare("postRecv", peer, data, bytes, tag, false, req);
  std::lock_guard<std::mutex> lk(mu_);
  post(req);
}

// ---- completion and failure ----

void TcpTransport::finish(Request& req, State state, bool connectionError) {
  if ((req.aux & kAuxBackground) != 0) --backgroundWork_;
  if (&req == sleeperRequest_) kickSleeper_ = true;
  engine_.publish(req, state, connectionError);  // the last touch
}

void TcpTransport::notifyCompletions() {
  if (!engine_.takeCompleted()) return;
  if (cvWaiters_ > 0) waitCv_.notify_all();
  if (kickSleeper_) {
    kickSleeper_ = false;
    kick();
  }
}

void TcpTransport::kick() const {
  const std::uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the wake-up is pending anyway.
  [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void TcpTransport::failTransport(Error error) {
  if (!engine_.fail(std::move(error))) return;
  // Closing every socket also tells the peers: they see this rank as lost instead of hanging.
  for (Connection& c : connections_) c.abandon();
  if (lazy_) {
    // No more connections: the listener closes (a peer that dials now is refused and sees
    // this rank lost) and a dial in progress stops.
    stopSetup_ = true;
    dialCv_.notify_all();
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(acceptWake_.get(), &one, sizeof one);
    stopDials();
  }
  if (onFailure_) onFailure_(*engine_.failure());
  kickSleeper_ = true;
  backgroundCv_.notify_all();
}

void TcpTransport::abort(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  failTransport(Error(ErrorCode::Aborted, why));
  notifyCompletions();
}

void TcpTransport::throwFailure(const Request& req) const {
  const Connection& c = connections_[static_cast<std::size_t>(req.peer)];
  if (req.lane != 0 && engine::Engine::failedByTransport(req) && !engine_.failure()) {
    if (const Error* gone = c.peerLaneError(req.lane)) throw *gone;       // the peer left the lane
    if (const Error* aborted = lanes_.aborted(req.lane)) throw *aborted;  // aborted here
  }
  engine_.throwFailure(req, c.error(), c.description());
}

// ---- lanes ----

void TcpTransport::openLane(std::uint64_t lane, std::vector<int> peers) {
  std::lock_guard<std::mutex> lk(mu_);
  lanes_.open(lane, std::move(peers), rank_, size_, "this rank's connections");
}

void TcpTransport::tellLanePeers(std::uint64_t lane, const std::vector<int>& peers, bool aborted) {
  for (int p : peers) {
    if (p < 0 || p >= size_ || p == rank_) continue;
    Connection& c = connections_[static_cast<std::size_t>(p)];
    if (c.connected())
      c.sendLaneGone(lane, aborted);
    else if (lazy_)  // told when the pair connects (a receive of the lane from here dials)
      untold_[p].push_back({lane, aborted});
  }
}

void TcpTransport::closeLane(std::uint64_t lane) {
  std::lock_guard<std::mutex> lk(mu_);
  const std::vector<int> peers = lanes_.close(lane);
  // Nothing of the lane may stay queued: its requests belong to a communicator that is going
  // away. A frame of it half moved cannot be finished without them: that connection closes.
  // Otherwise the peer is told, so that what it still waits for on the lane fails at once.
  for (Connection& c : connections_) {
    if (!c.failLane(lane))
      c.breakOff(Error(ErrorCode::PeerLost, "rank " + std::to_string(rank_) +
                                                " closed its connection to " + c.description() +
                                                ": a communicator sharing it was destroyed in "
                                                "the middle of a message"));
    c.dropLane(lane);
  }
  tellLanePeers(lane, peers, false);
  kickSleeper_ = true;
  engine_.markCompleted();
  notifyCompletions();
}

void TcpTransport::abortLane(std::uint64_t lane, const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (lanes_.onlyOpen(lane)) {
    // No other communicator uses these connections: close them, as abort() does, so that the
    // peers see this rank lost at once.
    failTransport(Error(ErrorCode::Aborted, why));
    notifyCompletions();
    return;
  }
  const std::vector<int>& peers = lanes_.abort(lane, Error(ErrorCode::Aborted, why));
  for (Connection& c : connections_)
    if (!c.failLane(lane))
      c.breakOff(Error(ErrorCode::PeerLost, "rank " + std::to_string(rank_) +
                                                " closed its connection to " + c.description() +
                                                ": a communicator sharing it was aborted (" + why +
                                                ") in the middle of a message"));
  tellLanePeers(lane, peers, true);  // the peers' operations on the lane fail at once
  kickSleeper_ = true;
  engine_.markCompleted();
  notifyCompletions();
}

// ---- driving ----

// One round of epoll: timeout 0 polls with mu_ held; otherwise sleeps without it. The caller
// holds driving_.
void TcpTransport::drive(std::unique_lock<std::mutex>& lk, int timeoutMs, Request* sleeper) {
  std::array<epoll_event, kMaxEvents> events;
  int n;
  int err = 0;
  if (timeoutMs == 0) {
    n = ::epoll_wait(epoll_.get(), events.data(), kMaxEvents, 0);
    err = errno;
  } else {
    sleeperRequest_ = sleeper;
    lk.unlock();
    n = ::epoll_wait(epoll_.get(), events.data(), kMaxEvents, timeoutMs);
    err = errno;
    lk.lock();
    sleeperRequest_ = nullptr;
    kickSleeper_ = false;
  }
  if (n < 0) {
    if (err == EINTR) return;
    failTransport(Error(ErrorCode::Internal,
                        "rank " + std::to_string(rank_) + ": epoll_wait: " + errnoText(err)));
    return;
  }
  for (int i = 0; i < n; ++i) {
    if (events[static_cast<std::size_t>(i)].data.u64 == kWakeId) {
      std::uint64_t value;
      [[maybe_unused]] const ssize_t r = ::read(wake_.get(), &value, sizeof value);
      continue;
    }
    connections_[events[static_cast<std::size_t>(i)].data.u64].handleEvents(
        events[static_cast<std::size_t>(i)].events);
  }
}

bool TcpTransport::test(Request& req) {
  State s = req.state.load(std::memory_order_acquire);
  if (s == State::Done || s == State::Idle) return true;
  std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
  if (lk.owns_lock() && s == State::Pending && !driving_) {
    {
      const DrivingToken token(driving_);
      drive(lk, 0, nullptr);
    }
    notifyCompletions();
    wakeBackground();
  }
  s = req.state.load(std::memory_order_acquire);
  if (s == State::Failed) {
    if (!lk.owns_lock()) lk.lock();
    throwFailure(req);
  }
  return s == State::Done;
}

void TcpTransport::leaveWait() {
  --waiters_;
  // Hand the driving over: to another waiter, or to the background thread for leftover work.
  if (cvWaiters_ > 0) waitCv_.notify_all();
  wakeBackground();
}

void TcpTransport::wakeBackground() {
  if (backgroundIdle_ && backgroundWork_ > 0 && waiters_ == 0 && !engine_.failure())
    backgroundCv_.notify_one();
}

void TcpTransport::wait(Request& req, Deadline deadline) {
  State s = req.state.load(std::memory_order_acquire);
  if (s == State::Done || s == State::Idle) return;
  std::unique_lock<std::mutex> lk(mu_);
  ++waiters_;
  struct Leave {
    TcpTransport* self;
    ~Leave() { self->leaveWait(); }
  } leave{this};
  engine::waitLoop(
      lk, req, deadline, engine::WaitPolicy{spin_, busyPoll_},
      [&] {  // poll
        if (!driving_) {
          {
            const DrivingToken token(driving_);
            drive(lk, 0, nullptr);
          }
          notifyCompletions();
        } else if (backgroundDriving_) {
          kick();  // take over from the background thread
        }
      },
      [&](Deadline until) {  // sleep: in epoll_wait when nobody drives, else until notified
        if (!driving_) {
          {
            const DrivingToken token(driving_);
            drive(lk, std::max(1, tcp::millisecondsUntil(until, kMaxSleepMs)), &req);
          }
          notifyCompletions();
          return;
        }
        if (backgroundDriving_) kick();
        ++cvWaiters_;
        waitCv_.wait_until(lk,
                           std::min(until, Clock::now() + std::chrono::milliseconds(kMaxSleepMs)));
        --cvWaiters_;
      },
      [&](const Request& r) { throwFailure(r); },
      [&](const Request& r) {
        const Connection& c = connections_[static_cast<std::size_t>(r.peer)];
        // The stream may stop mid-frame now, so nothing later on this transport can be trusted.
        failTransport(engine::timeoutError(rank_, r, c.description(), stallText(r)));
        notifyCompletions();
        throwFailure(r);
      });
}

void TcpTransport::progressLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  bool graceGiven = false;
  while (!stopping_) {
    if (backgroundWork_ == 0 || waiters_ > 0 || engine_.failure()) {
      graceGiven = false;
      backgroundIdle_ = true;
      backgroundCv_.wait(lk);
      backgroundIdle_ = false;
      continue;
    }
    if (!graceGiven || driving_) {
      // Leave fresh work to its owner for a moment (a blocking caller is about to wait on it),
      // then look again from the top.
      graceGiven = true;
      backgroundCv_.wait_for(lk, kBackgroundGrace);
      continue;
    }
    driving_ = true;
    backgroundDriving_ = true;
    try {
      drive(lk, kBackgroundSleepMs, nullptr);
    } catch (const std::exception& e) {  // never let an exception end the thread
      failTransport(Error(ErrorCode::Internal,
                          "rank " + std::to_string(rank_) + ": tcp progress thread: " + e.what()));
    }
    backgroundDriving_ = false;
    driving_ = false;
    notifyCompletions();
    if (cvWaiters_ > 0) waitCv_.notify_all();
  }
}

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

std::string TcpTransport::stallText(const Request& r) const {
  const Connection& c = connections_[static_cast<std::size_t>(r.peer)];
  if (lazy_ && !c.connected() && !c.error()) return connectReason(r.peer);
  return c.stallReason(r);
}

}  // namespace

std::size_t tcpSocketsOpened() noexcept {
  return socketsOpened.load(std::memory_order_relaxed);
}

namespace {

long long streamCount(int rank, const TcpOptions& options) {
  const long long streams = static_cast<long long>(options.socketThreads) *
                            static_cast<long long>(options.socketsPerThread);
  if (options.socketThreads < 1 || options.socketsPerThread < 1 || streams > tcp::kMaxStreams)
    throw Error(ErrorCode::InvalidArgument,
                "createTcpTransport: rank " + std::to_string(rank) +
                    ": BRAID_SOCKET_NTHREADS x BRAID_NSOCKS_PERTHREAD = " +
                    std::to_string(options.socketThreads) + " x " +
                    std::to_string(options.socketsPerThread) +
                    " sockets per peer; each must be >= 1 and the product at most " +
                    std::to_string(tcp::kMaxStreams));
  if (options.stripeMinBytes == 0)
    throw Error(ErrorCode::InvalidArgument, "createTcpTransport: rank " + std::to_string(rank) +
                                                ": BRAID_SOCKET_STRIPE_MIN must be > 0");
  return streams;
}

// One stream's setup: this rank's listener and where the peers' listeners are.
struct StreamSetup {
  tcp::Listener listener;
  std::shared_ptr<tcp::Addresses> peers;
};

// Builds the transport from every stream's listener and address source: eager connects each
// stream's mesh in turn (every rank in the same order, all within one connectTimeout), lazy
// only keeps the listeners; more than one stream is striped (tcp_streams.hpp).
std::unique_ptr<Transport> build(int rank, int size, const TcpOptions& options,
                                 std::vector<StreamSetup> setups) {
  // One stream's transport: lazy keeps the listener, eager connects the mesh now.
  auto stream = [&](StreamSetup& setup, const TcpOptions& o,
                    std::function<void(const Error&)> onFailure,
                    std::size_t background) -> std::unique_ptr<Transport> {
    if (o.lazyConnect) {
      tcp::Mesh mesh;
      mesh.links.resize(static_cast<std::size_t>(std::max(size, 0)));
      mesh.links[static_cast<std::size_t>(rank)].address = setup.listener.address;
      TcpTransport::Lazy lazy{std::move(setup.listener.fd), std::move(setup.peers)};
      return std::make_unique<TcpTransport>(rank, size, o, std::move(mesh), std::move(lazy),
                                            std::move(onFailure), background);
    }
    tcp::Mesh mesh = tcp::connectMesh(std::move(setup.listener), *setup.peers, rank, size, o);
    return std::make_unique<TcpTransport>(rank, size, o, std::move(mesh), std::move(onFailure),
                                          background);
  };
  if (setups.size() == 1) return stream(setups.front(), options, nullptr, kBackgroundRecvBytes);
  const Deadline deadline = Clock::now() + options.connectTimeout;
  auto failures = std::make_shared<tcp::StreamFailures>();
  auto report = [failures](const Error& e) { failures->report(e); };
  std::vector<std::unique_ptr<Transport>> engines;
  for (std::size_t s = 0; s < setups.size(); ++s) {
    TcpOptions one = options;
    // The other streams' progress threads move their pieces while the caller polls: they need
    // CPUs too, so the caller yields between polls.
    one.busyPoll = false;
    one.connectTimeout =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
    // Streams > 0 carry only pieces of large messages: their background threads move every
    // pending piece, so pieces arrive in parallel and a broken stream is noticed at once.
    engines.push_back(stream(setups[s], one, report, s == 0 ? kBackgroundRecvBytes : 0));
  }
  return tcp::createStripedTransport(rank, size, std::move(engines), options.stripeMinBytes,
                                     std::move(failures));
}

}  // namespace

struct TcpListening::Impl {
  std::vector<tcp::Listener> streams;
};

TcpListening::TcpListening() : impl_(std::make_unique<Impl>()) {}
TcpListening::~TcpListening() = default;

std::string TcpListening::entry() const {
  std::string out;
  for (const tcp::Listener& l : impl_->streams) out += (out.empty() ? "" : " ") + l.address;
  return out;
}

std::unique_ptr<TcpListening> listenTcp(int rank, int size, const TcpOptions& options) {
  const long long streams = streamCount(rank, options);
  auto out = std::unique_ptr<TcpListening>(new TcpListening());
  for (long long s = 0; s < streams; ++s)
    out->impl_->streams.push_back(tcp::listen(rank, size, options));
  return out;
}

std::unique_ptr<Transport> createTcpTransport(std::unique_ptr<TcpListening> listening,
                                              std::vector<std::string> entries, int rank, int size,
                                              const TcpOptions& options) {
  const long long streams = streamCount(rank, options);
  if (!listening || listening->impl_->streams.size() != static_cast<std::size_t>(streams) ||
      entries.size() != static_cast<std::size_t>(size))
    throw Error(ErrorCode::InvalidArgument, "createTcpTransport: rank " + std::to_string(rank) +
                                                ": " + std::to_string(entries.size()) +
                                                " address entries for " + std::to_string(size) +
                                                " ranks, or listeners of another stream count");
  auto table = std::make_shared<const std::vector<std::string>>(std::move(entries));
  std::vector<StreamSetup> setups;
  for (long long s = 0; s < streams; ++s)
    setups.push_back({std::move(listening->impl_->streams[static_cast<std::size_t>(s)]),
                      tcp::addressesInTable(table, static_cast<int>(s))});
  return build(rank, size, options, std::move(setups));
}

std::unique_ptr<Transport> createTcpTransport(Store& store, int rank, int size,
                                              const TcpOptions& options) {
  const long long streams = streamCount(rank, options);
  const std::shared_ptr<Store> base(&store, [](Store*) {});  // borrowed for the prefix stores
  std::vector<StreamSetup> setups;
  for (long long s = 0; s < streams; ++s) {
    // Stream s > 0 publishes under its own key prefix.
    std::shared_ptr<Store> where = base;
    if (s > 0) where = std::make_shared<PrefixStore>(base, "tcp/stream" + std::to_string(s));
    tcp::Listener listener = tcp::listen(rank, size, options);
    where->setString(tcp::addressKey(rank), listener.address);
    setups.push_back({std::move(listener), tcp::addressesInStore(std::move(where))});
  }
  return build(rank, size, options, std::move(setups));
}

}  // namespace braid::transport
