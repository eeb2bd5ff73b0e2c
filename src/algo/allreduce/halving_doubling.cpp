// Recursive halving-doubling allreduce (Rabenseifner): a reduce-scatter by recursive halving,
// then an allgather by recursive doubling. Bandwidth like ring (2(p-1)/p x S per rank), but
// 2 log2(p) steps instead of 2(N-1): for medium messages, and for many ranks.
//
// With p the largest power of two <= N and N = p + e (patterns/doubling.hpp, halving.hpp):
//   1. Fold in: each even rank r < 2e sends its buffer to r+1, which reduces it into its own;
//      the even ranks then wait for step 4.
//   2. Reduce-scatter among the p virtual ranks: the buffer is cut into p balanced blocks;
//      in round k (mask m = p/2, p/4, .., 1) virtual rank v sends the blocks of the half of its
//      group it does not keep to v ^ m and reduces the other half it receives. Afterwards v
//      holds the full reduction of block v.
//   3. Allgather among the p virtual ranks: rounds in reverse (m = 1, 2, .., p/2); v sends the
//      blocks it has gathered to v ^ m and receives v ^ m's, straight into the output.
//   4. Fold out: each odd rank r < 2e sends the result to r-1.
// Each block is reduced completely at one rank and then copied, so every rank ends with
// bitwise the same result. Buffers larger than one chunk run the algorithm chunk after chunk
// (the receive of step 2 needs at most one chunk of scratch).
// Steps: 2 log2(p) (+2 when N is not a power of two). Bytes on the wire per rank: 2(p-1)/p x S
// sent for the p exchanging ranks (exact when p divides the chunk's element count), plus S for
// each rank of a folding pair (the even rank's input, the odd rank's result).
#include "algo/exchange.hpp"
#include "algo/patterns/doubling.hpp"
#include "algo/patterns/halving.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void halvingDoublingAllreduce(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  copyBytes(a.recv, a.send, a.count * es);
  if (ctx.size == 1 || a.count == 0) return;

  const patterns::Fold fold = patterns::foldToPowerOfTwo(ctx.rank, ctx.size);
  const int p = fold.pow2;
  const std::size_t ce = chunkElems(ctx, 1, es);
  std::uint8_t* const slot = scratchSlot(ctx, 0, ce * es);
  InFlight<2> reqs(ctx);

  for (std::size_t off = 0; off < a.count; off += ce) {
    const std::size_t n = std::min(ce, a.count - off);
    std::uint8_t* const buf = bytesOf(a.recv) + off * es;
    if (fold.folded()) {
      reqs.send(0, fold.partner, buf, n * es);
      reqs.wait(0);
      reqs.recv(0, fold.partner, buf, n * es);
      reqs.wait(0);
      continue;
    }
    if (fold.partner >= 0) {
      reqs.recv(0, fold.partner, slot, n * es);
      reqs.wait(0);
      kernels::reduce3(a.dtype, a.op, buf, slot, buf, n);  // the folded rank is lower
    }
    // Elements of the virtual ranks [r.begin, r.end): blocks of an even split of n into p.
    auto elems = [&](patterns::VrankRange r) {
      const std::size_t lo = patterns::evenSplit(n, p, r.begin).offset;
      const std::size_t hi = r.end >= p ? n : patterns::evenSplit(n, p, r.end).offset;
      return patterns::Range{lo, hi - lo};
    };
    for (int round = 0; round < fold.rounds; ++round) {
      const patterns::HalvingStep s = patterns::halvingStep(fold.vrank, p, round);
      const int peer = patterns::unfoldRank(s.peer, ctx.size);
      const patterns::Range keep = elems(s.keep);
      const patterns::Range give = elems(s.send);
      reqs.recv(0, peer, slot, keep.count * es);
      reqs.send(1, peer, buf + give.offset * es, give.count * es);
      reqs.waitAll();
      std::uint8_t* const mine = buf + keep.offset * es;
      if (s.peer < fold.vrank)
        kernels::reduce3(a.dtype, a.op, mine, slot, mine, keep.count);
      else
        kernels::reduceInto(a.dtype, a.op, mine, slot, keep.count);
    }
    for (int round = 0; round < fold.rounds; ++round) {
      const patterns::DoublingStep s = patterns::doublingGatherStep(fold.vrank, round);
      const int peer = patterns::unfoldRank(s.peer, ctx.size);
      const patterns::Range mine = elems(s.send);
      const patterns::Range theirs = elems(s.recv);
      reqs.recv(0, peer, buf + theirs.offset * es, theirs.count * es);
      reqs.send(1, peer, buf + mine.offset * es, mine.count * es);
      reqs.waitAll();
    }
    if (fold.partner >= 0) {
      reqs.send(0, fold.partner, buf, n * es);
      reqs.wait(0);
    }
  }
}

}  // namespace braid::algo
