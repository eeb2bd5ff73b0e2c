// Several TCP streams per peer: see tcp_streams.hpp.
//
// A striped message's pieces are requests owned by this transport (a Stripe, kept for reuse so
// that steady traffic allocates nothing), found from the caller's request under mu_; the
// caller's request is then only a handle whose state this transport publishes once every piece
// completed (or one failed). Small messages pass the caller's request straight to stream 0.
#include "transport/tcp/tcp_streams.hpp"

#include <algorithm>
#include <array>
#include <braid/error.hpp>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>

#include "transport/engine.hpp"

namespace braid::transport::tcp {

namespace {

using State = Request::State;

struct Piece {
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

/// Piece i of `bytes` cut into k: the first bytes % k pieces one byte longer.
Piece pieceOf(std::size_t bytes, int k, int i) {
  const auto uk = static_cast<std::size_t>(k);
  const auto ui = static_cast<std::size_t>(i);
  const std::size_t base = bytes / uk;
  const std::size_t rem = bytes % uk;
  return {ui * base + std::min(ui, rem), base + (ui < rem ? 1 : 0)};
}

class StripedTransport final : public Transport {
 public:
  StripedTransport(int rank, int size, std::vector<std::unique_ptr<Transport>> streams,
                   std::size_t stripeMinBytes, std::shared_ptr<StreamFailures> failures)
      : rank_(rank),
        size_(size),
        stripeMin_(stripeMinBytes),
        failures_(std::move(failures)),
        streams_(std::move(streams)) {
    const int k = static_cast<int>(streams_.size());
    if (k < 2 || k > kMaxStreams || stripeMin_ == 0 || failures_ == nullptr)
      throw Error(ErrorCode::InvalidArgument,
                  "striped transport: rank " + std::to_string(rank) + ": " + std::to_string(k) +
                      " streams (2.." + std::to_string(kMaxStreams) +
                      " allowed), stripe threshold " + std::to_string(stripeMin_) +
                      " bytes (> 0 required)");
    for (auto& s : streams_) {
      if (s == nullptr || s->rank() != rank || s->size() != size)
        throw Error(ErrorCode::InvalidArgument, "striped transport: rank " + std::to_string(rank) +
                                                    ": every stream must be a transport of the "
                                                    "same rank and size");
      // Errors of a stream name operations and report mismatches the way this one was told to.
      s->setTagDescriber([this](std::uint64_t tag) { return describeTag(tag); });
      s->setMismatchObserver([this](int peer, std::uint64_t expected, std::uint64_t received) {
        noteMismatch(peer, expected, received);
      });
    }
    watcher_ = std::thread([this] {
      if (const auto error = failures_->waitFirst()) abortStreams(error->what());
    });
  }
  ~StripedTransport() override {
    failures_->stop();
    watcher_.join();
    // Streams next: their threads and sockets stop before the pieces they may point to go.
    streams_.clear();
  }
  StripedTransport(const StripedTransport&) = delete;
  StripedTransport& operator=(const StripedTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override {
    post("postSend", true, 0, peer, const_cast<void*>(data), bytes, tag, req);
  }
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override {
    post("postRecv", false, 0, peer, data, bytes, tag, req);
  }
  // Lanes: every stream carries every lane; a lane's abort aborts it on every stream.
  bool carriesLanes() const override { return true; }
  void openLane(std::uint64_t lane, std::vector<int> peers) override {
    for (auto& s : streams_) s->openLane(lane, peers);
    for (auto& s : streams_)
      s->setLaneMismatchObserver(
          lane, [this, lane](int peer, std::uint64_t expected, std::uint64_t received) {
            noteMismatch(peer, expected, received, lane);
          });
  }
  void closeLane(std::uint64_t lane) override {
    for (auto& s : streams_) s->setLaneMismatchObserver(lane, {});
    for (auto& s : streams_) s->closeLane(lane);
    std::lock_guard<std::mutex> lk(mu_);
    abortedLanes_.erase(lane);
  }
  void abortLane(std::uint64_t lane, const std::string& why) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      abortedLanes_.insert(lane);
    }
    for (auto& s : streams_) s->abortLane(lane, why);
  }
  bool peerLeftLane(std::uint64_t lane, int peer) const override {
    for (const auto& s : streams_)
      if (s->peerLeftLane(lane, peer)) return true;
    return false;
  }
  void postSendOnLane(std::uint64_t lane, int peer, const void* data, std::size_t bytes,
                      std::uint64_t tag, Request& req) override {
    post("postSend", true, lane, peer, const_cast<void*>(data), bytes, tag, req);
  }
  void postRecvOnLane(std::uint64_t lane, int peer, void* data, std::size_t bytes,
                      std::uint64_t tag, Request& req) override {
    post("postRecv", false, lane, peer, data, bytes, tag, req);
  }

  bool test(Request& req) override {
    const State s = req.state.load(std::memory_order_acquire);
    if (s == State::Idle || s == State::Done) return true;
    Stripe* stripe = find(req);
    if (stripe == nullptr) return guarded(req, [&] { return streams_[0]->test(req); });
    bool all = true;
    for (std::size_t i = 0; i < streams_.size(); ++i)
      all = guarded(req, [&] { return streams_[i]->test(stripe->parts[i]); }) && all;
    if (all) complete(req);
    return all;
  }

  void wait(Request& req, Deadline deadline) override {
    const State s = req.state.load(std::memory_order_acquire);
    if (s == State::Idle || s == State::Done) return;
    Stripe* stripe = find(req);
    if (stripe == nullptr) {
      guarded(req, [&] {
        streams_[0]->wait(req, deadline);
        return true;
      });
      return;
    }
    for (std::size_t i = 0; i < streams_.size(); ++i)
      guarded(req, [&] {
        streams_[i]->wait(stripe->parts[i], deadline);
        return true;
      });
    complete(req);
  }

  std::string describePeer(int peer) const override { return streams_[0]->describePeer(peer); }

  void abort(const std::string& why) override { abortStreams(why); }
  std::size_t connectionCount() const override {
    std::size_t n = 0;
    for (const auto& s : streams_) n += s->connectionCount();
    return n;
  }

 private:
  struct Stripe {
    const Request* owner = nullptr;  // the caller's request; nullptr: free for reuse
    std::array<Request, kMaxStreams> parts;
  };

  void post(const char* op, bool isSend, std::uint64_t lane, int peer, void* data,
            std::size_t bytes, std::uint64_t tag, Request& req) {
    if (bytes < stripeMin_) {
      forget(req);  // a stale stripe of an abandoned request at this address
      if (isSend)
        streams_[0]->postSendOnLane(lane, peer, data, bytes, tag, req);
      else
        streams_[0]->postRecvOnLane(lane, peer, data, bytes, tag, req);
      return;
    }
    // Checked here, before any piece is posted, so that a bad call leaves nothing in flight.
    engine::checkPost(
        req, op, rank_, size_, peer, data, bytes, true, "", [] { return std::string(); },
        [this](int p) { return describePeer(p); });
    Stripe* stripe = nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stripe = findLocked(req);  // a stale stripe of an abandoned request at this address
      if (stripe == nullptr) {
        for (auto& st : stripes_)
          if (st->owner == nullptr) {
            stripe = st.get();
            break;
          }
        if (stripe == nullptr) stripe = stripes_.emplace_back(std::make_unique<Stripe>()).get();
        stripe->owner = &req;
        ++active_;
      }
    }
    engine::arm(req, isSend, peer, data, bytes, tag);
    req.lane = lane;
    const int k = static_cast<int>(streams_.size());
    auto* bytesPtr = static_cast<std::uint8_t*>(data);
    for (int i = 0; i < k; ++i) {
      const Piece piece = pieceOf(bytes, k, i);
      Request& part = stripe->parts[static_cast<std::size_t>(i)];
      Transport& stream = *streams_[static_cast<std::size_t>(i)];
      if (isSend)
        stream.postSendOnLane(lane, peer, bytesPtr + piece.offset, piece.bytes, tag, part);
      else
        stream.postRecvOnLane(lane, peer, bytesPtr + piece.offset, piece.bytes, tag, part);
    }
  }

  Stripe* find(const Request& req) {
    std::lock_guard<std::mutex> lk(mu_);
    return findLocked(req);
  }

  Stripe* findLocked(const Request& req) {
    if (active_ == 0) return nullptr;
    for (auto& st : stripes_)
      if (st->owner == &req) return st.get();
    return nullptr;
  }

  // The stripe of `req` (if any) becomes free for the next striped message.
  void forget(const Request& req) {
    std::lock_guard<std::mutex> lk(mu_);
    if (Stripe* st = findLocked(req)) {
      st->owner = nullptr;
      --active_;
    }
  }

  // Every piece completed: the caller's request is done and reusable.
  void complete(Request& req) {
    forget(req);
    req.state.store(State::Done, std::memory_order_release);
  }

  // Runs one stream call for `req`; if it throws, the whole transport fails (every stream
  // aborted with the error's text, so no piece stays in flight and the peers see this rank lost
  // on every stream), `req` is published Failed and the error rethrown.
  // The error thrown is the first failure of any stream (a stream aborted because another one
  // failed names the original failure, e.g. PeerLost, not Aborted).
  template <typename Fn>
  bool guarded(Request& req, Fn&& fn) {
    try {
      return fn();
    } catch (const Error& e) {
      if (req.lane != 0 &&
          ((e.code() == ErrorCode::Aborted && laneAborted(req.lane)) ||
           (e.code() == ErrorCode::PeerLost && peerLeftLane(req.lane, req.peer)))) {
        // This lane's abort, or the peer's communicator on the lane gone: this lane only, the
        // streams and the other lanes go on. Every stream has failed the lane's pieces before
        // the stripe is reused (the lane is aborted here: its communicator cannot go on).
        {
          std::lock_guard<std::mutex> lk(mu_);
          abortedLanes_.insert(req.lane);
        }
        for (auto& s : streams_) s->abortLane(req.lane, e.detail());
        if (find(req) != nullptr) {
          forget(req);
          req.state.store(State::Failed, std::memory_order_release);
        }
        throw;
      }
      failures_->report(e);
      abortStreams(e.what());
      if (find(req) != nullptr) {
        forget(req);
        req.state.store(State::Failed, std::memory_order_release);
      }
      if (e.code() == ErrorCode::Aborted)
        if (auto first = failures_->first()) throw *first;
      throw;
    }
  }

  bool laneAborted(std::uint64_t lane) {
    std::lock_guard<std::mutex> lk(mu_);
    return abortedLanes_.count(lane) != 0;
  }

  void abortStreams(const std::string& why) {
    for (auto& s : streams_) s->abort(why);
  }

  const int rank_;
  const int size_;
  const std::size_t stripeMin_;
  const std::shared_ptr<StreamFailures> failures_;
  std::thread watcher_;  // aborts every stream on the first failure (StreamFailures)
  std::mutex mu_;
  // Every stripe made so far, reused once free: after warm-up no message allocates. Looked up
  // by a scan, as few stripes are in flight at once.
  std::vector<std::unique_ptr<Stripe>> stripes_;
  std::size_t active_ = 0;  // stripes with an owner
  std::unordered_set<std::uint64_t> abortedLanes_;
  // Declared last, destroyed first (see the destructor).
  std::vector<std::unique_ptr<Transport>> streams_;
};

}  // namespace

std::unique_ptr<Transport> createStripedTransport(int rank, int size,
                                                  std::vector<std::unique_ptr<Transport>> streams,
                                                  std::size_t stripeMinBytes,
                                                  std::shared_ptr<StreamFailures> failures) {
  return std::make_unique<StripedTransport>(rank, size, std::move(streams), stripeMinBytes,
                                            std::move(failures));
}

}  // namespace braid::transport::tcp
