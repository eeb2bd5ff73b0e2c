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
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <braid/error.hpp>
#include <cerrno>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "transport/engine.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/tcp/tcp_bootstrap.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tcp/tcp_streams.hpp"

namespace braid::transport {

namespace {

using tcp::Connection;
using tcp::Fd;
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

 private:
  // CompletionSink (called with mu_ held).
  void finish(Request& req, State state, bool connectionError) override;
  std::string tagText(std::uint64_t tag) const override;
  void mismatchSeen(int peer, std::uint64_t expected, std::uint64_t received) const override {
    noteMismatch(peer, expected, received);
  }
  void connectionFailed(const Error& error) override {
    if (onFailure_) onFailure_(error);
  }

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

  const int rank_;
  const int size_;
  const std::chrono::microseconds spin_;
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
};

TcpTransport::TcpTransport(int rank, int size, const TcpOptions& options, tcp::Mesh mesh,
                           std::function<void(const Error&)> onFailure,
                           std::size_t backgroundRecvBytes)
    : rank_(rank),
      size_(size),
      spin_(options.spin),
      onFailure_(std::move(onFailure)),
      backgroundRecvBytes_(backgroundRecvBytes),
      engine_(rank),
      mu_(engine_.mutex()) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_)
    throw Error(ErrorCode::Internal, "tcp transport: epoll_create1: " + tcp::errnoText(errno));
  wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) throw Error(ErrorCode::Internal, "tcp transport: eventfd: " + tcp::errnoText(errno));
  epoll_event wakeEvent{};
  wakeEvent.events = EPOLLIN;
  wakeEvent.data.u64 = kWakeId;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &wakeEvent) != 0)
    throw Error(ErrorCode::Internal, "tcp transport: epoll_ctl: " + tcp::errnoText(errno));
  tcp::CompletionSink& sink = *this;
  connections_.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    tcp::PeerLink& link = mesh.links[static_cast<std::size_t>(r)];
    if (link.fd) connected_.fetch_add(1, std::memory_order_relaxed);
    connections_.emplace_back(rank, r, "rank " + std::to_string(r) + " (" + link.address + ")",
                              std::move(link.fd), epoll_.get(), sink);
  }
  progress_ = std::thread([this] { progressLoop(); });
}

TcpTransport::~TcpTransport() {
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
  engine_.throwFailure(req, c.error(), c.description());
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
                        "rank " + std::to_string(rank_) + ": epoll_wait: " + tcp::errnoText(err)));
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
      lk, req, deadline, engine::WaitPolicy{spin_, std::chrono::microseconds(0)},
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
        failTransport(engine::timeoutError(rank_, r, c.description(), c.stallReason(r)));
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

}  // namespace

std::unique_ptr<Transport> createTcpTransport(Store& store, int rank, int size,
                                              const TcpOptions& options) {
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
  if (streams == 1) {
    tcp::Mesh mesh = tcp::connectMesh(store, rank, size, options);
    return std::make_unique<TcpTransport>(rank, size, options, std::move(mesh));
  }
  // One mesh per stream, one after the other (every rank sets them up in the same order), all
  // within the one connectTimeout; stream s > 0 publishes under its own key prefix.
  const Deadline deadline = Clock::now() + options.connectTimeout;
  const std::shared_ptr<Store> base(&store, [](Store*) {});  // borrowed for the prefix stores
  auto failures = std::make_shared<tcp::StreamFailures>();
  auto report = [failures](const Error& e) { failures->report(e); };
  std::vector<std::unique_ptr<Transport>> engines;
  for (long long s = 0; s < streams; ++s) {
    TcpOptions one = options;
    one.connectTimeout =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
    tcp::Mesh mesh;
    if (s == 0) {
      mesh = tcp::connectMesh(store, rank, size, one);
    } else {
      PrefixStore prefixed(base, "tcp/stream" + std::to_string(s));
      mesh = tcp::connectMesh(prefixed, rank, size, one);
    }
    // Streams > 0 carry only pieces of large messages: their background threads move every
    // pending piece, so pieces arrive in parallel and a broken stream is noticed at once.
    engines.push_back(std::make_unique<TcpTransport>(rank, size, one, std::move(mesh), report,
                                                     s == 0 ? kBackgroundRecvBytes : 0));
  }
  return tcp::createStripedTransport(rank, size, std::move(engines), options.stripeMinBytes,
                                     std::move(failures));
}

}  // namespace braid::transport
