// Hierarchical reduce_scatter: composed from sub-groups, for several hosts with several ranks
// each. The mirror of the hierarchical allgather: every block is reduced inside each node
// first, so only node partials cross the network: (M-1)/M x S per host whatever the number of
// ranks per host, every local rank carrying 1/L of it in parallel.
//
// With M nodes of L ranks each (Context::topo, uniform), rank (m, l) = local rank l of node m,
// c the block:
//   1. Inside each node, once per node m' (in node order): ring reduce_scatterv of the blocks
//      of (m', 0) .. (m', L-1) over the node's ranks; local rank l ends with block (m', l)
//      reduced over its node, in slot m' of a buffer of M blocks.
//   2. Across nodes: the M ranks with local rank l (one per node) run ring reduce_scatter of
//      that buffer, all L groups in parallel on disjoint rank sets; rank (m, l) ends with block
//      (m, l) reduced over every node, straight into its output.
// The phases run the registered ring algorithm on SubgroupTransport views (src/algo/
// subgroup.hpp); nothing of ring is re-implemented here. Works for any placement of ranks on
// nodes (blocks are addressed by global rank); in place (recv = send + r x c) too, since phase
// 2 writes the output only after phase 1 read the input.
// Memory: M x c elements allocated per call for the node partials (phase 1's output).
// Without a topology, with one node, with one rank per node, or with nodes of different sizes,
// it runs ring reduce_scatter over all ranks.
// Steps: M x (L-1) inside the node, then M-1 across nodes (N-1 in all, as ring).
// Bytes on the wire per rank: M(L-1) x c over shared memory (phase 1) and (M-1) x c over the
// network (phase 2), (N-1) x c in all; per host L(M-1) x c = (M-1)/M x S over the network.
#include <vector>

#include "algo/exchange.hpp"
#include "algo/reduce_scatter/ring.hpp"
#include "algo/subgroup.hpp"

namespace braid::algo {

void hierarchicalReduceScatter(Context& ctx, const CollArgs& a) {
  const topology::Topology* topo = ctx.topo;
  if (topo == nullptr || topo->size() != ctx.size || topo->numNodes() < 2 || !topo->uniform() ||
      topo->maxLocalSize() < 2) {
    ringReduceScatter(ctx, a);
    return;
  }
  if (a.count == 0) return;
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t blockBytes = a.count * es;
  const int numNodes = topo->numNodes();
  const int node = topo->nodeOf(ctx.rank);
  const int local = topo->localRank(ctx.rank);
  const int perNode = topo->maxLocalSize();
  const auto uM = static_cast<std::size_t>(numNodes);
  const auto uL = static_cast<std::size_t>(perNode);
  auto globalRank = [&](int m, std::size_t l) { return topo->node(m).ranks[l]; };

  // Slot m' holds block (m', local) reduced over this node.
  std::vector<std::uint8_t> partials(uM * blockBytes);

  // 1. Inside the node, one ring per node m'.
  {
    SubgroupTransport nodeView(ctx.tr, topo->node(node).ranks);
    std::vector<std::size_t> counts(uL, a.count);
    std::vector<std::size_t> displs(uL);
    for (int m = 0; m < numNodes; ++m) {
      for (std::size_t l = 0; l < uL; ++l)
        displs[l] = static_cast<std::size_t>(globalRank(m, l)) * a.count;
      Context sub = subgroupContext(ctx, nodeView, nullptr);
      CollArgs rs = a;
      rs.coll = Collective::ReduceScatterv;
      rs.recv = partials.data() + static_cast<std::size_t>(m) * blockBytes;
      rs.counts = counts;
      rs.displs = displs;
      ringReduceScatterv(sub, rs);
    }
  }
  // 2. Across nodes: sub-group rank m is node m, so it ends with slot m reduced over the nodes.
  std::vector<int> sliceRanks(uM);
  for (int m = 0; m < numNodes; ++m)
    sliceRanks[static_cast<std::size_t>(m)] = globalRank(m, static_cast<std::size_t>(local));
  SubgroupTransport sliceView(ctx.tr, std::move(sliceRanks));
  Context sub = subgroupContext(ctx, sliceView, nullptr);
  CollArgs rs = a;
  rs.coll = Collective::ReduceScatter;
  rs.send = partials.data();
  ringReduceScatter(sub, rs);
}

}  // namespace braid::algo
