#include "work.hpp"

#include <ATen/core/jit_type.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <string>

#include "tracking.hpp"

namespace braid_torch {

namespace {

c10::intrusive_ptr<c10::ivalue::Future> makeFuture() {
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

std::atomic<std::uint64_t> nextKey{1};

}  // namespace

// c10d::Work's constructor allocates a RecordFunction for every work with a title, and copies
// the inputs for it, to find out whether the profiler is on; without a record-function callback
// for its scope it cannot be, so then neither is passed. The same question the RecordFunction
// asks, through the thread's cached view of the callbacks (at::hasCallbacks() takes the global
// callbacks' lock on every call).
bool profilerOn() {
  return at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE).has_value();
}

BraidWork::BraidWork(std::shared_ptr<OpQueue> queue, c10d::OpType type, const char* profilingTitle,
                     const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                     RunFn run)
    : BraidWork(profilerOn(), std::move(queue), type, profilingTitle, inputs, std::move(outputs),
                std::move(run), nullptr, nullptr) {}

BraidWork::BraidWork(std::shared_ptr<OpQueue> queue, c10d::OpType type, const char* profilingTitle,
                     const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                     PollFn poll, BlockFn block)
    : BraidWork(profilerOn(), std::move(queue), type, profilingTitle, inputs, std::move(outputs),
                nullptr, std::move(poll), std::move(block)) {}

BraidWork::BraidWork(bool profiled, std::shared_ptr<OpQueue> queue, c10d::OpType type,
                     const char* profilingTitle, const std::vector<at::Tensor>& inputs,
                     std::vector<at::Tensor> outputs, RunFn run, PollFn poll, BlockFn block)
    : c10d::Work(-1, type, profiled ? profilingTitle : nullptr,
                 profiled ? c10::optional<std::vector<at::Tensor>>(inputs) : c10::nullopt),
      queue_(std::move(queue)),
      outputs_(std::move(outputs)),
      run_(std::move(run)),
      poll_(std::move(poll)),
      block_(std::move(block)),
      key_(nextKey.fetch_add(1, std::memory_order_relaxed)) {}

BraidWork::~BraidWork() = default;

bool BraidWork::isCompleted() {
  if (!done() && isPosted()) tryPoll();
  // c10d::Work's state is set first in complete(): a future's waiter that looks right after the
  // future completed sees the work completed too, though done_ may not be set yet.
  return done() || c10d::Work::isCompleted();
}

void BraidWork::settle(c10::ivalue::Future& f, const std::exception_ptr& error) {
  if (error)
    f.setError(error);
  else
    f.markCompleted(c10::IValue(outputs_));
}

void BraidWork::complete(std::exception_ptr error) {
  // Base state first (completed_, exception_, the profiler's end event), then the group's
  // completion callback (hooks, pending count), then the future if somebody holds one, whose
  // callbacks (DDP's) may look at this work, then `done_`, which releases wait().
  if (timed_) finished_ = std::chrono::steady_clock::now();
  finish(error);
  c10::intrusive_ptr<c10::ivalue::Future> f;
  std::shared_ptr<WorkTracker> tracker;
  {
    std::lock_guard<std::mutex> lk(futureMu_);
    settled_ = true;
    error_ = error;
    f = future_;
    tracker = std::move(tracker_);
  }
  if (tracker) tracker->completed(*this, error);
  if (f) settle(*f, error);
  done_.store(true, std::memory_order_release);
}

void BraidWork::track(std::shared_ptr<WorkTracker> tracker) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lk(futureMu_);
    if (!settled_) {
      tracker_ = std::move(tracker);
      return;
    }
    error = error_;
  }
  tracker->completed(*this, error);
}

void BraidWork::enableTiming() {
  timed_ = true;
  issued_ = started_ = std::chrono::steady_clock::now();
}

float BraidWork::getDuration() const {
  TORCH_CHECK(timed_, "braid: ", c10d::opTypeToString(opType_),
              ": no duration: collectives timing was not enabled when it was issued "
              "(ProcessGroup._enable_collectives_timing())");
  TORCH_CHECK(done(), "braid: ", c10d::opTypeToString(opType_),
              ": no duration before the operation completed");
  return std::chrono::duration<float, std::milli>(finished_ - started_).count();
}

void BraidWork::execute() {
  if (timed_) started_ = std::chrono::steady_clock::now();
  const std::exception_ptr error = runNoGrad(run_);
  run_ = nullptr;  // drop the tensors the operation captured
  complete(error);
}

bool BraidWork::tryPoll() {
  if (done()) return true;
  std::unique_lock<std::mutex> lk(pollMu_, std::try_to_lock);
  if (!lk.owns_lock() || done()) return done();
  bool finished = false;
  const std::exception_ptr error = runNoGrad([&] { finished = poll_(); });
  if (error) finished = true;
  if (finished) complete(error);
  return finished;
}

void BraidWork::blockUntilPosted() {
  std::lock_guard<std::mutex> lk(pollMu_);
  if (done()) return;
  complete(runNoGrad(block_));
}

bool BraidWork::wait(std::chrono::milliseconds timeout) {
  if (!done()) {
    if (timeout == kNoTimeout) {
      if (isPosted())
        blockUntilPosted();
      else
        queue_->runUntilDone(this);
    } else if (isPosted()) {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      auto nap = std::chrono::microseconds(10);
      while (!tryPoll()) {
        TORCH_CHECK(std::chrono::steady_clock::now() < deadline,
                    "braid: ", c10d::opTypeToString(retrieveOpType()), " did not complete within ",
                    timeout.count(), " ms (Work.wait timeout); it keeps running");
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(1000));
      }
    } else {
      TORCH_CHECK(queue_->waitDone(this, timeout),
                  "braid: ", c10d::opTypeToString(retrieveOpType()), " did not complete within ",
                  timeout.count(), " ms (Work.wait timeout); it keeps running");
    }
  }
  return c10d::Work::wait(kNoTimeout);  // completed: rethrows the operation's error
}

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() {
  {
    std::unique_lock<std::mutex> lk(futureMu_);
    if (future_) return future_;
    future_ = makeFuture();
    if (settled_) {
      // Completed before anybody asked: this call completes the future it creates.
      auto f = future_;
      const auto error = error_;
      lk.unlock();
      settle(*f, error);
      return f;
    }
  }
  // Pending: complete() will complete the future. A queued operation does so when it runs (the
  // worker runs it if nobody waits); a posted one needs somebody to poll it.
  if (!done()) {
    if (isPosted())
      queue_->watch(c10::intrusive_ptr<BraidWork>::reclaim_copy(this));
    else
      queue_->expedite();
  }
  return future_;
}

std::vector<at::Tensor> BraidWork::result() {
  return outputs_;
}

int BraidWork::sourceRank() const {
  const int r = sourceRank_.load();
  TORCH_CHECK(r >= 0, "braid: sourceRank() is only known for a completed receive");
  return r;
}

// ---------------------------------------------------------------- OpQueue

OpQueue::~OpQueue() {
  shutdown();
}

void OpQueue::startWorkerLocked() {
  if (!worker_.joinable())
    worker_ = std::thread([self = shared_from_this()] { self->workerLoop(); });
}

void OpQueue::push(c10::intrusive_ptr<BraidWork> work, bool callerWaits) {
  bool wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    TORCH_CHECK(!stop_,
                "braid: the process group was shut down (destroy_process_group, shutdown() or "
                "abort()); it takes no new operations");
    queue_.push_back({std::move(work), std::chrono::steady_clock::now()});
    startWorkerLocked();
    wake = !callerWaits && workerState_ == WorkerState::Idle;
  }
  if (wake) cv_.notify_all();
}

bool OpQueue::runIfIdle(BraidWork& work) {
  if (!claimIfIdle()) return false;
  work.execute();  // never throws: the error is the work's, rethrown by its wait()
  release();
  return true;
}

bool OpQueue::claimIfIdle() {
  std::lock_guard<std::mutex> lk(mu_);
  TORCH_CHECK(!stop_,
              "braid: the process group was shut down (destroy_process_group, shutdown() or "
              "abort()); it takes no new operations");
  if (running_ || !queue_.empty()) return false;
  running_ = true;
  return true;
}

void OpQueue::release() {
  bool wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    running_ = false;
    // Whoever queued meanwhile (another thread of the group) or waits for the queue to drain.
    wake = waiters_ > 0 || !queue_.empty();
  }
  if (wake) cv_.notify_all();
}

void OpQueue::expedite() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_.empty()) return;
    urgent_ = true;
  }
  cv_.notify_all();
}

void OpQueue::runHead(std::unique_lock<std::mutex>& lk) {
  auto head = std::move(queue_.front().work);
  queue_.pop_front();
  running_ = true;
  lk.unlock();
  head->execute();
  head.reset();
  lk.lock();
  running_ = false;
  if (queue_.empty()) urgent_ = false;
  // Wake whoever can use it: waiters (their op may be done, or next), the worker (more queued).
  if (waiters_ > 0 || !queue_.empty()) cv_.notify_all();
}

void OpQueue::runUntilDone(BraidWork* work) {
  std::unique_lock<std::mutex> lk(mu_);
  while (!work->done()) {
    if (!running_ && !queue_.empty()) {
      runHead(lk);
      continue;
    }
    ++waiters_;
    cv_.wait(lk);
    --waiters_;
  }
}

bool OpQueue::waitDone(BraidWork* work, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  // This caller runs nothing itself: the worker must, even for an operation queued without
  // waking it (push's callerWaits).
  if (!queue_.empty()) {
    urgent_ = true;
    cv_.notify_all();
  }
  ++waiters_;
  const bool done = cv_.wait_for(lk, timeout, [&] { return work->done(); });
  --waiters_;
  return done;
}

void OpQueue::watch(c10::intrusive_ptr<BraidWork> work) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& w : watched_)
      if (w.get() == work.get()) return;
    watched_.push_back(std::move(work));
    startWorkerLocked();
  }
  cv_.notify_all();
}

bool OpQueue::pollWatched() {
  std::vector<c10::intrusive_ptr<BraidWork>> snapshot;
  {
    std::lock_guard<std::mutex> lk(mu_);
    snapshot = watched_;
  }
  for (auto& w : snapshot) w->tryPoll();
  std::lock_guard<std::mutex> lk(mu_);
  watched_.erase(std::remove_if(watched_.begin(), watched_.end(),
                                [](const c10::intrusive_ptr<BraidWork>& w) { return w->done(); }),
                 watched_.end());
  return !watched_.empty();
}

void OpQueue::workerLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  auto backoff = std::chrono::microseconds(10);
  while (true) {
    workerState_ = WorkerState::Busy;
    if (!running_ && !queue_.empty()) {
      // A caller that issued a blocking collective is about to wait() on it and run it inline;
      // leave it the grace period, so the blocking path costs no thread hand-off.
      const auto due = queue_.front().at + grace_;
      if (!stop_ && !urgent_ && waiters_ == 0 && std::chrono::steady_clock::now() < due) {
        workerState_ = WorkerState::Grace;
        cv_.wait_until(lk, due);
        continue;
      }
      runHead(lk);
      backoff = std::chrono::microseconds(10);
      continue;
    }
    if (stop_ && queue_.empty() && !running_) break;
    if (!watched_.empty()) {
      lk.unlock();
      const bool more = pollWatched();
      lk.lock();
      if (more && queue_.empty() && !stop_) {
        // Posted operations progress on braid's transport; this only notices completion.
        workerState_ = WorkerState::Idle;
        cv_.wait_for(lk, backoff);
        backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
      }
      continue;
    }
    workerState_ = WorkerState::Idle;
    cv_.wait(lk);
  }
}

void OpQueue::shutdown() {
  std::thread worker;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    worker.swap(worker_);
  }
  cv_.notify_all();
  if (!worker.joinable()) return;
  if (worker.get_id() == std::this_thread::get_id())
    worker.detach();  // destroyed from a future callback running on the worker itself
  else
    worker.join();
}

}  // namespace braid_torch
