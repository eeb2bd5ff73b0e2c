// Small socket helpers shared by the TCP store's server and client: an owning fd, errno text and
// address formatting.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <utility>

namespace braid::store_socket {

/// Owns one file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

/// "ECONNREFUSED (Connection refused)".
std::string errnoText(int err);

/// "host:port", or "[v6]:port" when host is an IPv6 literal.
std::string formatHostPort(const std::string& host, std::uint16_t port);

/// The numeric host of a socket address ("10.0.0.2", "fe80::1%eth0"); empty on failure.
std::string numericHost(const sockaddr* addr, socklen_t len);

/// The port of an AF_INET/AF_INET6 socket address; 0 otherwise.
std::uint16_t portOf(const sockaddr* addr) noexcept;

/// Disables Nagle's algorithm: store requests are small and latency-bound.
void setNoDelay(int fd) noexcept;

}  // namespace braid::store_socket
