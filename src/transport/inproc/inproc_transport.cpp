#include "transport/inproc/inproc_transport.hpp"

#include <braid/error.hpp>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace braid::transport {

namespace {

using State_ = Request::State;

/// Intrusive FIFO of requests linked through Request::next.
struct RequestQueue {
  Request* head = nullptr;
  Request* tail = nullptr;

  bool empty() const noexcept { return head == nullptr; }
  void push(Request* r) noexcept {
    r->next = nullptr;
    if (tail != nullptr)
      tail->next = r;
    else
      head = r;
    tail = r;
  }
  Request* pop() noexcept {
    Request* r = head;
    head = r->next;
    if (head == nullptr) tail = nullptr;
    r->next = nullptr;
    return r;
  }
  bool remove(Request* r) noexcept {
    Request* prev = nullptr;
    for (Request* cur = head; cur != nullptr; prev = cur, cur = cur->next) {
      if (cur != r) continue;
      (prev != nullptr ? prev->next : head) = cur->next;
      if (tail == cur) tail = prev;
      cur->next = nullptr;
      return true;
    }
    return false;
  }
};

/// A point-to-point message copied aside because no receive was posted (Request::aux == 1).
struct HeldMessage {
  Request req;
  std::vector<std::uint8_t> data;
};

constexpr std::size_t kHeld = 1;

/// Everything sent from one rank to another.
struct Channel {
  std::mutex mu;
  RequestQueue sends;  // posted sends and held messages, not yet matched
  RequestQueue recvs;  // posted receives, not yet matched
  std::list<HeldMessage> held;
  std::string broken;  // non-empty once a mismatch broke the pair
};

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
  int size;
  std::chrono::microseconds spin;
  std::vector<std::unique_ptr<Channel>> channels;  // [src * size + dst]
  std::vector<std::unique_ptr<RankState>> ranks;
  std::vector<bool> endpointTaken;
  std::mutex takenMu;

  State(int n, std::chrono::microseconds s) : size(n), spin(s), endpointTaken(n, false) {
    const auto un = static_cast<std::size_t>(n);
    channels.reserve(un * un);
    for (std::size_t i = 0; i < un * un; ++i) channels.push_back(std::make_unique<Channel>());
    ranks.reserve(un);
    for (std::size_t i = 0; i < un; ++i) ranks.push_back(std::make_unique<RankState>());
  }
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
};

namespace {

class InprocEndpoint final : public Transport {
 public:
  InprocEndpoint(std::shared_ptr<InprocFabric::State> s, int rank)
      : s_(std::move(s)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override {
    prepare(req, true, peer, data, bytes, tag);
    Channel& ch = s_->channel(rank_, peer);
    std::lock_guard<std::mutex> lk(ch.mu);
    if (refuse(ch, req)) return;
    if (!ch.recvs.empty()) {
      match(ch, req, *ch.recvs.pop());
    } else if ((tag & kP2PTagBit) != 0) {
      HeldMessage& h = ch.held.emplace_back();
      h.data.assign(req.data, req.data + bytes);
      h.req.isSend = true;
      h.req.peer = peer;
      h.req.tag = tag;
      h.req.data = h.data.data();
      h.req.bytes = bytes;
      h.req.aux = kHeld;
      h.req.state.store(State_::Pending, std::memory_order_relaxed);
      ch.sends.push(&h.req);
      s_->complete(req, rank_);
    } else {
      ch.sends.push(&req);
    }
  }

  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override {
    prepare(req, false, peer, data, bytes, tag);
    Channel& ch = s_->channel(peer, rank_);
    std::lock_guard<std::mutex> lk(ch.mu);
    if (refuse(ch, req)) return;
    if (!ch.sends.empty())
      match(ch, *ch.sends.pop(), req);
    else
      ch.recvs.push(&req);
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
    const auto spinUntil = Clock::now() + s_->spin;
    while (req.state.load(std::memory_order_acquire) == State_::Pending && Clock::now() < spinUntil)
      std::this_thread::yield();
    if (req.state.load(std::memory_order_acquire) == State_::Pending) {
      RankState& rs = s_->rank(rank_);
      std::unique_lock<std::mutex> lk(rs.mu);
      rs.sleepers.fetch_add(1, std::memory_order_seq_cst);
      while (req.state.load(std::memory_order_seq_cst) == State_::Pending) {
        if (rs.cv.wait_until(lk, deadline) == std::cv_status::timeout) break;
      }
      rs.sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
    if (req.state.load(std::memory_order_acquire) == State_::Pending && withdraw(req))
      throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank_) + ": " + describe(req) +
                                          " did not complete before the deadline");
    if (req.state.load(std::memory_order_acquire) == State_::Failed) rethrow(req);
  }

  std::string describePeer(int peer) const override {
    return "rank " + std::to_string(peer) + " (inproc)";
  }

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
        Channel& out = s_->channel(rank_, p);
        std::lock_guard<std::mutex> lk(out.mu);
        failQueue(out, out.sends, rank_, ErrorCode::Aborted, why);
        failQueue(out, out.recvs, p, ErrorCode::PeerLost, lost);
      }
      {
        Channel& in = s_->channel(p, rank_);
        std::lock_guard<std::mutex> lk(in.mu);
        failQueue(in, in.recvs, rank_, ErrorCode::Aborted, why);
        failQueue(in, in.sends, p, ErrorCode::PeerLost, lost);
      }
    }
  }

 private:
  void prepare(Request& req, bool isSend, int peer, const void* data, std::size_t bytes,
               std::uint64_t tag) const {
    if (peer < 0 || peer >= s_->size || peer == rank_)
      throw Error(ErrorCode::InvalidArgument,
                  "rank " + std::to_string(rank_) + ": no peer " + std::to_string(peer) +
                      " in an inproc fabric of " + std::to_string(s_->size) + " ranks");
    if (req.state.load(std::memory_order_acquire) == State_::Pending)
      throw Error(ErrorCode::Internal,
                  "rank " + std::to_string(rank_) + ": request posted while still pending");
    req.isSend = isSend;
    req.peer = peer;
    req.tag = tag;
    req.data = static_cast<std::uint8_t*>(const_cast<void*>(data));
    req.bytes = bytes;
    req.progress = 0;
    req.aux = 0;
    req.next = nullptr;
    req.state.store(State_::Pending, std::memory_order_relaxed);
  }

  /// Fails req at once if this rank aborted, its peer aborted, or the pair is broken.
  bool refuse(Channel& ch, Request& req) {
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

  /// Pairs the oldest send with the oldest receive of a channel (its lock held).
  void match(Channel& ch, Request& send, Request& recv) {
    const int src = recv.peer;
    const int dst = send.peer;
    if (send.tag != recv.tag || send.bytes != recv.bytes) {
      ch.broken = "rank " + std::to_string(dst) + " expected " + describeTag(recv.tag) + " (" +
                  std::to_string(recv.bytes) + " bytes) from " + describePeer(src) +
                  ", which sent " + describeTag(send.tag) + " (" + std::to_string(send.bytes) +
                  " bytes)";
      s_->fail(recv, dst, ErrorCode::Mismatch, ch.broken);
      finishSend(ch, send, src, ErrorCode::Mismatch);
      failQueue(ch, ch.sends, src, ErrorCode::Mismatch, ch.broken);
      failQueue(ch, ch.recvs, dst, ErrorCode::Mismatch, ch.broken);
      return;
    }
    if (send.bytes > 0) std::memcpy(recv.data, send.data, send.bytes);
    s_->complete(recv, dst);
    finishSend(ch, send, src, std::nullopt);
  }

  /// Completes (or fails) a send, releasing it if it was a held message.
  void finishSend(Channel& ch, Request& send, int owner, std::optional<ErrorCode> error) {
    if (send.aux == kHeld) {
      ch.held.remove_if([&](const HeldMessage& h) { return &h.req == &send; });
      return;
    }
    if (error)
      s_->fail(send, owner, *error, ch.broken);
    else
      s_->complete(send, owner);
  }

  /// Fails every request of a queue except held messages, which stay deliverable.
  void failQueue(Channel& ch, RequestQueue& q, int owner, ErrorCode code, const std::string& why) {
    RequestQueue keep;
    while (!q.empty()) {
      Request* r = q.pop();
      if (r->aux == kHeld && code != ErrorCode::Mismatch) {
        keep.push(r);
      } else if (r->aux == kHeld) {
        ch.held.remove_if([&](const HeldMessage& h) { return &h.req == r; });
      } else {
        s_->fail(*r, owner, code, why);
      }
    }
    q = keep;
  }

  /// Takes a timed-out request off its queue; false if it completed meanwhile.
  bool withdraw(Request& req) {
    Channel& ch = req.isSend ? s_->channel(rank_, req.peer) : s_->channel(req.peer, rank_);
    std::lock_guard<std::mutex> lk(ch.mu);
    if (req.state.load(std::memory_order_acquire) != State_::Pending) return false;
    (req.isSend ? ch.sends : ch.recvs).remove(&req);
    req.state.store(State_::Idle, std::memory_order_release);
    return true;
  }

  [[noreturn]] void rethrow(Request& req) {
    RankState& rs = s_->rank(rank_);
    std::unique_lock<std::mutex> lk(rs.errMu);
    auto it = rs.errors.find(req.aux);
    if (it == rs.errors.end())
      throw Error(ErrorCode::Internal, "rank " + std::to_string(rank_) + ": " + describe(req) +
                                           " failed without a recorded error");
    Error e = std::move(it->second);
    rs.errors.erase(it);
    lk.unlock();
    req.state.store(State_::Idle, std::memory_order_release);
    throw e;
  }

  std::string describe(const Request& req) const {
    return std::string(req.isSend ? "send to " : "receive from ") + describePeer(req.peer) + " (" +
           describeTag(req.tag) + ", " + std::to_string(req.bytes) + " bytes)";
  }

  std::shared_ptr<InprocFabric::State> s_;
  int rank_;
};

}  // namespace

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
