// Pairwise alltoall and alltoallv.
//
// N-1 steps: at step s rank r sends its block for rank r+s and receives the block of rank r-s
// (mod N), straight between user buffers; each step is a permutation, so no rank is a hot spot.
// Up to kWindow steps are in flight at once. The rank's own block is a local copy. Alltoallv
// always exchanges one message per pair (empty when the count is 0), so ranks that disagree on
// counts get Error(Mismatch) rather than a hang. In place is not supported (the communicator
// rejects send == recv).
// Steps: N-1. Bytes on the wire per rank: (N-1)/N x its send buffer (alltoall) sent, the same
// received.
#include "algo/patterns/pairwise.hpp"

#include "algo/exchange.hpp"
#include "algo/patterns/segments.hpp"

namespace braid::algo {

namespace {

constexpr std::size_t kWindow = 4;

void exchange(Context& ctx, const void* send, patterns::SegmentLayout& sendLayout, void* recv,
              patterns::SegmentLayout& recvLayout, std::size_t es, bool skipEmpty) {
  const int n = ctx.size;
  const int r = ctx.rank;
  const patterns::Range ownSend = sendLayout.at(r);
  const patterns::Range ownRecv = recvLayout.at(r);
  if (ownSend.count != ownRecv.count)
    throw Error(ErrorCode::Mismatch,
                "rank " + std::to_string(r) + " sends " + std::to_string(ownSend.count) +
                    " elements to itself but expects " + std::to_string(ownRecv.count));
  copyBytes(bytesOf(recv) + ownRecv.offset * es, bytesOf(send) + ownSend.offset * es,
            ownSend.count * es);
  if (n == 1 || skipEmpty) return;

  // Requests: step s uses 2 * (s % kWindow) for its receive and the next one for its send.
  InFlight<2 * kWindow> reqs(ctx);
  for (int s = 1; s < n; ++s) {
    const std::size_t w = 2 * (static_cast<std::size_t>(s) % kWindow);
    reqs.wait(w);
    reqs.wait(w + 1);
    const int from = patterns::pairwiseRecvPeer(r, n, s);
    const int to = patterns::pairwiseSendPeer(r, n, s);
    const patterns::Range rb = recvLayout.at(from);
    const patterns::Range sb = sendLayout.at(to);
    reqs.recv(w, from, bytesOf(recv) + rb.offset * es, rb.count * es);
    reqs.send(w + 1, to, bytesOf(send) + sb.offset * es, sb.count * es);
  }
  reqs.waitAll();
}

}  // namespace

void pairwiseAlltoall(Context& ctx, const CollArgs& a) {
  auto layout = patterns::SegmentLayout::blocks(a.count, ctx.size);
  exchange(ctx, a.send, layout, a.recv, layout, dataTypeSize(a.dtype), a.count == 0);
}

void pairwiseAlltoallv(Context& ctx, const CollArgs& a) {
  auto sendLayout = patterns::SegmentLayout::varying(a.counts, a.displs);
  auto recvLayout = patterns::SegmentLayout::varying(a.recvCounts, a.recvDispls);
  exchange(ctx, a.send, sendLayout, a.recv, recvLayout, dataTypeSize(a.dtype), false);
}

}  // namespace braid::algo
