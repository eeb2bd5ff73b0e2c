// Recursive halving reduce_scatter: log2(p) steps instead of ring's N-1, the same bytes when N
// is a power of two. For small and medium messages.
//
// The input holds N blocks of `count` elements, block j destined for rank j. With p the
// largest power of two <= N and N = p + e (patterns/doubling.hpp, halving.hpp):
//   1. Fold in: each even rank r < 2e sends its whole input to r+1, which reduces it into its
//      own. Virtual rank v < e (real rank 2v+1) now answers for blocks 2v and 2v+1, every other
//      virtual rank v for block v+e (patterns::foldedBlockStart).
//   2. Halving among the p virtual ranks: in round k (mask m = p/2, p/4, .., 1) virtual rank v
//      sends the blocks of the half of its group it does not keep to v ^ m and reduces the half
//      it keeps with what it receives. Afterwards v holds the full reduction of its blocks.
//   3. Fold out: each odd rank r < 2e sends block r-1 to r-1; every rank copies its block out.
// Blocks longer than one chunk are processed chunk by chunk (elements [off, off+n) of every
// block at once), packed into scratch: two slots of N chunks each (the partial being reduced,
// the half being received).
// Steps: log2(p) (+2 when N is not a power of two). Bytes on the wire per rank: (p-1) x count
// elements for p = N (a power of two), i.e. (N-1)/N x S; all ranks together send
// (e + (p-1)) x S + e x S/N, the even rank of a folding pair S.
#include "algo/exchange.hpp"
#include "algo/patterns/doubling.hpp"
#include "algo/patterns/halving.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void halvingDoublingReduceScatter(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const int n = ctx.size;
  const auto un = static_cast<std::size_t>(n);
  const std::uint8_t* const in = bytesOf(a.send);
  std::uint8_t* const out = bytesOf(a.recv);
  if (n == 1) {
    copyBytes(out, in, a.count * es);
    return;
  }
  if (a.count == 0) return;

  const patterns::Fold fold = patterns::foldToPowerOfTwo(ctx.rank, n);
  const int p = fold.pow2;
  const std::size_t ce = chunkElems(ctx, 2 * un, es);
  std::uint8_t* const work = scratchSlot(ctx, 0, un * ce * es);
  std::uint8_t* const incoming = scratchSlot(ctx, 1, un * ce * es);
  InFlight<2> reqs(ctx);
  auto block = [&](int vrank) { return patterns::foldedBlockStart(vrank, n); };

  for (std::size_t off = 0; off < a.count; off += ce) {
    const std::size_t len = std::min(ce, a.count - off);
    const std::size_t pieceBytes = len * es;
    // Block j's piece goes to work + j * pieceBytes.
    for (std::size_t j = 0; j < un; ++j)
      std::memcpy(work + j * pieceBytes, in + (j * a.count + off) * es, pieceBytes);
    if (fold.folded()) {
      reqs.send(0, fold.partner, work, un * pieceBytes);
      reqs.wait(0);
      reqs.recv(0, fold.partner, out + off * es, pieceBytes);
      reqs.wait(0);
      continue;
    }
    if (fold.partner >= 0) {
      reqs.recv(0, fold.partner, incoming, un * pieceBytes);
      reqs.wait(0);
      kernels::reduce3(a.dtype, a.op, work, incoming, work, un * len);  // folded rank is lower
    }
    for (int round = 0; round < fold.rounds; ++round) {
      const patterns::HalvingStep s = patterns::halvingStep(fold.vrank, p, round);
      const int peer = patterns::unfoldRank(s.peer, n);
      const auto keepFirst = static_cast<std::size_t>(block(s.keep.begin));
      const auto keepBlocks = static_cast<std::size_t>(block(s.keep.end)) - keepFirst;
      const auto sendFirst = static_cast<std::size_t>(block(s.send.begin));
      const auto sendBlocks = static_cast<std::size_t>(block(s.send.end)) - sendFirst;
      reqs.recv(0, peer, incoming, keepBlocks * pieceBytes);
      reqs.send(1, peer, work + sendFirst * pieceBytes, sendBlocks * pieceBytes);
      reqs.waitAll();
      std::uint8_t* const mine = work + keepFirst * pieceBytes;
      if (s.peer < fold.vrank)
        kernels::reduce3(a.dtype, a.op, mine, incoming, mine, keepBlocks * len);
      else
        kernels::reduceInto(a.dtype, a.op, mine, incoming, keepBlocks * len);
    }
    if (fold.partner >= 0) {
      reqs.send(0, fold.partner, work + static_cast<std::size_t>(fold.partner) * pieceBytes,
                pieceBytes);
      reqs.wait(0);
    }
    // Safe in place (out is block `rank` of the input): this piece was packed above.
    std::memcpy(out + off * es, work + static_cast<std::size_t>(ctx.rank) * pieceBytes, pieceBytes);
  }
}

}  // namespace braid::algo
