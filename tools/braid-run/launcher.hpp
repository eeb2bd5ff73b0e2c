// Starts the local ranks of a job and supervises them until every one has exited: relays their
// output line by line, stops the others when one fails, forwards SIGINT/SIGTERM/SIGHUP, and
// enforces an optional wall-clock limit.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace braid::run {

/// One process to start: its global rank (used in messages and the output prefix), the
/// program with its arguments, and its complete environment ("NAME=value").
struct RankSpec {
  int rank = 0;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::vector<int> cpus;  // the CPUs it is bound to (sched_setaffinity before exec); empty: none
};

struct LaunchSettings {
  /// Prefix every output line with "[R] ".
  bool prefixOutput = true;
  /// After SIGTERM, wait this long before SIGKILL.
  std::chrono::milliseconds grace{3000};
  /// Stop everything and fail after this long (exit code 124).
  std::optional<std::chrono::milliseconds> timeout;
  /// Ranks that may fail (non-zero exit or a signal) without stopping the others
  /// (--max-failures): the job goes on, and its exit code is 0 when every other rank exits 0.
  int maxFailures = 0;
};

/// Exit code of braid-run when the time limit ends the job (as timeout(1)).
inline constexpr int kTimeoutExitCode = 124;

/// Runs every rank to completion. Returns braid-run's exit code: 0 when every rank exited 0
/// (or at most maxFailures failed and every other exited 0);
/// else the first failing rank's status (beyond the tolerated ones) (exit code, or 128 + signal),
/// 124 on timeout, or 128 + signal when braid-run itself was asked to stop.
int launch(const std::vector<RankSpec>& ranks, const LaunchSettings& settings);

}  // namespace braid::run
