// braid-check's command line.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace braid::check {

struct CheckArgs {
  std::optional<std::string> jsonPath;  // "-": stdout
  bool quick = false;
  /// Bound on connecting (store, peers), on every operation and on waiting for another rank's
  /// results; unset: BRAID_CONNECT_TIMEOUT for connecting and waiting, BRAID_EXEC_TIMEOUT for
  /// operations.
  std::optional<std::chrono::milliseconds> timeout;
  std::size_t latencyBytes = 8;
  std::size_t bandwidthBytes = std::size_t{4} << 20;
  int latencyIters = 200;
  int bandwidthIters = 20;
  std::size_t collectiveBytes = std::size_t{1} << 20;
  bool strict = false;  // outliers fail the check instead of warning
  bool help = false;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws UsageError naming the offending argument. --quick changes the defaults of the sizes
/// and iteration counts that are not given explicitly.
CheckArgs parseCheckArgs(int argc, char** argv);

extern const char* const kCheckUsage;

}  // namespace braid::check
