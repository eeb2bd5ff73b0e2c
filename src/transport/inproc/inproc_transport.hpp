// Threads as ranks: a transport whose ranks are threads of one process, for tests and for
// communicators whose ranks share an address space.
//
// Faithful to transport.hpp, on the message engine (engine.hpp): messages between two ranks are
// matched in posting order by the engine's rules (a non-P2P message waits for the first posted
// non-P2P receive, a P2P message (kP2PTagBit) goes to the first receive of its tag or is copied
// aside); a receive whose tag or size differs from the message fails both with Error(Mismatch)
// and the pair stays broken. A send completes when its data has been copied into the matching
// receive (so it waits for the receive to be posted), except P2P messages copied aside. Waiting
// is the engine's loop: it spins for `spin`, then sleeps on a condition variable; a deadline
// that passes throws Error(Timeout) and withdraws the request (the transport stays usable).
// abort() fails this rank's pending and later requests with Error(Aborted) and its peers'
// requests to or from it with Error(PeerLost).
#pragma once

#include <chrono>
#include <memory>

#include "transport/transport.hpp"

namespace braid::transport {

class InprocFabric {
 public:
  explicit InprocFabric(int size, std::chrono::microseconds spin = std::chrono::microseconds(50));
  ~InprocFabric();
  InprocFabric(const InprocFabric&) = delete;
  InprocFabric& operator=(const InprocFabric&) = delete;

  int size() const noexcept;
  /// The transport of `rank` (0 <= rank < size). Call once per rank. Endpoints share the
  /// fabric's state and may outlive this object.
  std::unique_ptr<Transport> endpoint(int rank);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace braid::transport
