// Bruck alltoall: ceil(log2 N) steps instead of pairwise's N-1, at the price of more bytes
// (each block travels once per set bit of its distance); for small blocks, where the step
// count (latency) decides.
//
// Slot i of the output buffer holds, during the algorithm, the block this rank currently
// carries for rank (r + i) mod N (patterns/bruck.hpp):
//   0. Copy the send buffer into the output rotated: slot i = send block (r + i) mod N.
//   1. Step k = 0 .. ceil(log2 N)-1, d = 2^k: pack every slot i with bit k set into scratch,
//      send it to rank r + d, receive the same slots from rank r - d and unpack them into the
//      same slots. A block for distance i thus hops once per set bit of i.
//   2. Slot i now holds the block rank (r - i) mod N sent to r; swapping slots i and
//      (r - i) mod N (an involution) puts block j at position j.
// Blocks longer than one chunk are exchanged piece by piece (elements [off, off+len) of every
// moving block per message); two scratch slots of ceil(N/2) pieces each. In place is not
// supported (the communicator rejects send == recv).
// Steps: ceil(log2 N). Bytes on the wire per rank: sum over steps k of the number of i < N with
// bit k set, times the block: about (N/2) log2 N blocks (vs N-1 for pairwise).
#include "algo/patterns/bruck.hpp"

#include <algorithm>

#include "algo/exchange.hpp"

namespace braid::algo {

void bruckAlltoall(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const int n = ctx.size;
  const int r = ctx.rank;
  const auto un = static_cast<std::size_t>(n);
  const std::size_t blockBytes = a.count * es;
  const std::uint8_t* const in = bytesOf(a.send);
  std::uint8_t* const out = bytesOf(a.recv);
  if (blockBytes == 0) return;
  for (int i = 0; i < n; ++i)
    std::memcpy(out + static_cast<std::size_t>(i) * blockBytes,
                in + static_cast<std::size_t>(patterns::wrap(r + i, n)) * blockBytes, blockBytes);
  if (n == 1) return;

  const std::size_t maxBlocks = (un + 1) / 2;
  const std::size_t ce = chunkElems(ctx, 2 * maxBlocks, es);
  std::uint8_t* const packed = scratchSlot(ctx, 0, maxBlocks * ce * es);
  std::uint8_t* const incoming = scratchSlot(ctx, 1, maxBlocks * ce * es);
  InFlight<2> reqs(ctx);
  for (int step = 0; step < patterns::bruckSteps(n); ++step) {
    const auto blocks = static_cast<std::size_t>(patterns::bruckAlltoallBlocks(n, step));
    const int to = patterns::bruckAlltoallSendPeer(r, n, step);
    const int from = patterns::bruckAlltoallRecvPeer(r, n, step);
    for (std::size_t off = 0; off < a.count; off += ce) {
      const std::size_t pieceBytes = std::min(ce, a.count - off) * es;
      std::size_t k = 0;
      for (int i = 0; i < n; ++i)
        if (patterns::bruckAlltoallSlotMoves(i, step))
          std::memcpy(packed + (k++) * pieceBytes,
                      out + static_cast<std::size_t>(i) * blockBytes + off * es, pieceBytes);
      reqs.recv(0, from, incoming, blocks * pieceBytes);
      reqs.send(1, to, packed, blocks * pieceBytes);
      reqs.waitAll();
      k = 0;
      for (int i = 0; i < n; ++i)
        if (patterns::bruckAlltoallSlotMoves(i, step))
          std::memcpy(out + static_cast<std::size_t>(i) * blockBytes + off * es,
                      incoming + (k++) * pieceBytes, pieceBytes);
    }
  }
  for (int i = 0; i < n; ++i) {
    const int j = patterns::bruckAlltoallFinalSlot(r, n, i);
    if (i < j)
      std::swap_ranges(out + static_cast<std::size_t>(i) * blockBytes,
                       out + static_cast<std::size_t>(i + 1) * blockBytes,
                       out + static_cast<std::size_t>(j) * blockBytes);
  }
}

}  // namespace braid::algo
