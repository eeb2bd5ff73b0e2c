// What a group does with the works it hands out besides running them (ProcessGroupBraid owns
// one WorkTracker): coalescing (torch's startCoalescing/endCoalescing, which
// _coalescing_manager(device=...) and batch_isend_irecv use), collectives timing
// (enableCollectivesTiming, then Work._get_duration), completion hooks (registerOnCompletionHook
// with a WorkInfo per work; torch >= 2.15 also registerCompletionHook) and waitForPendingWorks.
//
// Every work passes issue() before it can run or complete, and completed() once it completed, on
// the thread that completed it (the caller in wait(), the queue's worker, a poller).
//
// Hooks fire for works that completed successfully only: torch's rule for its completion hooks
// (a failed work reported as completed would hide the one fact a post-mortem needs); a failure
// runs the abort hooks instead. The WorkInfo hook (torch wraps a Python callable, which takes
// the GIL) runs on a thread of the tracker's own, in completion order, so neither a caller's
// wait() nor the queue's worker runs Python code or waits for the GIL. The completion-key hooks
// run on the completing thread (torch asks them to be short, take no GIL and not call back).
// While any hook is registered, posted point-to-point works are polled by the queue's worker
// (OpQueue::watch), so they complete, and fire, without anybody calling wait().
//
// Coalescing: ops issued between startCoalescing and endCoalescing run as they always do
// (collectives queued in issue order, point-to-point posted at once, which is what NCCL's group
// calls buy on a GPU); endCoalescing returns one work over all of them: completed when each is,
// with the first error in issue order, its result their outputs in issue order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "torch_compat.hpp"
#include "work.hpp"

namespace braid_torch {

class WorkTracker : public std::enable_shared_from_this<WorkTracker> {
 public:
  using InfoHook = std::function<void(std::shared_ptr<c10d::WorkInfo>)>;

  WorkTracker() = default;
  ~WorkTracker();
  WorkTracker(const WorkTracker&) = delete;
  WorkTracker& operator=(const WorkTracker&) = delete;

  /// Before `work` can run: its sequence number, timing when enabled; a posted work is counted
  /// until it completes, and watched by `queue` while hooks are registered; recorded while
  /// coalescing. A queued collective with nothing switched on is not tracked at all.
  void issue(const c10::intrusive_ptr<BraidWork>& work, std::uint64_t seq, OpQueue& queue);
  /// `work` completed (`error`: null on success): fires the hooks, counts it done.
  void completed(BraidWork& work, const std::exception_ptr& error);

  /// Works issued from now on record when they started and finished (Work._get_duration).
  void enableTiming();
  /// torch's registerOnCompletionHook: once per group.
  void setInfoHook(InfoHook hook);
#if BRAID_TORCH_HAS_COMPLETION_HOOKS
  void registerHook(std::int64_t id, c10d::CompletionHook hook);
  void unregisterHook(std::int64_t id);
#endif
  /// Throws when called on the hook thread (waitForPendingWorks would wait for itself).
  void checkNotHookThread() const;
  /// Waits until every posted work issued completed, its completion-key hooks returned, and the
  /// WorkInfo hook returned for every work that completed (posted works are watched meanwhile; the
  /// GIL is released); the queued collectives are the caller's
  /// (ProcessGroupBraid::waitForPendingWorks runs the queue first). Throws after `timeout`, saying
  /// how many are left.
  void waitForPending(OpQueue& queue, std::chrono::milliseconds timeout);

  /// Nothing is switched on that needs a Work of each collective: no timing, no completion
  /// hook, not coalescing (ProcessGroupBraid::enqueue's blocking path).
  bool quiet() const {
    return !timing_.load(std::memory_order_acquire) && !hooked_.load(std::memory_order_acquire) &&
           !coalescing_.load(std::memory_order_acquire);
  }
  /// Between startCoalescing and endCoalescing (the works issued are recorded).
  bool coalescing() const {
    return coalescing_.load(std::memory_order_acquire);
  }
  /// Starts recording the works issued (torch's startCoalescing); not again before end.
  void startCoalescing();
  /// The works issued since startCoalescing, as one (see the top of this file); a completed
  /// work when there were none.
  c10::intrusive_ptr<BraidWork> endCoalescing(const std::shared_ptr<OpQueue>& queue);

  /// Runs the WorkInfo hooks still queued, then stops their thread (GIL released meanwhile).
  void stop();

 private:
  void hookLoop();

  mutable std::mutex mu_;
  std::condition_variable cv_;  // pendingPosted_ fell to 0 or infos_ drained (waitForPending)
  std::atomic<bool> timing_{false};
  std::atomic<bool> hooked_{false};  // a hook is registered: posted works get watched
  std::uint64_t pendingPosted_ = 0;  // posted works issued, not completed
  // Posted works not completed: watched by waitForPending (they complete only when polled).
  std::vector<c10::intrusive_ptr<BraidWork>> posted_;
  std::size_t purgeAt_ = 64;  // posted_'s size at which the completed ones are dropped
  std::atomic<bool> coalescing_{false};
  std::vector<c10::intrusive_ptr<BraidWork>> coalesced_;
  // The WorkInfo hook and its thread.
  InfoHook infoHook_;
  std::deque<std::shared_ptr<c10d::WorkInfo>> infos_;
  bool hookRunning_ = false;
  bool stop_ = false;
  std::condition_variable hookCv_;
  std::thread hookThread_;
#if BRAID_TORCH_HAS_COMPLETION_HOOKS
  std::vector<std::pair<std::int64_t, std::shared_ptr<const c10d::CompletionHook>>> hooks_;
#endif
};

}  // namespace braid_torch
