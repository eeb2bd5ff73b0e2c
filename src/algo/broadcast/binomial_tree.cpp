// Binomial tree broadcast from any root, chunk-pipelined.
//
// Ranks are renumbered so the root is virtual rank 0 (patterns/tree.hpp). Each rank receives
// the buffer from its parent and forwards it to its children, largest subtree first. Large
// messages are cut into chunks: a rank forwards chunk c while chunks c+1 and c+2 are arriving,
// so the tree works as a pipeline (between two ranks, over a transport that pipelines large
// messages itself, the buffer goes whole). Data moves straight between user buffers (no scratch).
// Steps: ceil(log2 N) per chunk along the deepest path. Bytes on the wire: every non-root rank
// receives the buffer once; a rank sends it once per child (the root: ceil(log2 N)).
#include "algo/exchange.hpp"
#include "algo/patterns/tree.hpp"

namespace braid::algo {

void binomialTreeBroadcast(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const bool isRoot = ctx.rank == a.root;
  // The communicator passes send == recv == buf; a distinct root send buffer is copied first.
  if (isRoot && a.send != nullptr) copyBytes(a.recv, a.send, a.count * es);
  if (ctx.size == 1 || a.count == 0) return;

  const patterns::TreeLinks tree = patterns::binomialTree(ctx.rank, ctx.size, a.root);
  // Between two ranks nothing is forwarded: a transport that pipelines one large message itself
  // gets it whole (a chunk each would only add a message's overhead per chunk).
  std::size_t ce = chunkElems(ctx, 0, es);
  if (a.count > ce && ctx.size == 2 && ctx.tr.pipelinesLargeMessages(1 - ctx.rank)) ce = a.count;
  const std::size_t chunks = patterns::chunkCount(a.count, ce);
  const auto nc = static_cast<std::size_t>(tree.numChildren);
  std::uint8_t* const buf = bytesOf(a.recv);
  auto chunkPtr = [&](std::size_t c) { return buf + c * ce * es; };
  auto chunkBytes = [&](std::size_t c) { return std::min(ce, a.count - c * ce) * es; };

  // Requests: sends of chunk c at (c % 2) * kMax + j, receives at 2 * kMax + c % 2.
  constexpr std::size_t kMax = patterns::kMaxTreeChildren;
  InFlight<2 * kMax + 2> reqs(ctx);
  if (!isRoot) {
    for (std::size_t c = 0; c < std::min<std::size_t>(2, chunks); ++c)
      reqs.recv(2 * kMax + c, tree.parent, chunkPtr(c), chunkBytes(c));
  }
  for (std::size_t c = 0; c < chunks; ++c) {
    if (!isRoot) {
      reqs.wait(2 * kMax + c % 2);
      if (c + 2 < chunks)
        reqs.recv(2 * kMax + c % 2, tree.parent, chunkPtr(c + 2), chunkBytes(c + 2));
    }
    for (std::size_t j = nc; j-- > 0;) {
      const std::size_t req = (c % 2) * kMax + j;
      reqs.wait(req);  // chunk c-2's send to the same child
      reqs.send(req, tree.children[j], chunkPtr(c), chunkBytes(c));
    }
  }
  reqs.waitAll();
}

}  // namespace braid::algo
