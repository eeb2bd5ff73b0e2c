// Recursive doubling allreduce, for small messages (latency-bound).
//
// With p the largest power of two <= N and N = p + e:
//   1. Fold: each even rank r < 2e sends its buffer to r+1, which reduces it into its own; the
//      even ranks then wait for step 3.
//   2. log2(p) rounds among the p remaining ranks (virtual ranks): in round k, virtual rank v
//      exchanges its whole buffer with v ^ 2^k and reduces what it receives (lower virtual rank
//      first, so both partners compute bitwise the same value).
//   3. Unfold: each odd rank r < 2e sends the result back to r-1.
// Messages larger than the scratch memory run the algorithm chunk after chunk.
// Steps: log2(p) (+2 when N is not a power of two). Bytes on the wire per rank: log2(p) x buffer
// bytes sent (+1 buffer for the folding pairs).
#include "algo/exchange.hpp"
#include "algo/patterns/doubling.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void recursiveDoublingAllreduce(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  copyBytes(a.recv, a.send, a.count * es);
  if (ctx.size == 1 || a.count == 0) return;

  const patterns::Fold fold = patterns::foldToPowerOfTwo(ctx.rank, ctx.size);
  const std::size_t ce = chunkElems(ctx, 1, es);
  std::uint8_t* const slot = scratchSlot(ctx, 0, ce * es);
  std::uint8_t* const buf = bytesOf(a.recv);
  InFlight<2> reqs(ctx);

  for (std::size_t off = 0; off < a.count; off += ce) {
    const std::size_t n = std::min(ce, a.count - off);
    std::uint8_t* const mine = buf + off * es;
    const std::size_t bytes = n * es;
    if (fold.folded()) {
      reqs.send(0, fold.partner, mine, bytes);
      reqs.wait(0);  // the result will land in the same bytes
      reqs.recv(0, fold.partner, mine, bytes);
      reqs.wait(0);
      continue;
    }
    if (fold.partner >= 0) {
      reqs.recv(0, fold.partner, slot, bytes);
      reqs.wait(0);
      kernels::reduce3(a.dtype, a.op, mine, slot, mine, n);  // the folded rank is lower
    }
    for (int round = 0; round < fold.rounds; ++round) {
      const int peerV = patterns::doublingPeer(fold.vrank, round);
      const int peer = patterns::unfoldRank(peerV, ctx.size);
      reqs.recv(0, peer, slot, bytes);
      reqs.send(1, peer, mine, bytes);
      reqs.waitAll();
      if (peerV < fold.vrank)
        kernels::reduce3(a.dtype, a.op, mine, slot, mine, n);
      else
        kernels::reduceInto(a.dtype, a.op, mine, slot, n);
    }
    if (fold.partner >= 0) {
      reqs.send(0, fold.partner, mine, bytes);
      reqs.wait(0);
    }
  }
}

}  // namespace braid::algo
