// Rank-ordered allreduce: the deterministic mode's allreduce between hosts. A rank-ordered
// reduce-scatter, then a ring allgather.
//
// The buffer is cut into N balanced segments.
//   1. Reduce-scatter (reduce_scatter/rank_ordered.cpp): every rank sends segment p of its
//      input to rank p, which reduces the N contributions in rank order,
//      ((x0 op x1) op x2) ..., into segment p of its output. Chunk-pipelined.
//   2. Allgather (allgather/ring.cpp): N-1 steps; at step s rank r forwards segment (r-s) and
//      receives segment (r-s-1) into its output.
// Every element is reduced once, in rank order, then copied: bitwise the same on every rank and
// the same as every other rank-ordered algorithm (shm_direct in deterministic mode).
// Steps: 1 + (N-1) per chunk. Bytes on the wire per rank: 2(N-1)/N x buffer bytes sent and
// received, as the ring; the reduce-scatter half has N-1 messages in flight per rank.
#include "algo/reduce_scatter/rank_ordered.hpp"

#include "algo/allgather/ring.hpp"
#include "algo/exchange.hpp"

namespace braid::algo {

void rankOrderedAllreduce(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  if (ctx.size == 1) {
    copyBytes(a.recv, a.send, a.count * es);
    return;
  }
  auto layout = patterns::SegmentLayout::even(a.count, ctx.size);
  // The reduce-scatter writes only segment `rank` of the output, after reading that segment of
  // the input (it copies it aside in place), so send == recv is safe.
  rankOrderedReduceScatterPass(ctx, a.dtype, a.op, a.send, layout,
                               bytesOf(a.recv) + layout.at(ctx.rank).offset * es);
  ringAllgatherPass(ctx, a.recv, layout, es);
}

}  // namespace braid::algo
