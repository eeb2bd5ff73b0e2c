// Rank-ordered reduce-scatter (reduce_scatter and reduce_scatterv): the deterministic mode's
// algorithm between hosts. Every rank sends each owner its segment directly, and the owner
// reduces the N contributions in rank order, ((x0 op x1) op x2) ..., so the result does not
// depend on the world size's ring order, on chunking or on the transport.
//
// The input is cut into one segment per rank; each segment is cut into chunks of C bytes, and
// chunk c of every segment moves before chunk c+1 (chunk-major):
//   1. post receives of chunk c+1 of the own segment from every peer (double-buffered slots);
//   2. send chunk c of segment p to rank p, for every peer p, straight from the input;
//   3. wait for the chunks from ranks 0, 1, ... in order and fold each into the output as it
//      arrives (reduce3(out, x0, x1), then out = out op x_p).
// Receiving chunk c+1 overlaps reducing chunk c. In place, the own chunk is copied to scratch
// first, as the accumulator overwrites it before its turn.
// Steps: 1 per chunk (N-1 messages sent and received per rank, all in flight at once).
// Bytes on the wire per rank: (N-1)/N x input bytes sent and received — as the ring, but N-1
// concurrent messages instead of one per step, and N-1 reductions of each element at its owner.
#include "algo/reduce_scatter/rank_ordered.hpp"

#include <cstring>

#include "algo/exchange.hpp"
#include "algo/rank_order.hpp"

namespace braid::algo {

void rankOrderedReduceScatterPass(Context& ctx, DataType dtype, ReduceOp op, const void* in,
                                  patterns::SegmentLayout& layout, void* out) {
  const int n = ctx.size;
  const int me = ctx.rank;
  const auto un = static_cast<std::size_t>(n);
  const std::size_t es = dataTypeSize(dtype);
  // Two sets of N chunk slots: receives of chunk c land in set c % 2 (slot of the sender).
  const std::size_t ce = chunkElems(ctx, 2 * un, es);
  const std::size_t chunks = patterns::chunkCount(layout.maxCount(), ce);
  if (chunks == 0) return;
  const std::uint8_t* const input = bytesOf(in);
  std::uint8_t* const output = bytesOf(out);
  const patterns::Range own = layout.at(me);
  const bool inPlace = output == input + own.offset * es;
  auto slot = [&](std::size_t c, int p) {
    return scratchSlot(ctx, (c % 2) * un + static_cast<std::size_t>(p), ce * es);
  };

  // Requests: receives at (c % 2) * N + p, sends at 2N + p.
  InFlightSet reqs(ctx, 3 * un);
  auto postRecvs = [&](std::size_t c) {
    const std::size_t bytes = patterns::chunkOf(own, ce, c).count * es;
    for (int s = 1; s < n; ++s) {
      const int p = (me - s + n) % n;
      reqs.recv((c % 2) * un + static_cast<std::size_t>(p), p, slot(c, p), bytes);
    }
  };

  postRecvs(0);
  for (std::size_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) postRecvs(c + 1);
    for (int s = 1; s < n; ++s) {
      const int p = (me + s) % n;
      const patterns::Range sc = patterns::chunkOf(layout.at(p), ce, c);
      reqs.send(2 * un + static_cast<std::size_t>(p), p, input + sc.offset * es, sc.count * es);
    }
    const patterns::Range rc = patterns::chunkOf(own, ce, c);
    const std::uint8_t* mine = input + rc.offset * es;
    if (inPlace) {
      std::memcpy(slot(c, me), mine, rc.count * es);
      mine = slot(c, me);
    }
    std::uint8_t* const dst = output + (rc.offset - own.offset) * es;
    reduceInRankOrder(dtype, op, dst, n, rc.count, [&](int p) -> const void* {
      if (p == me) return mine;
      reqs.wait((c % 2) * un + static_cast<std::size_t>(p));
      return slot(c, p);
    });
    for (int s = 1; s < n; ++s) reqs.wait(2 * un + static_cast<std::size_t>((me + s) % n));
  }
  reqs.waitAll();
}

namespace {

void runPass(Context& ctx, const CollArgs& a, patterns::SegmentLayout& layout) {
  const std::size_t es = dataTypeSize(a.dtype);
  if (ctx.size == 1) {
    const patterns::Range own = layout.at(0);
    copyBytes(a.recv, bytesOf(a.send) + own.offset * es, own.count * es);
    return;
  }
  rankOrderedReduceScatterPass(ctx, a.dtype, a.op, a.send, layout, a.recv);
}

}  // namespace

void rankOrderedReduceScatter(Context& ctx, const CollArgs& a) {
  auto layout = patterns::SegmentLayout::blocks(a.count, ctx.size);
  runPass(ctx, a, layout);
}

void rankOrderedReduceScatterv(Context& ctx, const CollArgs& a) {
  auto layout = patterns::SegmentLayout::varying(a.counts, a.displs);
  runPass(ctx, a, layout);
}

}  // namespace braid::algo
