// Binomial tree reduce to any root, chunk-pipelined.
//
// Ranks are renumbered so the root is virtual rank 0 (patterns/tree.hpp). Each rank adds the
// partial results of its children (nearest first) to its own input and sends the sum
// to its parent; the root's sum is the result. Large messages are cut into chunks: while a rank
// reduces chunk c, its children's chunk c+1 is already arriving and chunk c-1 is on its way to
// the parent. Scratch holds two sets of chunk slots (one per child plus the outgoing partial).
// Steps: ceil(log2 N) per chunk along the deepest path. Bytes on the wire: every non-root rank
// sends the buffer once; a rank receives the buffer once per child (the root: ceil(log2 N)).
#include "algo/exchange.hpp"
#include "algo/patterns/tree.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void binomialTreeReduce(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const bool isRoot = ctx.rank == a.root;
  if (ctx.size == 1) {
    copyBytes(a.recv, a.send, a.count * es);
    return;
  }
  if (a.count == 0) return;

  const patterns::TreeLinks tree = patterns::binomialTree(ctx.rank, ctx.size, a.root);
  // Every rank sizes its chunks for the widest node (the root) so all agree on chunk sizes.
  const auto perSet = static_cast<std::size_t>(patterns::ceilLog2(ctx.size)) + 1;
  const std::size_t ce = chunkElems(ctx, 2 * perSet, es);
  const std::size_t chunks = patterns::chunkCount(a.count, ce);
  const std::size_t slotBytes = ce * es;
  const auto nc = static_cast<std::size_t>(tree.numChildren);
  const std::uint8_t* const input = bytesOf(a.send);
  std::uint8_t* const output = bytesOf(a.recv);

  // Set s = c % 2 holds chunk c: child j's receive in slot s * perSet + j, the partial in slot
  // s * perSet + perSet - 1.
  auto childSlot = [&](std::size_t c, std::size_t j) {
    return scratchSlot(ctx, (c % 2) * perSet + j, slotBytes);
  };
  auto partialSlot = [&](std::size_t c) {
    return scratchSlot(ctx, (c % 2) * perSet + perSet - 1, slotBytes);
  };
  auto elems = [&](std::size_t c) { return std::min(ce, a.count - c * ce); };

  // Requests: receives at (c % 2) * kMaxTreeChildren + j, sends at 2 * kMaxTreeChildren + c % 2.
  constexpr std::size_t kMax = patterns::kMaxTreeChildren;
  InFlight<2 * kMax + 2> reqs(ctx);
  auto postChildRecvs = [&](std::size_t c) {
    for (std::size_t j = 0; j < nc; ++j)
      reqs.recvOverlapped((c % 2) * kMax + j, tree.children[j], childSlot(c, j), elems(c) * es);
  };

  postChildRecvs(0);
  for (std::size_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) postChildRecvs(c + 1);
    const std::size_t n = elems(c);
    const std::uint8_t* const mine = input + c * ce * es;
    const std::uint8_t* partial = mine;  // a leaf forwards its input untouched
    if (nc > 0) {
      std::uint8_t* dst = isRoot ? output + c * ce * es : partialSlot(c);
      // The send of chunk c-2 read this partial slot.
      if (!isRoot) reqs.wait(2 * kMax + c % 2);
      reqs.wait((c % 2) * kMax);
      kernels::reduce3(a.dtype, a.op, dst, mine, childSlot(c, 0), n);
      for (std::size_t j = 1; j < nc; ++j) {
        reqs.wait((c % 2) * kMax + j);
        kernels::reduceInto(a.dtype, a.op, dst, childSlot(c, j), n);
      }
      partial = dst;
    }
    if (!isRoot) {
      reqs.wait(2 * kMax + c % 2);
      reqs.send(2 * kMax + c % 2, tree.parent, partial, n * es);
    }
  }
  reqs.waitAll();
}

}  // namespace braid::algo
