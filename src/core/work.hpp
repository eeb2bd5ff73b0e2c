// Completion state shared by a Work handle and the operation that fills it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>

namespace braid::detail {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::exception_ptr error;

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      error = std::move(e);
      done.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }
  /// Spins briefly (the op may be nearly done), then sleeps. False on timeout.
  bool waitFor(std::optional<std::chrono::milliseconds> timeout);
};

}  // namespace braid::detail
