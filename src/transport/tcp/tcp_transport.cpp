// The TCP transport: who moves the bytes, and when (framing and matching are in
// tcp_connection.cpp, connection setup in tcp_bootstrap.cpp and, when lazy, tcp_lazy.cpp; the
// class is in tcp_transport_impl.hpp).
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
// not yet fully written, or a receive large enough to hold up its sender, of a request whose
// owner may not wait soon (not Request::attended: the communicator's point-to-point, not an
// algorithm's requests, which the algorithm's own waits move; those too where the thread has a
// CPU to spare or other transports' waits do not drive this one, TcpOptions::backgroundAttended).
// Even then it first leaves the work to its owner for kBackgroundGrace, since a blocking caller
// is usually about to wait on it, and it steps aside (the waiter kicks it) as soon as a thread
// waits.
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
#include "transport/tcp/tcp_transport_impl.hpp"

namespace braid::transport::tcp {

namespace {

using State = Request::State;

constexpr int kMaxEvents = 64;
// Longest single sleep in epoll_wait or on the condition variable: waiters recheck at least
// this often.
constexpr int kMaxSleepMs = 50;
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

}  // namespace

std::atomic<std::size_t> socketsOpened{0};

TcpTransport::TcpTransport(int rank, int size, const TcpOptions& options, tcp::Mesh mesh,
                           std::function<void(const Error&)> onFailure,
                           std::size_t backgroundRecvBytes)
    : rank_(rank),
      size_(size),
      spin_(options.spin),
      busyPoll_(options.busyPoll ? options.spin : std::chrono::microseconds(0)),
      backgroundAttended_(options.backgroundAttended),
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
  // Still pending after the attempt on the caller's thread: may need the background thread,
  // unless the caller is about to wait for it (Request::attended) and the thread has no CPU of
  // its own (TcpOptions::backgroundAttended).
  if ((!req.attended || backgroundAttended_) &&
      req.state.load(std::memory_order_relaxed) == State::Pending &&
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

void TcpTransport::finishAlone(Request& req, Error error) {
  if ((req.aux & kAuxBackground) != 0) --backgroundWork_;
  if (&req == sleeperRequest_) kickSleeper_ = true;
  engine_.publishAlone(req, std::move(error));  // the last touch
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

std::string TcpTransport::stallText(const Request& r) const {
  const Connection& c = connections_[static_cast<std::size_t>(r.peer)];
  if (lazy_ && !c.connected() && !c.error()) return connectReason(r.peer);
  return c.stallReason(r);
}

}  // namespace braid::transport::tcp

namespace braid::transport {

using tcp::kBackgroundRecvBytes;
using tcp::socketsOpened;
using tcp::TcpTransport;

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
    // A wait on one stream does not drive the others: their threads move every request, as
    // across the legs of a RoutedTransport (createTransport).
    one.backgroundAttended = true;
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
