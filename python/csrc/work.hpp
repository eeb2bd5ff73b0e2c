// The Work handles the backend returns, and the queue that runs collectives.
//
// Why a queue of deferred operations, not braid's own async calls: torch always goes through a
// Work, even for a blocking `dist.all_reduce(t)` (it issues, then calls wait() at once). Handing
// every operation to a thread costs a wake-up (~25 us on this VM), more than a small allreduce.
// So an issued collective is only queued; whoever gets to it first runs it:
//  - the caller's thread, at issue, for a blocking call (asyncOp false) when nothing is queued
//    or running: with nothing tracked or profiled, without a Work at all (ProcessGroupBraid::
//    enqueue: OpQueue::claimIfIdle, then a shared completed DoneWork is returned), else through
//    its BraidWork (OpQueue::runIfIdle); the common blocking path, not even a queue entry, or
//  - the caller's thread, when it calls wait(): it runs the queue up to its own operation inline
//    (the blocking path: no thread hand-off at all), or
//  - the queue's worker thread, woken at issue, which runs it while the caller computes (the
//    async_op=True path, and the path of getFuture(), which DDP waits on without calling wait()).
// Operations of one queue run one at a time in issue order, on every rank the same.
//
// Point-to-point operations are not queued: they are posted on the backend's separate p2p
// communicator at once (see p2p.hpp) and complete through poll()/block().
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "torch_compat.hpp"

namespace braid_torch {

class OpQueue;
class WorkTracker;

/// Whether the profiler records user-scope events on this thread (a work then has a
/// RecordFunction, and its inputs for it).
bool profilerOn();

/// Runs an operation's step `f` with autograd off (it writes tensors torch may track): its
/// exception, or null.
template <class F>
std::exception_ptr runNoGrad(F&& f) noexcept {
  try {
    at::NoGradGuard noGrad;
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

/// What a blocking call that ran at issue returns instead of a BraidWork: completed, no error.
/// torch waits on it and drops it at once, so one per op type and group serves every such call
/// (ProcessGroupBraid::doneWork).
class DoneWork : public c10d::Work {
 public:
  explicit DoneWork(c10d::OpType type) : c10d::Work(-1, type) { finish(); }
};

class BraidWork : public c10d::Work {
 public:
  /// Runs the operation to completion on the calling thread; throws its error.
  using RunFn = std::function<void()>;
  /// Posted operations: poll() completes it if it can without blocking (true when done), block()
  /// completes it, waiting. Both throw the operation's error.
  using PollFn = std::function<bool()>;
  using BlockFn = std::function<void()>;

  /// A queued collective.
  BraidWork(std::shared_ptr<OpQueue> queue, c10d::OpType type, const char* profilingTitle,
            const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, RunFn run);
  /// A posted point-to-point operation.
  BraidWork(std::shared_ptr<OpQueue> queue, c10d::OpType type, const char* profilingTitle,
            const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, PollFn poll,
            BlockFn block);
  ~BraidWork() override;

  bool isCompleted() override;
  /// Blocks until the operation finished and rethrows its error. With the default timeout the
  /// caller may run queued operations inline (see above); with a timeout it only waits, and
  /// throws (the operation keeps running) when the timeout passes first.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  void synchronize() override {}

  /// Executor side: runs a queued operation and completes the work (never throws).
  void execute();
  /// Executor side: tries to complete a posted operation without blocking; true when done.
  bool tryPoll();
  bool isPosted() const { return static_cast<bool>(poll_); }
  void setSourceRank(int r) { sourceRank_.store(r); }
  bool done() const { return done_.load(std::memory_order_acquire); }

  // ---- the group's view of its works (tracking.hpp): set before the work can run ----
  /// The group's tracker is told when the work completes (WorkTracker::completed: on the thread
  /// that completed it, before wait() returns); at once if it already completed.
  void track(std::shared_ptr<WorkTracker> tracker);
  /// Records when the operation was issued (now: this is called at issue), started and
  /// finished (enableCollectivesTiming, hooks): a queued collective starts when it runs, a
  /// posted one at issue (it is posted already).
  void enableTiming();
  void setSequence(std::uint64_t seq) { seq_ = seq; }
  /// Milliseconds from start to finish (the active time); the work must be completed and timed.
  float getDuration() const override;
  std::uint64_t getSequencenumber() const override { return seq_; }
  /// Unique in the process, never reused (torch's completion hooks correlate by it).
  std::uint64_t getCompletionKey() const override { return key_; }
  std::chrono::steady_clock::time_point issuedAt() const { return issued_; }
  std::chrono::steady_clock::time_point startedAt() const { return started_; }
  std::chrono::steady_clock::time_point finishedAt() const { return finished_; }
  bool timed() const { return timed_; }

 private:
  BraidWork(bool profiled, std::shared_ptr<OpQueue> queue, c10d::OpType type,
            const char* profilingTitle, const std::vector<at::Tensor>& inputs,
            std::vector<at::Tensor> outputs, RunFn run, PollFn poll, BlockFn block);
  void complete(std::exception_ptr error);
  void blockUntilPosted();
  /// Completes `f` with the operation's outcome (`error`, else the outputs).
  void settle(c10::ivalue::Future& f, const std::exception_ptr& error);

  std::shared_ptr<OpQueue> queue_;
  std::vector<at::Tensor> outputs_;
  RunFn run_;
  PollFn poll_;
  BlockFn block_;
  std::mutex pollMu_;  // one thread at a time drives a posted operation
  std::atomic<bool> done_{false};
  std::atomic<int> sourceRank_{-1};
  // The future exists only once somebody asks for it (getFuture: DDP, async users): a blocking
  // call never does, and building, completing and freeing one is a good part of the per-call
  // cost of a small collective (docs/pytorch.md, "Per-call overhead"). futureMu_ orders its
  // creation against completion, so that exactly one of the two completes it.
  std::mutex futureMu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool settled_ = false;                  // complete() ran (guarded by futureMu_)
  std::exception_ptr error_;              // its error (guarded by futureMu_)
  std::shared_ptr<WorkTracker> tracker_;  // guarded by futureMu_
  bool timed_ = false;
  std::chrono::steady_clock::time_point issued_{}, started_{}, finished_{};
  std::uint64_t seq_ = 0;
  const std::uint64_t key_;
};

/// Runs queued collectives in issue order, one at a time, inline in wait() or on its worker; also
/// polls posted point-to-point works whose future somebody waits on.
class OpQueue : public std::enable_shared_from_this<OpQueue> {
 public:
  /// `grace`: how long the worker leaves a freshly queued operation to a caller that is about to
  /// wait() on it (the blocking path) before running it itself.
  explicit OpQueue(std::chrono::microseconds grace = std::chrono::microseconds(1000))
      : grace_(grace) {}
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  /// Queues `work`. `callerWaits`: the issuing thread calls wait() on it next (torch's blocking
  /// calls, asyncOp false) and runs it inline, so the worker is not woken for it: a loop of
  /// blocking collectives then costs no thread wake-ups at all. The worker still runs it (after
  /// the grace period) if it comes to it first.
  void push(c10::intrusive_ptr<BraidWork> work, bool callerWaits = false);
  /// A blocking call's operation (asyncOp false: the caller waits on it next): runs it on the
  /// calling thread now and returns true when nothing is queued or running, so it cannot
  /// overtake anything; false (nothing done) otherwise, for push(). Saves the queue's round
  /// trip (push, then wait()'s runUntilDone) on the per-call path of small collectives.
  bool runIfIdle(BraidWork& work);
  /// runIfIdle's claim for an operation that runs without a Work (ProcessGroupBraid::enqueue's
  /// blocking path): true, and the queue is the caller's until release(), when nothing is queued
  /// or running; false otherwise. Throws when the queue was shut down.
  bool claimIfIdle();
  void release();
  /// Runs queued operations on the calling thread until `work` is done (others may run some).
  void runUntilDone(BraidWork* work);
  /// Waits (without running anything) until `work` is done or the timeout passes; the worker
  /// runs the queue meanwhile (woken now, as by expedite()).
  bool waitDone(BraidWork* work, std::chrono::milliseconds timeout);
  /// Keeps polling a posted work on the worker until it completes (its future needs it).
  void watch(c10::intrusive_ptr<BraidWork> work);
  /// Somebody needs queued work done without calling wait() (getFuture: DDP waits on the
  /// future): the worker runs the queue now instead of leaving the grace period.
  void expedite();
  /// Runs what is queued, then stops the worker. Idempotent. The worker holds a reference to the
  /// queue, so a queue is never destroyed under its own worker.
  void shutdown();

 private:
  struct Queued {
    c10::intrusive_ptr<BraidWork> work;
    std::chrono::steady_clock::time_point at;
  };
  void startWorkerLocked();
  void workerLoop();
  /// Runs the head of the queue (lock held on entry and exit, released while running).
  void runHead(std::unique_lock<std::mutex>& lk);
  /// Polls watched works; returns whether some remain.
  bool pollWatched();

  std::mutex mu_;
  std::condition_variable cv_;
  const std::chrono::microseconds grace_;
  std::deque<Queued> queue_;
  std::vector<c10::intrusive_ptr<BraidWork>> watched_;
  bool running_ = false;  // a queued operation is executing (inline or on the worker)
  bool stop_ = false;
  bool urgent_ = false;  // expedite() was called; cleared when the queue drains
  int waiters_ = 0;      // threads blocked in runUntilDone/waitDone
  // What the worker is waiting for: push() wakes an idle worker only. A worker in its grace wait
  // wakes up by itself when the grace ends, so back-to-back blocking collectives, which the
  // caller runs inline, cost no wake-ups at all.
  enum class WorkerState { Busy, Idle, Grace } workerState_ = WorkerState::Busy;
  std::thread worker_;
};

}  // namespace braid_torch
