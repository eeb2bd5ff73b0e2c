// Bruck allgather: ceil(log2 N) steps instead of ring's N-1, the same bytes; for small
// messages, where the step count (latency) decides.
//
// The output buffer holds the blocks in rotated order while the algorithm runs: slot i holds
// the block of rank (r + i) mod N (patterns/bruck.hpp).
//   0. Copy the rank's own block into slot 0.
//   1. Step k = 0 .. ceil(log2 N)-1, d = 2^k: send slots [0, n_k) to rank r - d and receive
//      slots [d, d + n_k) from rank r + d, n_k = min(d, N - d); whole blocks, one message each
//      way, straight between the output buffers (no scratch).
//   2. Rotate the output right by r blocks, so block j lands at position j: the shorter side
//      goes through scratch (or a temporary), the longer one moves in place, all by memcpy /
//      memmove (std::rotate moved bytes one at a time: 18 us for 64 KiB, docs/benchmarks.md).
// Messages are not cut into chunks: the algorithm is meant for messages below
// BRAID_SMALL_MSG_SIZE (one message per step is its point).
// Steps: ceil(log2 N). Bytes on the wire per rank: (N-1)/N x S sent and received (N-1 blocks).
#include "algo/patterns/bruck.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>

#include "algo/exchange.hpp"

namespace braid::algo {

namespace {

// buf[0, total) becomes buf[total - k, total) followed by buf[0, total - k), as
// std::rotate(buf, buf + total - k, buf + total) does, moving whole runs of bytes.
void rotateRight(std::uint8_t* buf, std::size_t total, std::size_t k,
                 std::span<std::uint8_t> scratch) {
  if (k == 0 || k == total) return;
  const std::size_t head = total - k;
  const std::size_t side = std::min(k, head);
  std::unique_ptr<std::uint8_t[]> owned;
  std::uint8_t* tmp = scratch.data();
  if (scratch.size() < side) {
    owned = std::make_unique_for_overwrite<std::uint8_t[]>(side);
    tmp = owned.get();
  }
  if (k <= head) {
    std::memcpy(tmp, buf + head, k);
    std::memmove(buf + k, buf, head);
    std::memcpy(buf, tmp, k);
  } else {
    std::memcpy(tmp, buf, head);
    std::memmove(buf, buf + head, k);
    std::memcpy(buf + k, tmp, head);
  }
}

}  // namespace

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
  if (blockBytes > 0)
    rotateRight(out, total, static_cast<std::size_t>(r) * blockBytes, ctx.scratch);
}

}  // namespace braid::algo
