// Sockets for the TCP transport: an owning file descriptor, address parsing, and the bounded
// blocking-style helpers used while connections are set up (the data path is in
// tcp_transport.cpp).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/fd.hpp"
#include "common/socket_address.hpp"
#include "transport/transport.hpp"

namespace braid::transport::tcp {

// The fd owner, errno text and address helpers are braid's one set (common/fd.hpp,
// common/socket_address.hpp), named here for the transport's code.
using braid::describeAddress;
using braid::errnoText;
using braid::Fd;
using braid::formatHostPort;
using braid::HostPort;
using braid::parseHostPort;
using braid::setNoDelay;

/// A non-blocking listening socket bound to host on an ephemeral port, or, with portLow != 0,
/// on the first free port of [portLow, portHigh] (BRAID_PORT_RANGE). Accepted sockets inherit
/// the buffer sizes (set before listen so the window scale is negotiated for them).
/// Throws Error(InvalidArgument) for an unusable host or a range without a free port (naming
/// the range), Error(Internal) on a failed system call.
Fd listenOn(const std::string& host, std::size_t bufferBytes, std::uint16_t& port,
            std::uint16_t portLow = 0, std::uint16_t portHigh = 0);

/// One non-blocking connect attempt, bounded by deadline. Returns the connected socket, or an
/// empty Fd with `error` describing why not.
Fd connectTo(const HostPort& address, std::size_t bufferBytes, Deadline deadline,
             std::string& error);

/// Waits for one incoming connection until deadline; empty Fd on timeout.
Fd acceptFrom(int listenFd, Deadline deadline);

struct Accepted {
  Fd fd;  ///< empty when no connection was pending
  sockaddr_storage address{};
  socklen_t length = 0;
};
/// Takes one pending connection (non-blocking) with the peer's address; an empty fd when none
/// is pending. Throws Error(Internal) when accept fails for a reason other than a lack of
/// connections or of descriptors (EMFILE leaves the connection in the backlog, for later).
Accepted acceptPending(int listenFd);

/// Sends / receives exactly `bytes` on a non-blocking socket, polling until deadline. Return
/// false with `error` set on timeout, EOF or a socket error.
bool sendExactly(int fd, const void* data, std::size_t bytes, Deadline deadline,
                 std::string& error);
bool recvExactly(int fd, void* data, std::size_t bytes, Deadline deadline, std::string& error);

/// Milliseconds from now until deadline, clamped to [0, capMs].
int millisecondsUntil(Deadline deadline, int capMs);

}  // namespace braid::transport::tcp
