#include "core/work.hpp"

#include <braid/comm.hpp>

#include <thread>

namespace braid {
namespace detail {

bool WorkState::waitFor(std::optional<std::chrono::milliseconds> timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto spinUntil = start + std::chrono::microseconds(50);
  while (!done.load(std::memory_order_acquire)) {
    if (Clock::now() >= spinUntil) break;
  }
  std::unique_lock<std::mutex> lk(mu);
  auto isDone = [&] { return done.load(std::memory_order_acquire); };
  if (!timeout) {
    cv.wait(lk, isDone);
    return true;
  }
  return cv.wait_until(lk, start + *timeout, isDone);
}

}  // namespace detail

bool Work::test() const { return state_ == nullptr || state_->done.load(std::memory_order_acquire); }

void Work::wait() const {
  if (state_ == nullptr) return;
  state_->waitFor(std::nullopt);
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  if (state_ == nullptr) return true;
  if (!state_->waitFor(timeout)) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

}  // namespace braid
