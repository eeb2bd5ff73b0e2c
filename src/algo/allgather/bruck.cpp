// Bruck allgather: ceil(log2 N) steps instead of ring's N-1, the same bytes; for small
// messages, where the step count (latency) decides.
//
// The output buffer holds the blocks in rotated order while the algorithm runs: slot i holds
// the block of rank (r + i) mod N (patterns/bruck.hpp).
//   0. Copy the rank's own block into slot 0.
//   1. Step k = 0 .. ceil(log2 N)-1, d = 2^k: send slots [0, n_k) to rank r - d and receive
//      slots [d, d + n_k) from rank r + d, n_k = min(d, N - d); whole blocks, one message each
//      way, straight between the output buffers (no scratch).
//   2. Rotate the output right by r blocks (in place), so block j lands at position j.
// Messages are not cut into chunks: the algorithm is meant for messages below
// BRAID_SMALL_MSG_SIZE (one message per step is its point).
// Steps: ceil(log2 N). Bytes on the wire per rank: (N-1)/N x S sent and received (N-1 blocks).
#include "algo/patterns/bruck.hpp"

#include <algorithm>

#include "algo/exchange.hpp"

namespace braid::algo {

void bruckAllgather(Context& ctx, const CollArgs& a) {
  const std::size_t blockBytes = a.count * dataTypeSize(a.dtype);
  const int n = ctx.size;
  const int r = ctx.rank;
  std::uint8_t* const out = bytesOf(a.recv);
  // In place, send is block r of the output; slot 0 is block 0's place, distinct unless r == 0.
  copyBytes(out, a.send, blockBytes);
  if (n > 1 && blockBytes > 0) {
    InFlight<2> reqs(ctx);
    for (int step = 0; step < patterns::bruckSteps(n); ++step) {
      const auto blocks = static_cast<std::size_t>(patterns::bruckAllgatherBlocks(n, step));
      const auto d = static_cast<std::size_t>(1) << step;
      reqs.recv(0, patterns::bruckAllgatherRecvPeer(r, n, step), out + d * blockBytes,
                blocks * blockBytes);
      reqs.send(1, patterns::bruckAllgatherSendPeer(r, n, step), out, blocks * blockBytes);
      reqs.waitAll();
    }
  }
  const std::size_t total = static_cast<std::size_t>(n) * blockBytes;
  if (r != 0 && blockBytes > 0)
    std::rotate(out, out + total - static_cast<std::size_t>(r) * blockBytes, out + total);
}

}  // namespace braid::algo
