// The one owner of a file descriptor (sockets, epoll sets, eventfds, memfds, pidfds, pipes,
// files) used everywhere in braid, and the text of an errno value for error messages.
#pragma once

#include <string>

namespace braid {

/// Owns one file descriptor and closes it on destruction; movable, not copyable. Empty (-1)
/// when default-constructed, moved from or released.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives the descriptor up without closing it.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes the held descriptor (if any) and holds `fd` instead.
  void reset(int fd = -1) noexcept;
  /// Closes the held descriptor now and reports close(2)'s result: 0, or the errno value (a
  /// file whose last write fails only at close). Empty afterwards either way.
  int close() noexcept;

 private:
  int fd_ = -1;
};

/// "ECONNREFUSED (Connection refused)": the errno's name and its text.
std::string errnoText(int err);

}  // namespace braid
