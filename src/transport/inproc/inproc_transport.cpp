#include "transport/inproc/inproc_transport.hpp"

#include <braid/error.hpp>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "transport/engine.hpp"

namespace braid::transport {

namespace {

using State_ = Request::State;

class InprocEndpoint;

struct RankState {
  std::mutex mu;  // guards sleeping on cv
  std::condition_variable cv;
  std::atomic<int> sleepers{0};
  std::atomic<bool> aborted{false};
  std::mutex errMu;                     // guards errors, nextError and abortWhy
  std::map<std::size_t, Error> errors;  // keyed by Request::aux of a failed request
  std::size_t nextError = 1;
  std::string abortWhy;
};

}  // namespace

struct InprocFabric::State {
  /// Everything sent from one rank (src) to another (dst), guarded by mu: the sends not yet
  /// delivered, in posting order, and dst's receive side (the engine's matching). The channel
  /// is the inbox's completion sink: it publishes dst's receives.
  struct Channel final : engine::CompletionSink {
    State* fabric = nullptr;
    int src = -1;
    int dst = -1;
    std::mutex mu;
    engine::RequestQueue sends;
    engine::Inbox inbox;
    std::string broken;                        // non-empty once a mismatch broke the pair
    InprocEndpoint* receiver = nullptr;        // dst's endpoint while it exists (tag texts)
    ErrorCode failCode = ErrorCode::Internal;  // how inbox.failAll() fails dst's receives
    std::string failWhy;

    void finish(Request& req, State_ state, bool) override;
    void finishAlone(Request& req, Error error) override {
      fabric->fail(req, dst, error.code(), error.detail());
    }
    std::string tagText(std::uint64_t tag) const override;
    void mismatchSeen(int peer, std::uint64_t expected, std::uint64_t received) const override;
  };

  int size;
  std::chrono::microseconds spin;
  std::vector<std::unique_ptr<Channel>> channels;  // [src * size + dst]
  std::vector<std::unique_ptr<RankState>> ranks;
  std::vector<bool> endpointTaken;
  std::mutex takenMu;

  State(int n, std::chrono::microseconds s) : size(n), spin(s), endpointTaken(n, false) {
    const auto un = static_cast<std::size_t>(n);
    channels.reserve(un * un);
    for (std::size_t i = 0; i < un * un; ++i) {
      auto ch = std::make_unique<Channel>();
      ch->fabric = this;
      ch->src = static_cast<int>(i / un);
      ch->dst = static_cast<int>(i % un);
      ch->inbox = engine::Inbox(ch->dst, ch->src, describe(ch->src), *ch);
      channels.push_back(std::move(ch));
    }
    ranks.reserve(un);
    for (std::size_t i = 0; i < un; ++i) ranks.push_back(std::make_unique<RankState>());
  }
  static std::string describe(int rank) { return "rank " + std::to_string(rank) + " (inproc)"; }
  Channel& channel(int src, int dst) {
    return *channels[static_cast<std::size_t>(src) * static_cast<std::size_t>(size) +
                     static_cast<std::size_t>(dst)];
  }
  RankState& rank(int r) { return *ranks[static_cast<std::size_t>(r)]; }

  void wake(int owner) {
    RankState& rs = rank(owner);
    if (rs.sleepers.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lk(rs.mu); }
      rs.cv.notify_all();
    }
  }
  void complete(Request& req, int owner) {
    req.state.store(State_::Done, std::memory_order_seq_cst);
    wake(owner);
  }
  void fail(Request& req, int owner, ErrorCode code, const std::string& why) {
    RankState& rs = rank(owner);
    {
      std::lock_guard<std::mutex> lk(rs.errMu);
      req.aux = rs.nextError++;
      rs.errors.insert_or_assign(req.aux, Error(code, why));
    }
    req.state.store(State_::Failed, std::memory_order_seq_cst);
    wake(owner);
  }
  /// Fails every undelivered send of a channel (owned by its src) and every receive of its
  /// inbox (owned by its dst); held messages are dropped. ch.mu held.
  void failChannel(Channel& ch, ErrorCode sendCode, const std::string& sendWhy, ErrorCode recvCode,
                   const std::string& recvWhy) {
    ch.sends.drain([&](Request& r) { fail(r, ch.src, sendCode, sendWhy); });
    ch.failCode = recvCode;
    ch.failWhy = recvWhy;
    ch.inbox.failAll(true);
  }
  /// A mismatch: the pair stays broken, both sides fail with Error(Mismatch). ch.mu held.
  void breakPair(Channel& ch, const std::string& why) {
    ch.broken = why;
    failChannel(ch, ErrorCode::Mismatch, why, ErrorCode::Mismatch, why);
  }
  /// Moves the channel's sends, oldest first, into the receives the engine matches them with
  /// (or aside, for P2P messages without one); stops at a send that waits for its receive.
  /// A delivered send completes: its data is copied. ch.mu held.
  void deliver(Channel& ch) {
    while (!ch.sends.empty() && ch.broken.empty()) {
      Request& send = *ch.sends.front();
      std::optional<Error> mismatch;
      switch (ch.inbox.arrive(send.tag, send.bytes, SIZE_MAX, mismatch)) {
        case engine::Inbox::Arrival::Stall:
          return;
        case engine::Inbox::Arrival::Mismatch:
          breakPair(ch, mismatch->what());
          return;
        case engine::Inbox::Arrival::TooLarge:
        case engine::Inbox::Arrival::Done:
          break;
        case engine::Inbox::Arrival::Receiving: {
          std::uint8_t* dst = ch.inbox.rxSpace(send.bytes);
          if (dst == nullptr) {
            const Error e = ch.inbox.cannotHold();
            ch.sends.pop();
            ch.inbox.failAll(true);  // drops the partial held message
            fail(send, ch.src, e.code(), e.what());
            continue;
          }
          std::memcpy(dst, send.data, send.bytes);
          ch.inbox.rxCommit(send.bytes);
          ch.inbox.rxComplete();
          break;
        }
      }
      ch.sends.pop();
      complete(send, ch.src);
    }
  }
};

namespace {

class InprocEndpoint final : public Transport {
 public:
  InprocEndpoint(std::shared_ptr<InprocFabric::State> s, int rank) : s_(std::move(s)), rank_(rank) {
    for (int p = 0; p < s_->size; ++p) {
      auto& ch = s_->channel(p, rank_);
      std::lock_guard<std::mutex> lk(ch.mu);
      ch.receiver = this;
    }
  }
  ~InprocEndpoint() override {
    for (int p = 0; p < s_->size; ++p) {
      auto& ch = s_->channel(p, rank_);
      std::lock_guard<std::mutex> lk(ch.mu);
      ch.receiver = nullptr;
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override {
    prepare("postSend", req, true, peer, data, bytes, tag);
    auto& ch = s_->channel(rank_, peer);
    std::lock_guard<std::mutex> lk(ch.mu);
    if (refuse(ch, req)) return;
    ch.sends.push(req);
    s_->deliver(ch);
  }

  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override {
    prepare("postRecv", req, false, peer, data, bytes, tag);
    auto& ch = s_->channel(peer, rank_);
    std::lock_guard<std::mutex> lk(ch.mu);
    if (refuse(ch, req)) return;
    std::optional<Error> mismatch;
    if (ch.inbox.post(req, mismatch) == engine::Inbox::Posted::Mismatch) {
      s_->breakPair(ch, mismatch->what());
      s_->fail(req, rank_, ErrorCode::Mismatch, ch.broken);
      return;
    }
    s_->deliver(ch);
  }

  bool test(Request& req) override {
    switch (req.state.load(std::memory_order_acquire)) {
      case State_::Pending:
        return false;
      case State_::Failed:
        rethrow(req);
      case State_::Idle:
      case State_::Done:
        return true;
    }
    return true;
  }

  void wait(Request& req, Deadline deadline) override {
    const State_ s = req.state.load(std::memory_order_acquire);
    if (s == State_::Done || s == State_::Idle) return;
    RankState& rs = s_->rank(rank_);
    std::unique_lock<std::mutex> lk(rs.mu);
    engine::waitLoop(
        lk, req, deadline, engine::WaitPolicy{s_->spin, std::chrono::microseconds(0)},
        [] {},  // the peers' threads move the data
        [&](Deadline until) {
          rs.sleepers.fetch_add(1, std::memory_order_seq_cst);
          if (req.state.load(std::memory_order_seq_cst) == State_::Pending)
            rs.cv.wait_until(lk, until);
          rs.sleepers.fetch_sub(1, std::memory_order_relaxed);
        },
        [&](Request& r) { rethrow(r); },
        [&](Request& r) {
          lk.unlock();  // channel locks come before rank locks
          if (withdraw(r)) throw engine::timeoutError(rank_, r, describePeer(r.peer), "");
          lk.lock();
        });
  }

  std::string describePeer(int peer) const override { return InprocFabric::State::describe(peer); }

  void abort(const std::string& why) override {
    {
      RankState& me = s_->rank(rank_);
      std::lock_guard<std::mutex> lk(me.errMu);
      if (me.abortWhy.empty()) me.abortWhy = why.empty() ? "aborted" : why;
    }
    s_->rank(rank_).aborted.store(true, std::memory_order_seq_cst);
    const std::string lost = describePeer(rank_) + " aborted: " + why;
    for (int p = 0; p < s_->size; ++p) {
      if (p == rank_) continue;
      {
        auto& out = s_->channel(rank_, p);
        std::lock_guard<std::mutex> lk(out.mu);
        s_->failChannel(out, ErrorCode::Aborted, why, ErrorCode::PeerLost, lost);
      }
      {
        auto& in = s_->channel(p, rank_);
        std::lock_guard<std::mutex> lk(in.mu);
        s_->failChannel(in, ErrorCode::PeerLost, lost, ErrorCode::Aborted, why);
      }
    }
  }

  std::string tagText(std::uint64_t tag) const { return describeTag(tag); }
  void mismatchSeen(int peer, std::uint64_t expected, std::uint64_t received) const {
    noteMismatch(peer, expected, received);
  }

 private:
  void prepare(const char* op, Request& req, bool isSend, int peer, const void* data,
               std::size_t bytes, std::uint64_t tag) const {
    engine::armRequest(
        req, op, rank_, s_->size, peer, data, bytes, tag, isSend, true, " in an inproc fabric",
        [] { return std::string(); }, [](int p) { return InprocFabric::State::describe(p); });
  }

  /// Fails req at once if this rank aborted, its peer aborted, or the pair is broken.
  bool refuse(InprocFabric::State::Channel& ch, Request& req) {
    if (s_->rank(rank_).aborted.load(std::memory_order_acquire)) {
      s_->fail(req, rank_, ErrorCode::Aborted, abortReason(rank_));
      return true;
    }
    if (s_->rank(req.peer).aborted.load(std::memory_order_acquire)) {
      s_->fail(req, rank_, ErrorCode::PeerLost,
               describePeer(req.peer) + " aborted: " + abortReason(req.peer));
      return true;
    }
    if (!ch.broken.empty()) {
      s_->fail(req, rank_, ErrorCode::Mismatch, ch.broken);
      return true;
    }
    return false;
  }

  std::string abortReason(int r) {
    RankState& rs = s_->rank(r);
    std::lock_guard<std::mutex> lk(rs.errMu);
    return rs.abortWhy;
  }

  /// Takes a timed-out request off its queue; false if it completed meanwhile.
  bool withdraw(Request& req) {
    auto& ch = req.isSend ? s_->channel(rank_, req.peer) : s_->channel(req.peer, rank_);
    std::lock_guard<std::mutex> lk(ch.mu);
    if (req.state.load(std::memory_order_acquire) != State_::Pending) return false;
    if (req.isSend)
      ch.sends.remove(req);
    else
      ch.inbox.withdraw(req);
    req.state.store(State_::Idle, std::memory_order_release);
    return true;
  }

  [[noreturn]] void rethrow(Request& req) {
    RankState& rs = s_->rank(rank_);
    std::unique_lock<std::mutex> lk(rs.errMu);
    auto it = rs.errors.find(req.aux);
    if (it == rs.errors.end())
      throw Error(ErrorCode::Internal, "rank " + std::to_string(rank_) + ": a request to " +
                                           describePeer(req.peer) + " failed without an error");
    Error e = std::move(it->second);
    rs.errors.erase(it);
    lk.unlock();
    req.state.store(State_::Idle, std::memory_order_release);
    throw e;
  }

  std::shared_ptr<InprocFabric::State> s_;
  int rank_;
};

}  // namespace

void InprocFabric::State::Channel::finish(Request& req, State_ state, bool) {
  if (state == State_::Done)
    fabric->complete(req, dst);
  else
    fabric->fail(req, dst, failCode, failWhy);
}

std::string InprocFabric::State::Channel::tagText(std::uint64_t tag) const {
  return receiver != nullptr ? receiver->tagText(tag) : "tag " + std::to_string(tag);
}

void InprocFabric::State::Channel::mismatchSeen(int peer, std::uint64_t expected,
                                                std::uint64_t received) const {
  if (receiver != nullptr) receiver->mismatchSeen(peer, expected, received);
}

InprocFabric::InprocFabric(int size, std::chrono::microseconds spin) {
  if (size < 1)
    throw Error(ErrorCode::InvalidArgument,
                "inproc fabric needs at least one rank, got " + std::to_string(size));
  state_ = std::make_shared<State>(size, spin);
}

InprocFabric::~InprocFabric() = default;

int InprocFabric::size() const noexcept {
  return state_->size;
}

std::unique_ptr<Transport> InprocFabric::endpoint(int rank) {
  if (rank < 0 || rank >= state_->size)
    throw Error(ErrorCode::InvalidArgument, "inproc fabric of " + std::to_string(state_->size) +
                                                " ranks has no rank " + std::to_string(rank));
  {
    std::lock_guard<std::mutex> lk(state_->takenMu);
    if (state_->endpointTaken[static_cast<std::size_t>(rank)])
      throw Error(ErrorCode::InvalidArgument,
                  "inproc endpoint of rank " + std::to_string(rank) + " already taken");
    state_->endpointTaken[static_cast<std::size_t>(rank)] = true;
  }
  return std::make_unique<InprocEndpoint>(state_, rank);
}

}  // namespace braid::transport
