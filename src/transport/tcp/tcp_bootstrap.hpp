// Connection setup of the TCP transport: listen, find the peers' addresses (in the table the
// transport factory gathered, or in the store), connect to every lower rank and accept every
// higher one, each connection opened by the handshake of
// common/handshake.hpp (authenticated when the job has a key).
#pragma once

#include <atomic>
#include <braid/store.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
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

/// Where a rank finds one stream's peer listener addresses ("host:port").
class Addresses {
 public:
  virtual ~Addresses() = default;
  /// `peer`'s address, waiting up to `timeout` for it to be published; Error(Timeout) naming
  /// the peer when it is not, Error(InvalidArgument) when what it published is unusable.
  virtual std::string of(int peer, std::chrono::milliseconds timeout) = 0;
};
/// Under addressKey(peer) in `store` (the standalone transport, createTcpTransport(Store&, ...);
/// the store must outlive the lookups).
std::shared_ptr<Addresses> addressesInStore(std::shared_ptr<Store> store);
/// Word `stream` (space-separated) of entries[peer]: the table the transport factory gathered
/// with the host entries, known before the transport exists, so no lookup waits.
std::shared_ptr<Addresses> addressesInTable(std::shared_ptr<const std::vector<std::string>> entries,
                                            int stream);

/// This rank's listener of one stream, before any peer is known.
struct Listener {
  Fd fd;
  std::string address;  // "host:port" as the peers will dial it
};
/// Listens (TcpOptions' address and port range); the first step of every setup. Checks the
/// security options too, so a bad entry fails every rank before anything is published.
Listener listen(int rank, int size, const TcpOptions& options);

/// Connects this rank to every other rank over `listener`, finding them in `peers` (see
/// createTcpTransport for the protocol and errors).
Mesh connectMesh(Listener listener, Addresses& peers, int rank, int size,
                 const TcpOptions& options);

/// The store key under which `rank` publishes its listener's "host:port" (standalone).
std::string addressKey(int rank);

/// What a lazy transport's dial needs beyond connectMesh's.
struct DialHooks {
  /// Checked before each attempt: true ends the dial with an empty Fd.
  std::function<bool()> cancelled;
  /// Told the socket of the handshake in progress, then -1 (so the transport can shut it down).
  std::function<void(int)> socket;
  /// The peer's listener is known to be open for its transport's life: a refused connect is
  /// Error(PeerLost) at once instead of a retry.
  bool peerListened = false;
  /// Non-null: a responder that refuses this rank (a crossing dial that it wins) ends the dial
  /// with an empty Fd and its reason here, instead of a retry.
  std::string* refused = nullptr;
};

/// Dials rank `peer` at `address` and runs the handshake (connectMesh's connecting side:
/// retries until deadline, then Error(Timeout); Error(Auth) on a key mismatch).
Fd dialRank(int rank, int size, int peer, const std::string& address, const TcpOptions& options,
            Deadline deadline, const DialHooks& hooks);

/// The accepting side of connection setup over one listener: every incoming connection passes
/// the whitelist and the handshake (concurrently, each bounded by handshakeTimeout, strangers
/// dropped and logged) before `decide` sees the rank it claims. decide returns "" to take it
/// (then take(peer, fd) receives the socket, or an empty Fd when the peer did not take the
/// acceptance, to release what decide reserved) or the reason it refuses the rank.
class Acceptor {
 public:
  using Decide = std::function<std::string(int peer)>;
  using Take = std::function<void(int peer, Fd fd)>;
  /// `self` names this rank in logs and errors; `mesh` (eager only) names missing ranks.
  Acceptor(int rank, int size, const TcpOptions& options, std::string self, int listener,
           Decide decide, Take take, Mesh* mesh, Deadline deadline);
  ~Acceptor();
  /// Eager: until every higher rank was taken; Error(Timeout) naming the missing at deadline.
  void run();
  /// Lazy: until `stop` is set and wakeFd becomes readable. Throws only Error(Mismatch) for an
  /// authenticated rank of another world size, or Error(Internal).
  void serve(int wakeFd, const std::atomic<bool>& stop);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

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
