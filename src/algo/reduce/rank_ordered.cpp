// Rank-ordered reduce: the deterministic mode's reduce between hosts. The root receives every
// rank's input and reduces the N contributions in rank order, ((x0 op x1) op x2) ..., chunk by
// chunk.
//
// The buffer is cut into chunks of C bytes; per chunk c:
//   non-root: send chunk c of the input to the root, straight from the input (two in flight);
//   root: receives of chunk c+1 from every peer are posted (double-buffered slots, one per
//   rank), then the chunks of chunk c are folded into the output in rank order as they arrive
//   (reduce3(out, x0, x1), then out = out op x_p). In place, the root's own chunk is copied to
//   scratch first, as the accumulator overwrites it before its turn.
// Simple rather than bandwidth-optimal: a tree would reduce in tree order, and a reduce-scatter
// + gather needs a result buffer on every rank (reduce's recv is the root's only).
// Steps: 1 per chunk. Bytes on the wire: every non-root rank sends the buffer once; the root
// receives (N-1) x buffer bytes and does all N-1 reductions of every element.
#include <cstring>

#include "algo/exchange.hpp"
#include "algo/rank_order.hpp"

namespace braid::algo {

void rankOrderedReduce(Context& ctx, const CollArgs& a) {
  const int n = ctx.size;
  const int me = ctx.rank;
  const auto un = static_cast<std::size_t>(n);
  const std::size_t es = dataTypeSize(a.dtype);
  if (n == 1) {
    copyBytes(a.recv, a.send, a.count * es);
    return;
  }
  if (a.count == 0) return;
  // Every rank sizes chunks for the root's 2N slots, so all agree.
  const std::size_t ce = chunkElems(ctx, 2 * un, es);
  const std::size_t chunks = patterns::chunkCount(a.count, ce);
  const std::uint8_t* const input = bytesOf(a.send);
  auto elems = [&](std::size_t c) { return std::min(ce, a.count - c * ce); };

  if (me != a.root) {
    InFlight<2> reqs(ctx);
    for (std::size_t c = 0; c < chunks; ++c) {
      reqs.wait(c % 2);
      reqs.send(c % 2, a.root, input + c * ce * es, elems(c) * es);
    }
    reqs.waitAll();
    return;
  }

  std::uint8_t* const output = bytesOf(a.recv);
  const bool inPlace = output == input;
  auto slot = [&](std::size_t c, int p) {
    return scratchSlot(ctx, (c % 2) * un + static_cast<std::size_t>(p), ce * es);
  };
  // Requests: receives of chunk c from rank p at (c % 2) * N + p.
  InFlightSet reqs(ctx, 2 * un);
  auto postRecvs = [&](std::size_t c) {
    for (int p = 0; p < n; ++p)
      if (p != me)
        reqs.recv((c % 2) * un + static_cast<std::size_t>(p), p, slot(c, p), elems(c) * es);
  };
  postRecvs(0);
  for (std::size_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) postRecvs(c + 1);
    const std::size_t k = elems(c);
    const std::uint8_t* mine = input + c * ce * es;
    if (inPlace) {
      std::memcpy(slot(c, me), mine, k * es);
      mine = slot(c, me);
    }
    reduceInRankOrder(a.dtype, a.op, output + c * ce * es, n, k, [&](int p) -> const void* {
      if (p == me) return mine;
      reqs.wait((c % 2) * un + static_cast<std::size_t>(p));
      return slot(c, p);
    });
  }
  reqs.waitAll();
}

}  // namespace braid::algo
