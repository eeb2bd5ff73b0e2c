// braid public API: the one exception type every failure is reported with.
#pragma once

#include <stdexcept>
#include <string>

namespace braid {

enum class ErrorCode {
  InvalidArgument,  ///< a caller passed something braid cannot run (names the argument)
  Timeout,          ///< an operation or connection did not complete within its deadline
  PeerLost,         ///< a peer closed its connection or died (names the rank and address)
  Mismatch,         ///< ranks called different operations, or sizes disagree on the wire
  Auth,             ///< a connection failed authentication
  Aborted,          ///< the communicator was aborted
  Internal,         ///< a system call failed unexpectedly (message has errno text)
};

const char* toString(ErrorCode c) noexcept;

/// Thrown by every braid call that fails; what() starts with "braid <code>: ".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }
  /// The message without the "braid <code>: " prefix.
  const std::string& detail() const noexcept { return detail_; }

 private:
  ErrorCode code_;
  std::string detail_;
};

}  // namespace braid
