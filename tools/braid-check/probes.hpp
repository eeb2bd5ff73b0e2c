// Point-to-point probes between two ranks: a verified round trip (is the pair connected?) and a
// timed ping-pong (latency and bandwidth). The lower rank of the pair starts and measures; the
// higher one echoes. Every payload is a pattern both ranks compute, checked on arrival.
#pragma once

#include <braid/comm.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid::check {

struct ProbeResult {
  /// Initiator: seconds per round trip (the mean over the timed ones). Responder: 0.
  double roundTripSeconds = 0;
  /// Bytes that differed from the pattern in the verified round trip (both directions as seen
  /// by this rank: what it received).
  std::int64_t wrongBytes = 0;
};

/// `iters` timed round trips of `bytes` with `peer` after `warmup` untimed ones, then one more,
/// untimed, into cleared buffers, whose payload is verified. Throws the communicator's
/// braid::Error. `tag` must be the same on both ranks.
ProbeResult pingPong(Comm& comm, int peer, std::size_t bytes, int warmup, int iters,
                     std::uint32_t tag);

}  // namespace braid::check
