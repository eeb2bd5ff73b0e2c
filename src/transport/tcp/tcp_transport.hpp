// The TCP transport: one connection per pair of ranks, driven by the thread that waits.
//
// Data path. Every socket is non-blocking with TCP_NODELAY and sits in one epoll set per
// transport. A message is a 16-byte frame header {tag, bytes} followed by the payload. Sends go
// out with one sendmsg of header + payload (several queued messages batched); a receive reads
// the header, checks tag and size against the posted receive, then reads the payload straight
// into the caller's buffer. Small frames are read in bulk through a small per-peer staging
// buffer, so a stream of small messages costs one recv per burst rather than two per message.
//
// Progress. The thread that waits moves the bytes: postSend/postRecv try the socket at once,
// wait() spins for TcpOptions::spin driving the sockets itself, then sleeps in epoll_wait. One
// background thread per transport drives I/O only while sends (or large receives) are
// outstanding and nobody waits, e.g. an isend whose owner has not called wait yet; otherwise it
// sleeps. A blocking collective therefore never hands off to another thread.
//
// Failure. A peer that closes or resets its connection fails every pending and later request
// to or from it with Error(PeerLost) naming it. A tag or size mismatch fails the request and the
// connection with Error(Mismatch). A wait that reaches its deadline throws Error(Timeout) and
// leaves the transport failed (every later request fails with that error; peers see PeerLost);
// abort() does the same with Error(Aborted). Destroying a transport closes its connections, so
// peers still running see PeerLost rather than hang.
#pragma once

#include <braid/store.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace braid::transport {

struct TcpOptions {
  /// Address to bind and publish; "" -> "127.0.0.1".
  std::string listenAddress;
  /// Bound on the whole connection setup (store lookups included).
  std::chrono::milliseconds connectTimeout{60000};
  /// A waiter busy-polls this long before sleeping in epoll_wait.
  std::chrono::microseconds spin{50};
  /// Poll without yielding the CPU for the whole spin (the factory sets it when this host's
  /// ranks have a CPU each: a yield there hands the CPU to other work for a scheduler slice);
  /// false: yield between polls, as on a crowded host where a local peer may need this CPU.
  bool busyPoll = false;
  /// The background thread also moves requests whose poster is about to wait for them
  /// (Request::attended) while nobody waits, overlapping their transfer with the poster's own
  /// work (a reduction between two waits). The factory sets it when the host has at least two
  /// CPUs per rank, so that every rank's thread has one to run on (with fewer, the thread only
  /// took the CPU from the ranks: docs/benchmarks.md, "The progress thread and the algorithms'
  /// own requests"), and when the rank reaches its peers over two transports (shared memory
  /// and the network), since a wait on one leg of a RoutedTransport does not drive the other;
  /// always with several streams per peer (socketThreads x socketsPerThread > 1), for the same
  /// reason.
  bool backgroundAttended = false;
  /// SO_SNDBUF / SO_RCVBUF of every connection; 0 = kernel default (autotuning).
  std::size_t socketBufferBytes = 4 << 20;
  /// Auth key, address whitelist and handshake bound of every connection (docs/security.md).
  SecurityOptions security;
  /// Bind the listener to a port in [portLow, portHigh] (each tried in turn; Error(InvalidArgument)
  /// naming the range when none is free); 0: an ephemeral port (BRAID_PORT_RANGE).
  std::uint16_t portLow = 0;
  std::uint16_t portHigh = 0;
  /// Sockets per peer: socketThreads x socketsPerThread (BRAID_SOCKET_NTHREADS x
  /// BRAID_NSOCKS_PERTHREAD), each >= 1, the product at most 16. With more than one, every
  /// socket is a stream with its own progress engine (tcp_streams.hpp) and messages of at least
  /// stripeMinBytes (BRAID_SOCKET_STRIPE_MIN, > 0) are cut into one piece per stream.
  int socketThreads = 1;
  int socketsPerThread = 1;
  std::size_t stripeMinBytes = 256 * 1024;
  /// BRAID_CONNECT=lazy: creation only listens and publishes; a pair connects when a request to
  /// the peer is first posted on either side (see createTcpTransport). false: the full mesh at
  /// creation.
  bool lazyConnect = false;
};

/// Collective over all `size` ranks: each rank listens on an ephemeral port, publishes
/// "host:port" under key "tcp/addr/<rank>" in `store`, and connects to every other rank (the
/// higher rank connects to the lower one, which accepts; a handshake carries the connecting rank
/// so accept order does not matter). Connecting is retried until connectTimeout, then
/// Error(Timeout) names the rank and address that could not be reached; a rank that never
/// publishes its address, or never connects, is named in the Timeout as well.
/// Every connection opens with the handshake of common/handshake.hpp: with
/// options.security.authKey set, both ends prove they hold the key; a peer whose key differs
/// fails the connecting rank with Error(Auth) naming the peer, while the accepting rank drops
/// the connection, logs it, and keeps accepting (and, if that rank never connects properly,
/// times out naming it). Incoming connections from outside options.security.allowedPeers, and
/// handshakes that fail or stall past handshakeTimeout, are dropped and logged the same way;
/// handshakes run concurrently, so a silent stranger delays no rank.
/// With K = socketThreads x socketsPerThread > 1 sockets per peer, the setup above runs K times
/// (stream 0 under the keys above, stream s > 0 under "tcp/stream<s>/..."), each socket with its
/// own listener and handshake (authenticated like any other), all within one connectTimeout,
/// and the K transports are striped (tcp_streams.hpp).
/// With options.lazyConnect, creation only listens and publishes (nothing waits for the other
/// ranks); each pair (of each stream) connects when a request to the peer is first posted on
/// either side, with the same handshake, whitelist and key checks; crossing dials leave the
/// higher rank's connection. Setup errors then fail the request: Error(Auth) on a key
/// mismatch, Error(PeerLost) when the peer's listener is closed, Error(Timeout) from dialing
/// past connectTimeout or from the wait's deadline, naming the peer. The store must outlive a
/// lazy transport (it looks the peers' addresses up on first use). Invalid socketThreads,
/// socketsPerThread or stripeMinBytes: Error(InvalidArgument) naming the variables.
/// This standalone form publishes and reads the addresses itself (tests, tools); communicators
/// use the two steps below through the transport factory.
std::unique_ptr<Transport> createTcpTransport(Store& store, int rank, int size,
                                              const TcpOptions& options);

/// The first of the factory's two steps: this rank listens on each of its streams' sockets
/// before anyone knows where the others are. entry() ("host:port" per stream, space-separated)
/// is what the factory gathers with the host entries (transport/factory.cpp), so the transport
/// reads no key of its own from the store. Destroying it closes the listeners.
class TcpListening {
 public:
  ~TcpListening();
  std::string entry() const;

 private:
  TcpListening();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend std::unique_ptr<TcpListening> listenTcp(int, int, const TcpOptions&);
  friend std::unique_ptr<Transport> createTcpTransport(std::unique_ptr<TcpListening>,
                                                       std::vector<std::string>, int, int,
                                                       const TcpOptions&);
};
/// Listens as createTcpTransport does (Error(InvalidArgument) for the options it rejects).
std::unique_ptr<TcpListening> listenTcp(int rank, int size, const TcpOptions& options);
/// The second step: the transport over `listening`, with `entries[r]` = rank r's entry() (every
/// rank's, in rank order); otherwise as createTcpTransport(Store&, ...), without the store.
std::unique_ptr<Transport> createTcpTransport(std::unique_ptr<TcpListening> listening,
                                              std::vector<std::string> entries, int rank, int size,
                                              const TcpOptions& options);

/// Data sockets opened or accepted by every TCP transport of this process so far (tests and
/// diagnostics: a split that shares its parent's connections adds none).
std::size_t tcpSocketsOpened() noexcept;

}  // namespace braid::transport
