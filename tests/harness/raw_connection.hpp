// A plain TCP connection for tests that send what no braid client would (garbage, forged
// handshakes, half frames) to a store or a rank's listen port, and watch how the server reacts.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace braid::test {

class RawConnection {
 public:
  /// Connects to host:port (IPv4). With fromHost > 0 the connection comes from 127.0.0.<fromHost>
  /// (tests that need several client hosts on loopback).
  RawConnection(const std::string& host, std::uint16_t port, int fromHost = 0)
      : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (fromHost > 0) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      from.sin_addr.s_addr = htonl(0x7f000000u | static_cast<std::uint32_t>(fromHost));
      ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  /// To 127.0.0.1:port.
  explicit RawConnection(std::uint16_t port, int fromHost = 0)
      : RawConnection("127.0.0.1", port, fromHost) {}
  /// To "host:port" (an address as ranks publish it).
  explicit RawConnection(const std::string& hostPort)
      : RawConnection(
            hostPort.substr(0, hostPort.rfind(':')),
            static_cast<std::uint16_t>(std::stoi(hostPort.substr(hostPort.rfind(':') + 1)))) {}
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  /// Sends all of it; false when the connection fails first.
  bool send(const std::uint8_t* p, std::size_t n) {
    while (n > 0) {
      const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (k <= 0) return false;
      p += k;
      n -= static_cast<std::size_t>(k);
    }
    return true;
  }
  bool send(const std::vector<std::uint8_t>& b) { return send(b.data(), b.size()); }

  /// Bytes received within `within`: > 0 data, 0 EOF, < 0 nothing yet.
  ssize_t recvSome(std::uint8_t* buf, std::size_t n, std::chrono::milliseconds within) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(within.count())) <= 0) return -1;
    return ::recv(fd_, buf, n, 0);
  }

  /// True when the peer closes (or resets) the connection within `within`; whatever it sent
  /// first is read and dropped.
  bool closedByPeer(std::chrono::milliseconds within) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + within;
    std::uint8_t buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;
    }
    return false;
  }

 private:
  int fd_;
  bool connected_ = false;
};

}  // namespace braid::test
