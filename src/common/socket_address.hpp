// Socket addresses as braid prints and parses them ("host:port", "[v6]:port"), shared by the
// store, the transports and the launch-information parser; and TCP_NODELAY.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace braid {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

/// Parses "host:port" or "[v6addr]:port" (port 0-65535); empty for anything else.
std::optional<HostPort> parseHostPort(std::string_view text);

/// "host:port", with brackets around an IPv6 literal: "[fe80::1]:29500".
std::string formatHostPort(const std::string& host, std::uint16_t port);

/// The numeric host of a socket address ("10.0.0.2", "fe80::1%eth0"); empty on failure.
std::string numericHost(const sockaddr* addr, socklen_t len);

/// The port of an AF_INET/AF_INET6 socket address; 0 otherwise.
std::uint16_t portOf(const sockaddr* addr) noexcept;

/// "host:port" (numeric) of a socket address; "an unknown address" when it has none.
std::string describeAddress(const sockaddr* addr, socklen_t len);

/// Sets TCP_NODELAY: braid's messages are written in one call and are latency-bound.
void setNoDelay(int fd) noexcept;

}  // namespace braid
