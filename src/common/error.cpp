#include <braid/error.hpp>

namespace braid {

const char* toString(ErrorCode c) noexcept {
  switch (c) {
    case ErrorCode::InvalidArgument:
      return "InvalidArgument";
    case ErrorCode::Timeout:
      return "Timeout";
    case ErrorCode::PeerLost:
      return "PeerLost";
    case ErrorCode::Mismatch:
      return "Mismatch";
    case ErrorCode::Auth:
      return "Auth";
    case ErrorCode::Aborted:
      return "Aborted";
    case ErrorCode::Internal:
      return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string("braid ") + toString(code) + ": " + message),
      code_(code),
      detail_(message) {}

}  // namespace braid
