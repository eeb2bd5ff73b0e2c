#include "tracking.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "gil.hpp"

namespace braid_torch {

namespace {

std::string exceptionText(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

WorkTracker::~WorkTracker() {
  stop();
}

void WorkTracker::issue(const c10::intrusive_ptr<BraidWork>& work, std::uint64_t seq,
                        OpQueue& queue) {
  work->setSequence(seq);
  const bool posted = work->isPosted();
  const bool timing = timing_.load(std::memory_order_acquire);
  const bool hooked = hooked_.load(std::memory_order_acquire);
  // The common case, a queued collective with nothing switched on, costs these loads only:
  // waitForPendingWorks finds queued collectives through the queue's order instead.
  if (!posted && !timing && !hooked && !coalescing_.load(std::memory_order_acquire)) return;
  // A WorkInfo hook reports when each work started and finished, so it times them too.
  if (timing || hooked) work->enableTiming();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (posted) {
      ++pendingPosted_;
      // Completed ones leave lazily: completed() runs inside the work's own completion, which
      // must not drop what may be the last reference to it.
      // (At twice what the last purge left, so many works pending cost no scan per issue.)
      if (posted_.size() >= purgeAt_) {
        posted_.erase(
            std::remove_if(posted_.begin(), posted_.end(), [](const auto& w) { return w->done(); }),
            posted_.end());
        purgeAt_ = std::max<std::size_t>(64, 2 * posted_.size());
      }
      posted_.push_back(work);
    }
    if (coalescing_) coalesced_.push_back(work);
  }
  if (posted || hooked) work->track(shared_from_this());
  if (posted && hooked) queue.watch(work);
}

void WorkTracker::completed(BraidWork& work, const std::exception_ptr& error) {
#if BRAID_TORCH_HAS_COMPLETION_HOOKS
  // The completion-key hooks run before the work counts as done here: waitForPending returns
  // once the count fell, and by then every hook of every work it waited for has returned.
  // (hooked_: some hook is registered; without one, a completion takes the lock once.)
  if (!error && hooked_.load(std::memory_order_acquire)) {
    std::vector<std::shared_ptr<const c10d::CompletionHook>> hooks;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (const auto& h : hooks_) hooks.push_back(h.second);
    }
    if (!hooks.empty()) {
      c10d::CompletionHookArgs args;
      args.completionKey = work.getCompletionKey();
      if (work.timed())
        args.duration_ms =
            std::chrono::duration<float, std::milli>(work.finishedAt() - work.startedAt()).count();
      for (const auto& h : hooks) {
        try {
          (*h)(args);
        } catch (...) {
          std::fprintf(stderr, "[braid WARN] completion hook raised: %s\n",
                       exceptionText(std::current_exception()).c_str());
        }
      }
    }
  }
#endif
  bool notifyHook = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error && infoHook_ && !stop_) {
      infos_.push_back(std::make_shared<c10d::WorkInfo>(
          work.retrieveOpType(), work.getSequencenumber(), work.issuedAt(), work.finishedAt(),
          std::chrono::duration<float>(work.finishedAt() - work.startedAt())));
      notifyHook = true;
    }
    if (work.isPosted()) --pendingPosted_;
  }
  if (notifyHook) hookCv_.notify_one();
  cv_.notify_all();
}

void WorkTracker::enableTiming() {
  timing_.store(true, std::memory_order_release);
}

void WorkTracker::setInfoHook(InfoHook hook) {
  std::lock_guard<std::mutex> lk(mu_);
  TORCH_CHECK(!infoHook_, "braid: an on-completion hook is registered already (one per group)");
  TORCH_CHECK(!stop_, "braid: the process group was shut down; it takes no on-completion hook");
  infoHook_ = std::move(hook);
  // The thread holds the tracker: it is stopped (stop()) before the tracker goes.
  hookThread_ = std::thread([self = shared_from_this()] { self->hookLoop(); });
  hooked_.store(true, std::memory_order_release);
}

#if BRAID_TORCH_HAS_COMPLETION_HOOKS
void WorkTracker::registerHook(std::int64_t id, c10d::CompletionHook hook) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& h : hooks_)
    TORCH_CHECK(h.first != id, "braid: register_completion_hook: hook id ", id,
                " is registered already");
  hooks_.emplace_back(id, std::make_shared<const c10d::CompletionHook>(std::move(hook)));
  hooked_.store(true, std::memory_order_release);
}

void WorkTracker::unregisterHook(std::int64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it =
      std::find_if(hooks_.begin(), hooks_.end(), [&](const auto& h) { return h.first == id; });
  TORCH_CHECK(it != hooks_.end(), "braid: unregister_completion_hook: no hook with id ", id);
  hooks_.erase(it);
  hooked_.store(static_cast<bool>(infoHook_) || !hooks_.empty(), std::memory_order_release);
}
#endif

void WorkTracker::hookLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    hookCv_.wait(lk, [&] { return stop_ || !infos_.empty(); });
    if (infos_.empty()) return;  // stopped, and every queued info reported
    auto info = std::move(infos_.front());
    infos_.pop_front();
    hookRunning_ = true;
    lk.unlock();
    try {
      infoHook_(std::move(info));  // set once, before this thread started
    } catch (...) {
      std::fprintf(stderr, "[braid WARN] on-completion hook raised: %s\n",
                   exceptionText(std::current_exception()).c_str());
    }
    lk.lock();
    hookRunning_ = false;
    if (infos_.empty()) cv_.notify_all();
  }
}

void WorkTracker::checkNotHookThread() const {
  std::lock_guard<std::mutex> lk(mu_);
  TORCH_CHECK(std::this_thread::get_id() != hookThread_.get_id(),
              "braid: _wait_for_pending_works called from the on-completion hook, which would "
              "wait for itself");
}

void WorkTracker::waitForPending(OpQueue& queue, std::chrono::milliseconds timeout) {
  std::vector<c10::intrusive_ptr<BraidWork>> watch;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& w : posted_)
      if (!w->done()) watch.push_back(w);
  }
  // Posted works complete only when polled.
  for (auto& w : watch) queue.watch(std::move(w));
  NoGil nogil;  // the hook thread may need the GIL this thread holds
  std::unique_lock<std::mutex> lk(mu_);
  const bool done = cv_.wait_for(
      lk, timeout, [&] { return pendingPosted_ == 0 && infos_.empty() && !hookRunning_; });
  TORCH_CHECK(done, "braid: _wait_for_pending_works: ", pendingPosted_,
              " point-to-point operations still pending and ",
              infos_.size() + (hookRunning_ ? 1 : 0),
              " on-completion hook calls still to run after ", timeout.count(), " ms");
}

void WorkTracker::startCoalescing() {
  std::lock_guard<std::mutex> lk(mu_);
  TORCH_CHECK(!coalescing_,
              "braid: startCoalescing while coalescing already (each _coalescing_manager must "
              "end before the next starts)");
  coalescing_ = true;
}

c10::intrusive_ptr<BraidWork> WorkTracker::endCoalescing(const std::shared_ptr<OpQueue>& queue) {
  std::vector<c10::intrusive_ptr<BraidWork>> works;
  {
    std::lock_guard<std::mutex> lk(mu_);
    TORCH_CHECK(coalescing_, "braid: endCoalescing without startCoalescing");
    coalescing_ = false;
    works.swap(coalesced_);
  }
  std::vector<at::Tensor> outputs;
  for (const auto& w : works) {
    auto r = w->result();
    outputs.insert(outputs.end(), r.begin(), r.end());
  }
  auto firstError = [](const std::vector<c10::intrusive_ptr<BraidWork>>& ws) {
    for (const auto& w : ws)
      if (auto e = w->exception()) std::rethrow_exception(e);
  };
  std::weak_ptr<OpQueue> weakQueue = queue;
  return c10::make_intrusive<BraidWork>(
      queue, c10d::OpType::COALESCED, "braid:coalesced", std::vector<at::Tensor>{},
      std::move(outputs),
      [works, weakQueue, firstError] {
        for (const auto& w : works)
          if (!w->isCompleted()) {
            // A queued collective is run by the queue: somebody waits for it now.
            if (!w->isPosted())
              if (auto q = weakQueue.lock()) q->expedite();
            return false;
          }
        firstError(works);
        return true;
      },
      [works, firstError] {
        for (const auto& w : works) {
          try {
            w->wait();
          } catch (...) {
            // Reported below, in issue order, once every one of them finished.
          }
        }
        firstError(works);
      });
}

void WorkTracker::stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    t.swap(hookThread_);
  }
  hookCv_.notify_all();
  if (!t.joinable()) return;
  if (t.get_id() == std::this_thread::get_id()) {
    t.detach();  // the group was destroyed from its own hook
    return;
  }
  NoGil nogil;  // the hook it runs may need the GIL
  t.join();
}

}  // namespace braid_torch
