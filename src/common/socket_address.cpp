#include "common/socket_address.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <charconv>

namespace braid {

std::optional<HostPort> parseHostPort(std::string_view text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) return {};
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return {};
    host = host.substr(1, host.size() - 2);
  }
  const std::string_view portText = text.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (ec != std::errc() || end != portText.data() + portText.size() || port > 65535) return {};
  return HostPort{std::string(host), static_cast<std::uint16_t>(port)};
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

std::string describeAddress(const sockaddr* addr, socklen_t len) {
  const std::string host = numericHost(addr, len);
  if (host.empty()) return "an unknown address";
  return formatHostPort(host, portOf(addr));
}

void setNoDelay(int fd) noexcept {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace braid
