// A transport made of several: each peer is reached through exactly one underlying transport
// (shared memory for ranks on this host, TCP for the others), so each pair keeps the FIFO order
// of the transport that carries it. Every call goes straight to the peer's transport; a wait
// sleeps in that transport alone, which is why the shm and TCP transports each have a
// background thread for data nobody waits for.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace braid::transport {

class ShmTransport;
class LaneTransport;

class RoutedTransport final : public Transport {
 public:
  struct Leg {
    std::unique_ptr<Transport> transport;  // rank() and size() must equal the routed ones
    std::vector<std::string> paths;        // by peer: what pathTo reports ("" = not this leg)
  };

  /// Peer p goes through the first leg whose paths[p] is not empty. Throws
  /// Error(InvalidArgument) when a leg's rank or size differs or a peer has no leg.
  RoutedTransport(int rank, int size, std::vector<Leg> legs);
  ~RoutedTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override;
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override;
  bool test(Request& req) override;
  void wait(Request& req, Deadline deadline) override;
  std::string describePeer(int peer) const override;
  /// The single leg's group when one leg (shared memory) reaches every peer, else nullptr.
  SharedMemoryGroup* sharedGroup() override;
  /// Aborts every leg.
  void abort(const std::string& why) override;
  /// The peer's leg's answer (peerLeft of a LaneTransport).
  bool peerLeft(int peer) const override;
  /// The peer's leg's answer.
  bool pipelinesLargeMessages(int peer) const override;
  /// The legs' connections, summed.
  std::size_t connectionCount() const override;

  /// The path to `peer`: "shm", "shm+cma" (single-copy for large messages), "tcp"; "self" for
  /// this rank, "" outside the world.
  std::string pathTo(int peer) const;
  /// The first leg that is a shared-memory transport, or a view of one (LaneTransport), or
  /// nullptr.
  const ShmTransport* sharedMemoryLeg() const;
  /// The first leg that is a view of a shared shared-memory segment, or nullptr: what a
  /// sub-communicator's ranks on this host share (LaneTransport::base(), baseRank()).
  const LaneTransport* sharedMemoryView() const;
  /// The first leg that is a view of shared network connections (LaneTransport over TCP or
  /// UCX), or nullptr.
  const LaneTransport* laneLeg() const;

 private:
  Transport& legOf(int peer, const char* op) const;

  const int rank_;
  const int size_;
  std::vector<Leg> legs_;
  std::vector<Transport*> route_;    // by peer; null for this rank
  std::vector<std::uint64_t> lane_;  // by peer: the lane to post on at route_ (0: none)
  std::vector<const std::string*> path_;
};

}  // namespace braid::transport
