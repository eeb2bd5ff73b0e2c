// Connection setup of the TCP transport: listen, publish the address in the store, connect to
// every lower rank and accept every higher one.
#pragma once

#include <braid/store.hpp>
#include <string>
#include <vector>

#include "transport/tcp/socket.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace braid::transport::tcp {

struct PeerLink {
  std::string address;  // "host:port" the peer listens on (as published)
  Fd fd;                // connected, non-blocking, TCP_NODELAY; empty for this rank itself
};

struct Mesh {
  std::vector<PeerLink> links;  // indexed by rank
};

/// Connects this rank to every other rank (see createTcpTransport for the protocol and errors).
Mesh connectMesh(Store& store, int rank, int size, const TcpOptions& options);

}  // namespace braid::transport::tcp
