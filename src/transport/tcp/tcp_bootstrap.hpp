// Connection setup of the TCP transport: listen, publish the address in the store, connect to
// every lower rank and accept every higher one, each connection opened by the handshake of
// common/handshake.hpp (authenticated when the job has a key).
#pragma once

#include <braid/store.hpp>
#include <cstdint>
#include <optional>
#include <span>
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

/// What a rank binds into its handshake: u32 rank, u32 world size (little-endian).
struct RankContext {
  int rank = -1;
  int size = -1;
};
inline constexpr std::size_t kRankContextBytes = 8;
std::vector<std::uint8_t> encodeRankContext(int rank, int size);
/// nullopt unless exactly kRankContextBytes with 0 <= rank < size <= INT32_MAX.
std::optional<RankContext> decodeRankContext(std::span<const std::uint8_t> bytes);

}  // namespace braid::transport::tcp
