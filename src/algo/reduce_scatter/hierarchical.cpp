// Hierarchical reduce_scatter: composed from sub-groups, for several hosts with several ranks
// each. The mirror of the hierarchical allgather: every block is reduced inside each node
// first, so only node partials cross the network: (M-1)/M x S per host whatever the number of
// ranks per host, every local rank carrying 1/L of it in parallel.
//
// With M nodes of L ranks each (Context::topo, uniform), rank (m, l) = local rank l of node m,
// c the block:
//   1. Inside each node, once per node m' (in node order): reduce_scatterv of the blocks of
//      (m', 0) .. (m', L-1) on the node group; local rank l ends with block (m', l) reduced
//      over its node, in segment m' of the partials (scratch).
//   2. Across nodes: the M ranks with local rank l (one per node) run reduce_scatter of the
//      partials on their slice group, all L groups in parallel on disjoint rank sets; rank
//      (m, l) ends with block (m, l) reduced over every node, straight into its output.
// The phases are collectives of the groups (Context::groups, algo/group.hpp): a communicator's
// sub-communicators select their own algorithms (shm_direct in a node of one host), views run
// ring. Works for any placement of ranks on nodes (blocks are addressed by global rank).
// Memory: no allocation. The node partials live in the first half of the scratch (M segments of
// g elements, g = scratch / 2 / (M x element size)); the groups bring their own (a view the
// other half); blocks longer than g run both phases once per segment of g elements. In place (recv
// = send + r x c) works: each segment's output is written after that segment of the input was read,
// and later segments read other elements. Needs a topology of at least 2 nodes, at least 2 ranks on
// a node, the same number on every node (the row's constraints; selection runs it only then, a
// direct call throws). Steps: M x (L-1) inside the node, then M-1 across nodes (N-1 in all, as
// ring), per segment. Bytes on the wire per rank: M(L-1) x c over shared memory (phase 1) and (M-1)
// x c over the network (phase 2), (N-1) x c in all; per host L(M-1) x c = (M-1)/M x S over the
// network.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "algo/exchange.hpp"
#include "algo/group.hpp"

namespace braid::algo {

void hierarchicalReduceScatter(Context& ctx, const CollArgs& a) {
  const topology::Topology* topo =
      &requireNodes(ctx, Collective::ReduceScatter, "hierarchical", /*uniform=*/true);
  Groups& groups = requireGroups(ctx, Collective::ReduceScatter, "hierarchical");
  if (a.count == 0) return;
  const std::size_t es = dataTypeSize(a.dtype);
  const int numNodes = topo->numNodes();
  const int perNode = topo->maxLocalSize();
  const auto uM = static_cast<std::size_t>(numNodes);
  const auto uL = static_cast<std::size_t>(perNode);
  auto globalRank = [&](int m, std::size_t l) { return topo->node(m).ranks[l]; };

  // The node partials live in the first half of the scratch (M segments of g elements). Blocks
  // longer than g go segment by segment.
  const std::size_t half = ctx.scratch.size() / 2;
  const std::size_t g = std::min(a.count, half / (uM * es));
  if (g == 0)
    throw Error(ErrorCode::InvalidArgument,
                "rank " + std::to_string(ctx.rank) + ": hierarchical reduce_scatter: scratch of " +
                    std::to_string(ctx.scratch.size()) + " bytes cannot hold " +
                    std::to_string(2 * uM) + " elements of " + std::to_string(es) +
                    " bytes (raise BRAID_BUFFSIZE)");
  std::uint8_t* const partials = ctx.scratch.data();
  Group& nodeGroup = groups.node();
  Group& sliceGroup = *groups.slice();  // uniform nodes: every local rank has its slice group
  std::vector<std::size_t> counts(uL);
  std::vector<std::size_t> displs(uL);

  for (std::size_t off = 0; off < a.count; off += g) {
    const std::size_t n = std::min(g, a.count - off);
    // 1. Inside the node, one ring per node m': elements [off, off + n) of the blocks of
    // (m', 0) .. (m', L-1); this rank's sum lands in partial segment m'.
    std::fill(counts.begin(), counts.end(), n);
    for (int m = 0; m < numNodes; ++m) {
      for (std::size_t l = 0; l < uL; ++l)
        displs[l] = static_cast<std::size_t>(globalRank(m, l)) * a.count + off;
      CollArgs rs = a;
      rs.coll = Collective::ReduceScatterv;
      rs.recv = partials + static_cast<std::size_t>(m) * n * es;
      rs.count = n;
      rs.counts = counts;
      rs.displs = displs;
      nodeGroup.run(rs);
    }
    // 2. Across nodes: sub-group rank m is node m, so it ends with segment m reduced over the
    // nodes, which is this rank's own block: straight into the output.
    CollArgs rs = a;
    rs.coll = Collective::ReduceScatter;
    rs.send = partials;
    rs.recv = bytesOf(a.recv) + off * es;
    rs.count = n;
    sliceGroup.run(rs);
  }
}

}  // namespace braid::algo
