// Fusion buffer and chunked overlapped allreduce (include/braid/fusion.hpp).
//
// The fusion thread's loop, on every rank:
//   1. sleep until this rank has something queued and a reason to send it: the queued bytes
//      reach the threshold, the oldest entry waited the cycle time, flush() was called, or the
//      buffer is closing;
//   2. negotiate: allreduce(MIN) of the number of entries queued here -> m. Each rank enters
//      only with m >= 1 of its own, and all ranks queue the same sequence, so the first m entries
//      are the same tensors everywhere;
//   3. pop those m; walk them in order, grouping consecutive-or-not entries of equal (dtype, op)
//      into packs of at most threshold bytes (a larger tensor is its own pack, in place); one
//      allreduce per pack through the staging buffer; copy back; complete each entry.
// Wire: per pack, the communicator's allreduce of the packed bytes, plus 8 bytes per round.
#include <algorithm>
#include <braid/fusion.hpp>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace braid::train {

namespace detail {
struct FusedState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::function<void()> onDone;
  std::function<void(std::exception_ptr)> onComplete;

  void complete(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
};
}  // namespace detail

bool FusedWork::test() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->done;
}

void FusedWork::wait() const {
  if (!state_) return;
  std::unique_lock<std::mutex> lk(state_->mu);
  state_->cv.wait(lk, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool FusedWork::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return true;
  std::unique_lock<std::mutex> lk(state_->mu);
  if (!state_->cv.wait_for(lk, timeout, [&] { return state_->done; })) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

struct FusionBuffer::Impl {
  using Clock = std::chrono::steady_clock;
  struct Entry {
    unsigned char* data;
    std::size_t count;
    DataType dtype;
    ReduceOp op;
    std::shared_ptr<detail::FusedState> state;
    Clock::time_point queued;
    std::size_t bytes() const { return count * dataTypeSize(dtype); }
  };

  Impl(Comm& parent, const FusionOptions& o)
      : options(o), comm(parent.split(0, parent.rank())), rank(parent.rank()) {
    if (options.thresholdBytes == 0) options.thresholdBytes = 1;
    thread = std::thread([this] { loop(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lk(mu);
      closing = true;
    }
    cv.notify_all();
    thread.join();
  }

  bool dueLocked(Clock::time_point now) const {
    if (queue.empty()) return false;
    return closing || flushRequested || queuedBytes >= options.thresholdBytes ||
           now - queue.front().queued >= options.cycleTime;
  }

  void loop() {
    for (;;) {
      std::int64_t have = 0;
      {
        std::unique_lock<std::mutex> lk(mu);
        for (;;) {
          const auto now = Clock::now();
          if (dueLocked(now)) break;
          if (queue.empty() && closing) return;
          if (queue.empty())
            cv.wait(lk);
          else
            cv.wait_until(lk, queue.front().queued + options.cycleTime);
        }
        have = static_cast<std::int64_t>(queue.size());
      }
      std::deque<Entry> batch;
      try {
        std::int64_t agreed = 0;
        comm->allreduce(&have, &agreed, 1, DataType::Int64, ReduceOp::Min);
        std::lock_guard<std::mutex> lk(mu);
        for (std::int64_t i = 0; i < agreed && !queue.empty(); ++i) {
          queuedBytes -= queue.front().bytes();
          batch.push_back(std::move(queue.front()));
          queue.pop_front();
        }
        if (queue.empty()) flushRequested = false;
        ++stats.rounds;
      } catch (...) {
        failAll(std::current_exception());
        return;
      }
      send(batch);
    }
  }

  /// The negotiation failed: nothing can be sent any more.
  void failAll(std::exception_ptr e) {
    std::deque<Entry> rest;
    {
      std::lock_guard<std::mutex> lk(mu);
      failed = e;
      rest.swap(queue);
      queuedBytes = 0;
    }
    for (Entry& en : rest) finish(en, e);
    idle.notify_all();
  }

  void finish(Entry& e, std::exception_ptr err) {
    if (!err && e.state->onDone) {
      try {
        e.state->onDone();
      } catch (...) {
        err = std::current_exception();
      }
    }
    if (e.state->onComplete) {
      try {
        e.state->onComplete(err);
      } catch (...) {
        if (!err) err = std::current_exception();
      }
    }
    e.state->complete(err);
    std::lock_guard<std::mutex> lk(mu);
    ++completed;
    if (err && !firstError) firstError = err;
    if (!err) {
      ++stats.tensors;
      stats.bytes += e.bytes();
    }
    idle.notify_all();
  }

  void send(std::deque<Entry>& batch) {
    std::vector<bool> taken(batch.size(), false);
    std::vector<std::size_t> pack;
    for (std::size_t first = 0; first < batch.size(); ++first) {
      if (taken[first]) continue;
      const Entry& head = batch[first];
      if (head.bytes() >= options.thresholdBytes) {
        taken[first] = true;
        runInPlace(batch[first]);
        continue;
      }
      // Pack entries of the same (dtype, op), in queue order, while they fit.
      pack.clear();
      std::size_t bytes = 0;
      for (std::size_t j = first; j < batch.size(); ++j) {
        const Entry& e = batch[j];
        if (taken[j] || e.dtype != head.dtype || e.op != head.op) continue;
        if (e.bytes() >= options.thresholdBytes) continue;
        if (bytes + e.bytes() > options.thresholdBytes) break;
        pack.push_back(j);
        taken[j] = true;
        bytes += e.bytes();
      }
      runPacked(batch, pack, bytes);
    }
  }

  void runInPlace(Entry& e) {
    std::exception_ptr err;
    try {
      comm->allreduce(e.data, e.data, e.count, e.dtype, e.op);
      countAllreduce();
    } catch (...) {
      err = std::current_exception();
    }
    finish(e, err);
  }

  void runPacked(std::deque<Entry>& batch, const std::vector<std::size_t>& pack,
                 std::size_t bytes) {
    std::exception_ptr err;
    const DataType dtype = batch[pack.front()].dtype;
    try {
      if (staging.size() < bytes) staging.resize(bytes);
      std::size_t off = 0;
      for (std::size_t j : pack) {
        if (batch[j].bytes() > 0)
          std::memcpy(staging.data() + off, batch[j].data, batch[j].bytes());
        off += batch[j].bytes();
      }
      comm->allreduce(staging.data(), staging.data(), bytes / dataTypeSize(dtype), dtype,
                      batch[pack.front()].op);
      countAllreduce();
      off = 0;
      for (std::size_t j : pack) {
        if (batch[j].bytes() > 0)
          std::memcpy(batch[j].data, staging.data() + off, batch[j].bytes());
        off += batch[j].bytes();
      }
    } catch (...) {
      err = std::current_exception();
    }
    for (std::size_t j : pack) finish(batch[j], err);
  }

  void countAllreduce() {
    std::lock_guard<std::mutex> lk(mu);
    ++stats.allreduces;
  }

  FusionOptions options;
  std::unique_ptr<Comm> comm;
  int rank;
  std::mutex mu;
  std::condition_variable cv;    // the fusion thread waits here for work
  std::condition_variable idle;  // synchronize() waits here for completions
  std::deque<Entry> queue;
  std::size_t queuedBytes = 0;
  std::size_t enqueued = 0;
  std::size_t completed = 0;
  bool flushRequested = false;
  bool closing = false;
  std::exception_ptr failed;      // the negotiation failed: the buffer cannot send any more
  std::exception_ptr firstError;  // the first tensor that failed
  Stats stats;
  std::vector<unsigned char> staging;  // grows to at most thresholdBytes, once
  std::thread thread;
};

FusionBuffer::FusionBuffer(Comm& comm) : FusionBuffer(comm, FusionOptions::from(comm.options())) {}

FusionBuffer::FusionBuffer(Comm& comm, const FusionOptions& options)
    : impl_(std::make_unique<Impl>(comm, options)) {}

FusionBuffer::~FusionBuffer() = default;

FusedWork FusionBuffer::allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                  std::function<void()> onDone) {
  auto state = std::make_shared<detail::FusedState>();
  state->onDone = std::move(onDone);
  return enqueue(data, count, dtype, op, std::move(state));
}

FusedWork FusionBuffer::allreduceNotify(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                        std::function<void(std::exception_ptr)> onComplete) {
  auto state = std::make_shared<detail::FusedState>();
  state->onComplete = std::move(onComplete);
  return enqueue(data, count, dtype, op, std::move(state));
}

FusedWork FusionBuffer::enqueue(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                std::shared_ptr<detail::FusedState> state) {
  auto bad = [&](const std::string& what) {
    return Error(ErrorCode::InvalidArgument,
                 "fusion buffer allreduce on rank " + std::to_string(impl_->rank) + ": " + what);
  };
  if (!isValid(dtype)) throw bad("invalid dtype");
  if (!isValid(op)) throw bad("invalid op");
  if (!isSupported(dtype, op))
    throw bad(std::string("op ") + toString(op) + " is not supported for dtype " + toString(dtype));
  // A ReduceOp carries no factor: PremulSum would silently sum with factor 1.
  if (op == ReduceOp::PremulSum)
    throw bad("premul_sum needs a factor; call Comm::allreduce with braid::premulSum(f)");
  if (count > 0 && data == nullptr) throw bad("data is null with count " + std::to_string(count));
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (impl_->failed) std::rethrow_exception(impl_->failed);
    Impl::Entry e{static_cast<unsigned char*>(data), count, dtype, op, state, Impl::Clock::now()};
    impl_->queuedBytes += e.bytes();
    impl_->queue.push_back(std::move(e));
    ++impl_->enqueued;
  }
  impl_->cv.notify_all();
  return FusedWork(state);
}

void FusionBuffer::flush() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (impl_->queue.empty()) return;
    impl_->flushRequested = true;
  }
  impl_->cv.notify_all();
}

void FusionBuffer::synchronize() {
  flush();
  std::unique_lock<std::mutex> lk(impl_->mu);
  const std::size_t target = impl_->enqueued;
  impl_->idle.wait(lk, [&] { return impl_->completed >= target; });
  if (impl_->firstError) std::rethrow_exception(impl_->firstError);
  if (impl_->failed) std::rethrow_exception(impl_->failed);
}

FusionBuffer::Stats FusionBuffer::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->stats;
}

const FusionOptions& FusionBuffer::options() const noexcept {
  return impl_->options;
}

OverlappedAllreduce::OverlappedAllreduce(Comm& comm, void* data, std::size_t count, DataType dtype,
                                         ReduceOp op, std::size_t chunks)
    : comm_(comm), data_(static_cast<unsigned char*>(data)), dtype_(dtype), op_(op) {
  if (chunks == 0)
    throw Error(ErrorCode::InvalidArgument, "overlapped allreduce on rank " +
                                                std::to_string(comm.rank()) +
                                                ": chunks must be at least 1");
  chunks = std::max<std::size_t>(1, std::min(chunks, count));
  bounds_.resize(chunks + 1);
  for (std::size_t i = 0; i <= chunks; ++i) bounds_[i] = count * i / chunks;
  works_.reserve(chunks);
}

void OverlappedAllreduce::ready(std::size_t i) {
  if (i != works_.size())
    throw Error(ErrorCode::InvalidArgument,
                "overlapped allreduce on rank " + std::to_string(comm_.rank()) + ": chunk " +
                    std::to_string(i) + " handed over, expected chunk " +
                    std::to_string(works_.size()) + " of " + std::to_string(chunks()));
  unsigned char* p = data_ + bounds_[i] * dataTypeSize(dtype_);
  works_.push_back(comm_.allreduceAsync(p, p, bounds_[i + 1] - bounds_[i], dtype_, op_));
}

void OverlappedAllreduce::wait() {
  if (works_.size() != chunks())
    throw Error(ErrorCode::InvalidArgument, "overlapped allreduce on rank " +
                                                std::to_string(comm_.rank()) + ": wait with " +
                                                std::to_string(works_.size()) + " of " +
                                                std::to_string(chunks()) + " chunks handed over");
  std::exception_ptr first;
  for (Work& w : works_) {
    try {
      w.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace braid::train
