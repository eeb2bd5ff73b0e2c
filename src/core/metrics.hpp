// Per-communicator metrics in the OpenMetrics text format (docs/troubleshooting.md, "Metrics"):
// operations, bytes, time per collective and algorithm (histograms), errors, and, from the
// straggler analysis (core/straggler.hpp), the rank that arrived last, its lateness and how
// long each rank waited for it.
//
// Written to BRAID_METRICS_FILE (per rank, "%r" -> rank) every BRAID_METRICS_INTERVAL and at
// destruction (written to a temporary file and renamed, so a reader never sees half a file),
// and served by one small HTTP/1.1 server per process on BRAID_METRICS_PORT (GET /metrics, all
// live communicators of the process in one exposition). Recording costs two plain additions
// per collective (collectives finish one at a time, so their counters have a single writer and
// need no atomic read-modify-write; point-to-point operations, which complete concurrently, use
// atomic additions), and only when metrics are on.
#pragma once

#include <array>
#include <atomic>
#include <braid/error.hpp>
#include <braid/types.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/straggler.hpp"

namespace braid::core {

/// Each collective's untimed operations of the algorithm it ran last, counted apart from the
/// Metrics: the communicator keeps these beside the fields every operation reads anyway, so the
/// common case is two plain additions, with no call and no pointer to follow. Everything else
/// (timed operations, another algorithm, point-to-point) goes to Metrics::opDone, which, when a
/// collective changes algorithm, moves the counts into that algorithm's series inside a
/// sequence-lock write that render() reads around. One writer: the thread that runs the
/// collectives.
class OpCounters {
 public:
  /// Counts a collective that ran `algorithm` again: true; false when Metrics::opDone must.
  bool count(Collective c, const char* algorithm, std::uint64_t bytes) noexcept {
    const auto i = static_cast<std::size_t>(c);
    if (i >= kCollectives || algorithm == nullptr ||
        e_[i].algorithm.load(std::memory_order_relaxed) != algorithm)
      return false;
    bump(e_[i].ops, 1);
    bump(e_[i].bytes, bytes);
    return true;
  }
  /// A counter with one writer: a plain load and store (no locked instruction); readers still
  /// see whole values.
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }

 private:
  friend class Metrics;
  static constexpr std::size_t kCollectives = static_cast<std::size_t>(Collective::Send);
  struct Entry {
    std::atomic<const char*> algorithm{nullptr};
    std::atomic<std::uint64_t> ops{0}, bytes{0};
    std::atomic<int> slot{-1};  // the index of `algorithm`'s series in Metrics' row
  };
  std::array<Entry, kCollectives> e_;
  std::atomic<std::uint64_t> fold_{0};  // odd while Metrics::opDone moves counts out of e_
};

class Metrics {
 public:
  /// `fast`: the communicator's OpCounters, which it keeps for as long as this object (nullptr:
  /// this object keeps its own).
  Metrics(std::string commId, int rank, int size, OpCounters* fast = nullptr);

  /// A completed operation; ns < 0: not timed precisely (counted, not in the histogram).
  /// Collectives only from the thread that ran it, one at a time. The communicator counts the
  /// common case itself first (OpCounters::count) and calls this for the others.
  void opDone(Collective c, const char* algorithm, std::uint64_t bytes, std::int64_t ns);
  void opFailed(Collective c, ErrorCode code);
  /// A copy of the straggler analysis (rank 0, or Comm::stragglerReport on every rank).
  void setStraggler(const StragglerStats& s);

  /// Histogram upper bounds in seconds: 1 us * 4^k up to 16 s, then +Inf.
  static constexpr int kBuckets = 13;
  static double bucketBound(int k);

  /// The OpenMetrics exposition of these communicators (one family after the other), ending
  /// with "# EOF".
  static std::string render(const std::vector<const Metrics*>& comms);

 private:
  // One (collective, algorithm) pair. The histogram holds the timed operations only.
  struct Slot {
    std::atomic<const char*> algorithm{nullptr};  // static storage (the registry's names)
    std::atomic<std::uint64_t> ops{0}, bytes{0}, ns{0};
    std::array<std::atomic<std::uint64_t>, kBuckets + 1> buckets{};  // not cumulative; +Inf last
  };
  static constexpr int kCollectives = static_cast<int>(Collective::Recv) + 1;
  static constexpr int kAlgorithms = 8;  // per collective; more share the last slot
  struct Series {                        // a copy for rendering
    Collective coll;
    const char* algorithm;
    std::uint64_t ops = 0, bytes = 0;
    double seconds = 0;
    std::array<std::uint64_t, kBuckets + 1> buckets{};
  };
  struct ErrorCount {
    Collective coll;
    ErrorCode code;
    std::uint64_t n = 0;
  };
  std::string labels() const;
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t v) { OpCounters::bump(a, v); }

  const std::string commId_;
  const int rank_, size_;
  OpCounters own_;    // when the constructor was given none
  OpCounters* fast_;  // the communicator's, or own_
  std::array<std::array<Slot, kAlgorithms>, kCollectives> slots_;
  mutable std::mutex mu_;  // errors and the straggler analysis
  std::vector<ErrorCount> errors_;
  bool hasStraggler_ = false;
  StragglerStats straggler_;
};

/// Validates and writes the exposition to `path` (tmp + rename); false on an I/O error.
bool writeMetricsFile(const std::string& path, const std::string& text);

/// The process's metrics registry and HTTP server. A communicator with metrics registers its
/// Metrics (and unregisters before it is destroyed); the first one with a port starts the
/// server. Port 0 picks a free one; the bound port is returned (or -1 with `error` set).
class MetricsServer {
 public:
  static void add(const Metrics* m);
  static void remove(const Metrics* m);
  /// Starts the server on address:port unless it runs; returns the port it listens on.
  static int serve(const std::string& address, int port, std::string* error);
};

/// The communicator's metrics thread: every `interval`, runs `tick` (the straggler exchange and
/// the file). stop() runs `tick` a last time only if asked.
class MetricsThread {
 public:
  MetricsThread(std::chrono::milliseconds interval, std::function<void()> tick);
  ~MetricsThread();
  void stop();

 private:
  std::chrono::milliseconds interval_;
  std::function<void()> tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace braid::core
