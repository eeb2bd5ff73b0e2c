// Completion state shared by a Work handle and the operation that fills it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>

namespace braid::detail {

using WorkClock = std::chrono::steady_clock;

/// What lets the thread that waits on (or tests) a Work move the operation itself instead of
/// sleeping until another thread did: an asynchronous send/recv posted to the transport
/// (Comm::Impl::Inflight, comm.cpp).
class WorkDriver {
 public:
  enum class Result { Finished, TimedOut, Busy };
  virtual ~WorkDriver() = default;
  /// Drives the operation until it finished (Finished: the WorkState is done) or `until` passed
  /// (TimedOut; the operation goes on). Busy: another thread drives it, or its communicator is
  /// gone; the caller sleeps on the WorkState instead.
  virtual Result drive(std::optional<WorkClock::time_point> until) = 0;
  /// One non-blocking attempt (Work::test). Never throws.
  virtual void poll() = 0;
};

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::exception_ptr error;
  // Guarded by mu. `driver` is set once the operation is posted (send/recv only); `changes`
  // counts the moments a sleeping waiter may now drive it itself (posted, or a driver let go).
  std::weak_ptr<WorkDriver> driver;
  std::uint64_t changes = 0;

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      error = std::move(e);
      done.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }
  /// Tells sleeping waiters to look again (a driver was set or let go).
  void changed() {
    {
      std::lock_guard<std::mutex> lk(mu);
      ++changes;
    }
    cv.notify_all();
  }
  void setDriver(std::weak_ptr<WorkDriver> d) {
    {
      std::lock_guard<std::mutex> lk(mu);
      driver = std::move(d);
      ++changes;
    }
    cv.notify_all();
  }
  /// Waits until done (true) or `until` (false). Drives the operation where it can (WorkDriver),
  /// else spins briefly (the op may be nearly done), then sleeps.
  bool waitUntil(std::optional<WorkClock::time_point> until);
  /// Work::test: drives one step where it can. True when done.
  bool poll();
};

}  // namespace braid::detail
