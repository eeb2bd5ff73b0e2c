// The handshake (handshake.hpp) over a socket: a blocking-style driver for the side that
// connects, bounded by a deadline, and a non-blocking session for the side that accepts, which
// an event loop feeds whenever the socket is readable, so that one slow or silent peer never
// holds up the others.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/handshake.hpp"

namespace braid::security {

using HandshakeClock = std::chrono::steady_clock;

struct InitiatorOutcome {
  bool ok = false;
  Failure failure = Failure::None;
  std::string error;
  std::vector<std::uint8_t> peerContext;  ///< the responder's context, when ok
};

/// Runs `initiator` to the end over `fd` (connected, non-blocking). Never reads past the
/// handshake's last message, so the stream after it is intact.
InitiatorOutcome runInitiator(int fd, Initiator& initiator, HandshakeClock::time_point deadline);

/// The accepting side of one connection. Does not own the socket.
class ResponderSession {
 public:
  ResponderSession(int fd, Responder responder, HandshakeClock::time_point deadline);

  enum class Progress {
    Waiting,       ///< nothing more to do until the socket is readable again
    Verified,      ///< the peer passed: call accept() or reject()
    Failed,        ///< drop the connection; failure() and error() say why
    NotHandshake,  ///< the first bytes are not a handshake; takeBuffered() returns them
  };

  /// Reads what the socket has (never past the current message) and handles it.
  Progress onReadable();
  /// Once Verified: sends the acceptance. False when the socket did not take it (drop it).
  bool accept();
  /// Once Verified: sends a refusal (best effort); the caller closes the connection.
  void reject(RejectReason reason, std::string text);

  HandshakeClock::time_point deadline() const noexcept { return deadline_; }
  Failure failure() const noexcept { return failure_; }
  const std::string& error() const noexcept { return error_; }
  const std::vector<std::uint8_t>& peerContext() const noexcept { return responder_.peerContext(); }
  std::vector<std::uint8_t> takeBuffered() { return std::move(in_); }
  /// Whether the peer sent anything at all (a connect-and-leave probe does not).
  bool sawBytes() const noexcept { return sawBytes_; }

 private:
  Progress fail(Failure f, std::string why);
  bool sendNow(const std::vector<std::uint8_t>& bytes);

  int fd_;
  Responder responder_;
  HandshakeClock::time_point deadline_;
  std::vector<std::uint8_t> in_;
  bool checkedMagic_ = false;
  bool sawBytes_ = false;
  Failure failure_ = Failure::None;
  std::string error_;
};

}  // namespace braid::security
