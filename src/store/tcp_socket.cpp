#include "store/tcp_socket.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cstring>

namespace braid::store_socket {

void Fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string errnoText(int err) {
  const char* name = ::strerrorname_np(err);
  char buf[256];
  const char* desc = ::strerror_r(err, buf, sizeof buf);  // GNU variant: returns the text
  return std::string(name != nullptr ? name : "errno " + std::to_string(err)) + " (" + desc + ")";
}

std::string formatHostPort(const std::string& host, std::uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string numericHost(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST];
  if (::getnameinfo(addr, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return host;
}

std::uint16_t portOf(const sockaddr* addr) noexcept {
  if (addr->sa_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in*>(addr)->sin_port);
  if (addr->sa_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(addr)->sin6_port);
  return 0;
}

void setNoDelay(int fd) noexcept {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace braid::store_socket
