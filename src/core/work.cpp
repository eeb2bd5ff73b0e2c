#include "core/work.hpp"

#include <braid/comm.hpp>
#include <thread>

namespace braid {
namespace detail {

bool WorkState::waitUntil(std::optional<WorkClock::time_point> until) {
  bool spun = false;
  for (;;) {
    std::shared_ptr<WorkDriver> d;
    std::uint64_t seen;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (done.load(std::memory_order_acquire)) return true;
      d = driver.lock();
      seen = changes;
    }
    if (d) {
      switch (d->drive(until)) {
        case WorkDriver::Result::Finished:
          return true;
        case WorkDriver::Result::TimedOut:
          return done.load(std::memory_order_acquire);
        case WorkDriver::Result::Busy:
          break;
      }
    } else if (!spun) {
      // Queued on the worker: it may be about to finish.
      spun = true;
      const auto spinUntil = WorkClock::now() + std::chrono::microseconds(50);
      while (!done.load(std::memory_order_acquire) && WorkClock::now() < spinUntil) {
      }
      continue;
    }
    // Nothing to drive here: sleep until done, or until a driver appears or lets go.
    std::unique_lock<std::mutex> lk(mu);
    auto ready = [&] { return done.load(std::memory_order_acquire) || changes != seen; };
    if (!until) {
      cv.wait(lk, ready);
    } else if (!cv.wait_until(lk, *until, ready)) {
      return false;
    }
  }
}

bool WorkState::poll() {
  if (done.load(std::memory_order_acquire)) return true;
  std::shared_ptr<WorkDriver> d;
  {
    std::lock_guard<std::mutex> lk(mu);
    d = driver.lock();
  }
  if (d) d->poll();
  return done.load(std::memory_order_acquire);
}

}  // namespace detail

bool Work::test() const {
  return state_ == nullptr || state_->poll();
}

void Work::wait() const {
  if (state_ == nullptr) return;
  state_->waitUntil(std::nullopt);
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  if (state_ == nullptr) return true;
  if (!state_->waitUntil(detail::WorkClock::now() + timeout)) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

}  // namespace braid
