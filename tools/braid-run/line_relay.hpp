// Relays one output stream of one rank to braid-run's own stdout or stderr, whole lines at a
// time, each prefixed with "[R] ". Every write() carries complete lines only, so lines of
// different ranks never interleave mid-line (a single-threaded poll loop owns every relay).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace braid::run {

class LineRelay {
 public:
  /// Lines longer than this without a newline are cut (written as a line of their own), so a
  /// rank that never prints '\n' cannot make braid-run buffer without bound.
  static constexpr std::size_t kMaxLineBytes = std::size_t{64} * 1024;

  LineRelay(int outFd, std::string prefix) : outFd_(outFd), prefix_(std::move(prefix)) {}

  /// Appends bytes read from the rank and writes out every complete line.
  void feed(std::string_view bytes);
  /// End of the stream: writes the unterminated last line, if any, with a newline added.
  void finish();

 private:
  void emit(std::string_view text);

  int outFd_;
  std::string prefix_;
  std::string partial_;  // bytes after the last newline seen
  std::string out_;      // reused output buffer
  bool broken_ = false;  // the output fd failed (EPIPE...): discard from now on
};

/// Writes all of `text` to fd, retrying partial writes and EINTR. False on any other error.
bool writeAll(int fd, std::string_view text);

}  // namespace braid::run
