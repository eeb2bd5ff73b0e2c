// Threads as ranks: a transport whose ranks are threads of one process, for tests and for
// communicators whose ranks share an address space.
//
// Faithful to transport.hpp: messages between two ranks match in posting order; the receive's
// tag and size must equal the send's, else both fail with Error(Mismatch) and the pair stays
// broken. A send completes when its data has been copied into the matching receive (so it
// waits for the receive to be posted), except point-to-point messages (kP2PTagBit), which are
// copied aside when no receive is posted yet. Waiting spins for `spin`, then sleeps on a
// condition variable; a deadline that passes throws Error(Timeout) and withdraws the request.
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
