// Double binary tree allreduce (Sanders, Speck & Träff; NCCL's tree algorithm): logarithmic
// depth like recursive doubling, yet every rank sends about 2 x S, independent of N.
//
// The buffer is cut into two halves; half h is reduced up binary tree h and broadcast back
// down it (patterns/double_tree.hpp). The trees are built so that a rank interior in one is a
// leaf in the other: each rank forwards data for at most about one tree's worth of children.
//   1. Up: for every chunk of both halves (interleaved), a rank receives the partials of its
//      children in tree h, reduces them into its own data in the output buffer, and sends the
//      result to its parent. The root of tree h ends with the full reduction of half h.
//   2. Down: the root sends each chunk to its children; every other rank receives it from its
//      parent straight into the output buffer and forwards it to its children.
// Chunk-pipelined: a rank posts the receives of the next chunk before reducing the current
// one and never waits for its own sends until it reuses their slot, so chunks stream up and
// down the trees. The result is computed once per element (at a root) and then copied, so every
// rank ends with bitwise the same values.
// Steps: about 2 log2(N) per chunk along the deepest path. Bytes on the wire per rank: for each
// tree, S/2 to its parent (unless root) plus S/2 per child — at most 2 x S (leaf in one tree,
// two children in the other), about S for a leaf in both; all ranks together send 2(N-1) x S/2
// per tree, 2(N-1) x S in all (as ring).
#include "algo/exchange.hpp"
#include "algo/patterns/double_tree.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void doubleBinaryTreeAllreduce(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  copyBytes(a.recv, a.send, a.count * es);
  if (ctx.size == 1 || a.count == 0) return;

  const patterns::BinaryTreeLinks trees[2] = {patterns::doubleBinaryTree(ctx.rank, ctx.size, 0),
                                              patterns::doubleBinaryTree(ctx.rank, ctx.size, 1)};
  const patterns::Range halves[2] = {patterns::evenSplit(a.count, 2, 0),
                                     patterns::evenSplit(a.count, 2, 1)};
  // Four scratch slots: two children x two items in flight.
  const std::size_t ce = chunkElems(ctx, 4, es);
  const std::size_t chunks = patterns::chunkCount(halves[0].count, ce);  // half 0 is the longer
  const std::size_t items = 2 * chunks;  // item t: chunk t / 2 of half t % 2
  std::uint8_t* const buf = bytesOf(a.recv);
  auto piece = [&](std::size_t t) { return patterns::chunkOf(halves[t % 2], ce, t / 2); };
  auto links = [&](std::size_t t) -> const patterns::BinaryTreeLinks& { return trees[t % 2]; };
  auto slot = [&](std::size_t t, int child) {
    return scratchSlot(ctx, (t % 2) * 2 + static_cast<std::size_t>(child), ce * es);
  };

  // Requests: up-receives 0-3 ((t % 2) * 2 + child), up-sends 4-5 (4 + t % 2), down-receives
  // 6-7 (6 + t % 2), down-sends 8-11 (8 + (t % 2) * 2 + child).
  InFlight<12> reqs(ctx);
  auto postUp = [&](std::size_t t) {
    const patterns::Range pc = piece(t);
    if (pc.count == 0) return;
    for (int j = 0; j < links(t).numChildren; ++j)
      reqs.recv((t % 2) * 2 + static_cast<std::size_t>(j), links(t).children[j], slot(t, j),
                pc.count * es);
  };
  if (items > 0) postUp(0);
  for (std::size_t t = 0; t < items; ++t) {
    if (t + 1 < items) postUp(t + 1);
    const patterns::Range pc = piece(t);
    if (pc.count == 0) continue;
    std::uint8_t* const mine = buf + pc.offset * es;
    for (int j = 0; j < links(t).numChildren; ++j) {
      reqs.wait((t % 2) * 2 + static_cast<std::size_t>(j));
      kernels::reduceInto(a.dtype, a.op, mine, slot(t, j), pc.count);
    }
    if (links(t).parent >= 0) {
      reqs.wait(4 + t % 2);  // item t-2's send to the parent
      reqs.send(4 + t % 2, links(t).parent, mine, pc.count * es);
    }
  }
  reqs.waitAll();  // the partials sent up are overwritten by the result coming down

  auto postDown = [&](std::size_t t) {
    const patterns::Range pc = piece(t);
    if (pc.count == 0 || links(t).parent < 0) return;
    reqs.recv(6 + t % 2, links(t).parent, buf + pc.offset * es, pc.count * es);
  };
  if (items > 0) postDown(0);
  for (std::size_t t = 0; t < items; ++t) {
    if (t + 1 < items) postDown(t + 1);
    const patterns::Range pc = piece(t);
    if (pc.count == 0) continue;
    reqs.wait(6 + t % 2);
    for (int j = 0; j < links(t).numChildren; ++j) {
      const std::size_t req = 8 + (t % 2) * 2 + static_cast<std::size_t>(j);
      reqs.wait(req);  // item t-2's send to the same child
      reqs.send(req, links(t).children[j], buf + pc.offset * es, pc.count * es);
    }
  }
  reqs.waitAll();
}

}  // namespace braid::algo
