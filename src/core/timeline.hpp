// BRAID_TIMELINE=FILE: every operation of a communicator as Chrome Trace Event Format JSON
// (chrome://tracing, https://ui.perfetto.dev). Per operation one complete event ("ph":"X")
// spanning issue to completion, with two children: "queued" (issued -> started) and "running"
// (started -> finished; algorithm and bytes in args). Operations that overlap (asynchronous
// ones waiting in the queue, point-to-point in flight) go to different lanes ("tid"), so events
// of one lane nest properly. Written incrementally: events collect in a buffer allocated once
// and go to the file when it is half full and when the communicator is destroyed, which also
// closes the JSON array (a file cut short by a crash lacks only the closing bracket, which the
// format allows).
#pragma once

#include <array>
#include <chrono>
#include <mutex>
#include <string>

#include "common/fd.hpp"
#include "core/flight_recorder.hpp"

namespace braid::core {

class Timeline {
 public:
  /// Creates (truncates) `path`; throws Error(InvalidArgument) naming BRAID_TIMELINE and the
  /// path when it cannot be opened.
  Timeline(const std::string& path, int rank, const std::string& commId, Clock::time_point origin);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// One finished operation. started == Clock::time_point{}: it never ran (failed queued).
  void record(const OpDesc& d, std::uint64_t bytes, const char* algorithm, OpState state,
              Clock::time_point issued, Clock::time_point started, Clock::time_point finished,
              const char* error);
  /// The straggler verdict on collective `seq` (core/straggler.hpp), found after it finished:
  /// an instant event ("ph":"i", category "straggler") at its start `at`.
  void straggler(std::uint64_t seq, Collective coll, int lastRank, std::int64_t lateNs,
                 Clock::time_point at);
  /// Writes the buffered events to the file.
  void flush();

  /// The file of one rank: "%r" -> rank, "%c" -> communicator id ('/' -> '-'), "%p" -> pid,
  /// "%%" -> '%'. A pattern without "%r" gets ".rank<r>" inserted before a ".json" suffix (or
  /// appended), and, for communicators other than "0", ".comm<id>" before that.
  static std::string expandPath(const std::string& pattern, int rank, const std::string& commId);

 private:
  void append(const char* text, std::size_t n);
  double micros(Clock::time_point t) const;

  static constexpr std::size_t kBufferBytes = 64 * 1024;
  static constexpr int kLanes = 32;
  std::mutex mu_;
  Fd fd_;
  int rank_;
  std::string buffer_;  // reserved once
  bool first_ = true;
  Clock::time_point origin_;
  double originWallMicros_;
  std::array<Clock::time_point, kLanes> laneBusyUntil_{};
  std::array<bool, kLanes> laneNamed_{};
};

}  // namespace braid::core
