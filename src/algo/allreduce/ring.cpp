// Ring allreduce: a ring reduce-scatter, then a ring allgather (Patarasuk & Yuan).
//
// The buffer is cut into N balanced segments.
//   1. Reduce-scatter (reduce_scatter/ring.cpp): N-1 steps; at step s rank r sends the partial of
//      segment (r-s-1) to r+1 and reduces the partial of segment (r-s-2) from r-1 into its own
//      input. Afterwards rank r holds the full reduction of segment r, written to its output.
//   2. Allgather (allgather/ring.cpp): N-1 steps; at step s rank r forwards segment (r-s) and
//      receives segment (r-s-1) into its output.
// Both passes are chunk-pipelined (two receives in flight, so reducing chunk k overlaps the
// transfer of chunk k+1), chunk-major (each chunk finishes its ring pass before the next starts).
// Every rank ends with bitwise the same result: each segment is reduced once, then copied.
// Steps: 2(N-1) per chunk. Bytes on the wire per rank: 2(N-1)/N x buffer bytes sent (and
// received) — bandwidth-optimal.
#include "algo/allgather/ring.hpp"

#include "algo/exchange.hpp"
#include "algo/reduce_scatter/ring.hpp"

namespace braid::algo {

void ringAllreduce(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  if (ctx.size == 1) {
    copyBytes(a.recv, a.send, a.count * es);
    return;
  }
  auto layout = patterns::SegmentLayout::even(a.count, ctx.size);
  // The reduce-scatter reads every input segment but writes only segment `rank` of the output,
  // so in place (send == recv) is safe: that segment is read for the last time by the very
  // reduction that overwrites it.
  ringReduceScatterPass(ctx, a.dtype, a.op, a.send, layout,
                        bytesOf(a.recv) + layout.at(ctx.rank).offset * es);
  ringAllgatherPass(ctx, a.recv, layout, es);
}

}  // namespace braid::algo
