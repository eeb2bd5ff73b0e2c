// Ring allgather (allgather and allgatherv).
//
// Every rank's segment travels once around the ring:
//   step s = 0 .. N-2: rank r sends segment (r-s) to r+1 and receives segment (r-s-1) from
//   r-1, straight into its place in the output; it forwards that segment at step s+1.
// Chunk-pipelined, chunk-major: chunk c of every segment makes its N-1 steps before chunk c+1,
// two receives in flight, so forwarding chunk k overlaps receiving chunks k+1 and k+2. Segments
// shorter than the longest (allgatherv) send empty messages for their missing chunks, so every
// rank runs the same schedule. Between two ranks (nothing to forward) each segment goes whole.
// Steps: N-1 per chunk. Bytes on the wire per rank: (N-1)/N x output bytes (equal counts) sent
// and received.
#include "algo/allgather/ring.hpp"

#include <algorithm>

#include "algo/exchange.hpp"
#include "algo/patterns/ring.hpp"

namespace braid::algo {

void ringAllgatherPass(Context& ctx, void* buf, patterns::SegmentLayout& layout, std::size_t es) {
  const int n = ctx.size;
  const int r = ctx.rank;
  // With two ranks nothing is forwarded, so chunks would only add a wait per chunk: each
  // segment travels as one message, as the exchange of an alltoall does.
  const std::size_t ce =
      n == 2 ? std::max<std::size_t>(layout.maxCount(), 1) : chunkElems(ctx, 0, es);
  const std::size_t chunks = patterns::chunkCount(layout.maxCount(), ce);
  if (chunks == 0) return;
  const auto steps = static_cast<std::size_t>(n - 1);
  const std::size_t items = chunks * steps;
  const int next = patterns::ringNext(r, n);
  const int prev = patterns::ringPrev(r, n);
  std::uint8_t* data = bytesOf(buf);

  auto recvChunk = [&](std::size_t t) {
    const int seg = patterns::ringAllgatherRecvSegment(r, n, static_cast<int>(t % steps));
    return patterns::chunkOf(layout.at(seg), ce, t / steps);
  };

  // Requests: 0-1 receives (t % 2), 2-3 sends (2 + t % 2).
  InFlight<4> reqs(ctx);
  for (std::size_t t = 0; t < std::min<std::size_t>(2, items); ++t) {
    const patterns::Range rc = recvChunk(t);
    reqs.recv(t, prev, data + rc.offset * es, rc.count * es);
  }
  for (std::size_t t = 0; t < items; ++t) {
    const int step = static_cast<int>(t % steps);
    if (t > 0) reqs.wait(2 + (t - 1) % 2);
    const int sendSeg = patterns::ringAllgatherSendSegment(r, n, step);
    const patterns::Range sc = patterns::chunkOf(layout.at(sendSeg), ce, t / steps);
    reqs.send(2 + t % 2, next, data + sc.offset * es, sc.count * es);
    reqs.wait(t % 2);
    if (t + 2 < items) {
      const patterns::Range rc = recvChunk(t + 2);
      reqs.recv(t % 2, prev, data + rc.offset * es, rc.count * es);
    }
  }
  reqs.waitAll();
}

namespace {

void runPass(Context& ctx, const CollArgs& a, patterns::SegmentLayout& layout) {
  const std::size_t es = dataTypeSize(a.dtype);
  const patterns::Range own = layout.at(ctx.rank);
  // In place when send already is this rank's segment of recv.
  copyBytes(bytesOf(a.recv) + own.offset * es, a.send, own.count * es);
  if (ctx.size > 1) ringAllgatherPass(ctx, a.recv, layout, es);
}

}  // namespace

void ringAllgather(Context& ctx, const CollArgs& a) {
  auto layout = patterns::SegmentLayout::blocks(a.count, ctx.size);
  runPass(ctx, a, layout);
}

void ringAllgatherv(Context& ctx, const CollArgs& a) {
  auto layout = patterns::SegmentLayout::varying(a.counts, a.displs);
  runPass(ctx, a, layout);
}

}  // namespace braid::algo
