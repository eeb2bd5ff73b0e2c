// Ring reduce-scatter (reduce_scatter and reduce_scatterv).
//
// The input is cut into one segment per rank; each segment travels once around the ring,
// collecting every rank's contribution, and ends at the rank that owns it:
//   step s = 0 .. N-2: rank r sends its partial of segment (r-s-1) to r+1, receives the partial
//   of segment (r-s-2) from r-1, and adds its own input of that segment. At step N-2 that
//   segment is r's own, and the sum lands in the output.
// Chunk-pipelined, chunk-major: every segment is cut into chunks of C bytes, and chunk c of all
// segments makes its N-1 steps before chunk c+1, so a partial lives in scratch for one hop only
// (four chunk slots: the one being sent, the one just reduced, two receives in flight). Reducing
// chunk k overlaps the transfer of chunks k+1 and k+2.
// Steps: N-1 per chunk. Bytes on the wire per rank: (N-1)/N x input bytes sent and received
// (exactly N-1 segments).
#include "algo/reduce_scatter/ring.hpp"

#include "algo/exchange.hpp"
#include "algo/patterns/ring.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

namespace {

constexpr std::size_t kSlots = 4;

}  // namespace

void ringReduceScatterPass(Context& ctx, DataType dtype, ReduceOp op, const void* in,
                           patterns::SegmentLayout& layout, void* out) {
  const int n = ctx.size;
  const int r = ctx.rank;
  const std::size_t es = dataTypeSize(dtype);
  const std::size_t ce = chunkElems(ctx, kSlots, es);
  const std::size_t chunks = patterns::chunkCount(layout.maxCount(), ce);
  if (chunks == 0) return;
  const auto steps = static_cast<std::size_t>(n - 1);
  const std::size_t items = chunks * steps;
  const int next = patterns::ringNext(r, n);
  const int prev = patterns::ringPrev(r, n);
  const std::uint8_t* input = bytesOf(in);
  std::uint8_t* output = bytesOf(out);
  const std::size_t ownOffset = layout.at(r).offset;

  // Item t is step t % (N-1) of chunk t / (N-1), on both the send and the receive side.
  auto recvChunk = [&](std::size_t t) {
    const int seg = patterns::ringReduceScatterRecvSegment(r, n, static_cast<int>(t % steps));
    return patterns::chunkOf(layout.at(seg), ce, t / steps);
  };
  auto slot = [&](std::size_t t) { return scratchSlot(ctx, t % kSlots, ce * es); };

  // Requests: 0-1 receives (t % 2), 2-3 sends (2 + t % 2).
  InFlight<4> reqs(ctx);
  for (std::size_t t = 0; t < std::min<std::size_t>(2, items); ++t)
    reqs.recv(t, prev, slot(t), recvChunk(t).count * es);

  for (std::size_t t = 0; t < items; ++t) {
    const int step = static_cast<int>(t % steps);
    // The send of item t-1 still reads slot t-2, which the receive of item t+2 will reuse.
    if (t > 0) reqs.wait(2 + (t - 1) % 2);
    const int sendSeg = patterns::ringReduceScatterSendSegment(r, n, step);
    const patterns::Range sc = patterns::chunkOf(layout.at(sendSeg), ce, t / steps);
    // Step 0 sends raw input; later steps forward the partial reduced at item t-1.
    const void* src = step == 0 ? input + sc.offset * es : slot(t - 1);
    reqs.send(2 + t % 2, next, src, sc.count * es);

    const patterns::Range rc = recvChunk(t);
    reqs.wait(t % 2);
    if (step + 2 < n) {
      kernels::reduceInto(dtype, op, slot(t), input + rc.offset * es, rc.count);
    } else {
      kernels::reduce3(dtype, op, output + (rc.offset - ownOffset) * es, input + rc.offset * es,
                       slot(t), rc.count);
    }
    if (t + 2 < items) reqs.recv(t % 2, prev, slot(t + 2), recvChunk(t + 2).count * es);
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
  ringReduceScatterPass(ctx, a.dtype, a.op, a.send, layout, a.recv);
}

}  // namespace

void ringReduceScatter(Context& ctx, const CollArgs& a) {
  auto layout = patterns::SegmentLayout::blocks(a.count, ctx.size);
  runPass(ctx, a, layout);
}

void ringReduceScatterv(Context& ctx, const CollArgs& a) {
  auto layout = patterns::SegmentLayout::varying(a.counts, a.displs);
  runPass(ctx, a, layout);
}

}  // namespace braid::algo
