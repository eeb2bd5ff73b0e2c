// Hierarchical reduce: composed from sub-groups, for several hosts with several ranks each.
// The mirror of the hierarchical broadcast: each node reduces its inputs first, so only node
// partials cross the network, cut into P slices carried in parallel by P local ranks of every
// host.
//
// With M nodes (Context::topo; nodes may differ in size), P = the smallest number of ranks on a
// node, the buffer cut into P balanced slices, the root on node m0:
//   1. Inside each node with more than one rank: reduce_scatterv of the P slices on the node
//      group; local rank l < P ends with slice l reduced over its node (ranks >= P keep
//      nothing).
//   2. Across nodes: the M ranks with local rank l < P (one per node) reduce slice l to node
//      m0 on their slice group, all P slices in parallel on disjoint rank sets.
//   3. On node m0: local rank l < P sends its slice, now reduced over every rank, to the root
//      (the root's own slice, if it has one, was reduced straight into its output).
// Phases 1 and 2 are collectives of the groups (Context::groups, algo/group.hpp): a
// communicator's sub-communicators select their own algorithms (shm_direct in a node of one
// host), views run ring and binomial tree; phase 3 is one message per slice, posted directly.
// Memory: no allocation. The partial of a rank's slice lives in the first half of the scratch
// (g elements), the groups bring their own (a view the other half); slices longer than g run the
// three phases once per segment of g elements. Non-root ranks never touch recv (it may be null); in
// place at the root works since each segment's output is written after that segment of the
// input was read, and later segments read other elements.
// Needs a topology of at least 2 nodes and at least 2 ranks on a node (the row's constraints;
// selection runs it only then, a direct call throws).
// Bytes on the wire per rank (l its local rank, m its node, s_l the bytes of slice l, s_j = 0
// for j >= P): over shared memory S - s_l (phase 1, on nodes of several ranks) plus s_l on
// node m0 for l != the root's local rank (phase 3); over the network s_l when m != m0 (phase
// 2). All nodes together send (M-1) x S over the network: each host's partial once.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "algo/exchange.hpp"
#include "algo/group.hpp"

namespace braid::algo {

void hierarchicalReduce(Context& ctx, const CollArgs& a) {
  const topology::Topology* topo =
      &requireNodes(ctx, Collective::Reduce, "hierarchical", /*uniform=*/false);
  Groups& groups = requireGroups(ctx, Collective::Reduce, "hierarchical");
  if (a.count == 0) return;
  const std::size_t es = dataTypeSize(a.dtype);
  const bool isRoot = ctx.rank == a.root;
  const int node = topo->nodeOf(ctx.rank);
  const int local = topo->localRank(ctx.rank);
  const int rootNode = topo->nodeOf(a.root);
  const int rootLocal = topo->localRank(a.root);
  const std::vector<int>& nodeRanks = topo->node(node).ranks;
  const int nodeSize = static_cast<int>(nodeRanks.size());
  int slices = nodeSize;
  for (const topology::Node& n : topo->nodes())
    slices = std::min(slices, static_cast<int>(n.ranks.size()));
  auto slice = [&](int l) { return patterns::evenSplit(a.count, slices, l); };
  const bool carries = local < slices;

  // This rank's part of its slice, reduced over its node, lives in the first half of the
  // scratch (g elements). Slices longer than g go segment by segment: round j covers elements [j g,
  // (j+1) g) of every slice.
  const std::size_t half = ctx.scratch.size() / 2;
  const std::size_t longest = slice(0).count;  // evenSplit: slice 0 is the longest
  const std::size_t g = std::min(longest, half / es);
  if (g == 0)
    throw Error(ErrorCode::InvalidArgument,
                "rank " + std::to_string(ctx.rank) + ": hierarchical reduce: scratch of " +
                    std::to_string(ctx.scratch.size()) + " bytes cannot hold 2 elements of " +
                    std::to_string(es) + " bytes (raise BRAID_BUFFSIZE)");
  std::uint8_t* const partial = ctx.scratch.data();
  Group& nodeGroup = groups.node();
  Group* const sliceGroup = groups.slice();  // ranks that carry a slice have one
  const auto uL = static_cast<std::size_t>(nodeSize);
  std::vector<std::size_t> counts(uL, 0);
  std::vector<std::size_t> displs(uL, 0);

  for (std::size_t off = 0; off < longest; off += g) {
    // Round `off`: elements [off, off + g) of every slice.
    for (int l = 0; l < slices; ++l) {
      const patterns::Range s = slice(l);
      const std::size_t begin = std::min(s.count, off);
      counts[static_cast<std::size_t>(l)] = std::min(g, s.count - begin);
      displs[static_cast<std::size_t>(l)] = s.offset + begin;
    }
    const std::size_t n = carries ? counts[static_cast<std::size_t>(local)] : 0;
    const std::size_t at = carries ? displs[static_cast<std::size_t>(local)] : 0;
    // The round's part of this rank's slice reduced over its node (a node of one rank: its
    // input, P == 1).
    const std::uint8_t* sliceIn = bytesOf(a.send) + at * es;

    // 1. Reduce-scatter of the slices' parts inside the node.
    if (nodeSize > 1) {
      CollArgs rs = a;
      rs.coll = Collective::ReduceScatterv;
      rs.recv = partial;
      rs.count = n;
      rs.counts = counts;
      rs.displs = displs;
      nodeGroup.run(rs);
      sliceIn = partial;
    }
    // 2. The part of slice `local` of every node to node m0, binomial tree over the nodes. On
    // node m0 the result goes to the root's output (the root's own slice) or back into the
    // partial (nodeSize > 1 there: the root is another rank of this node).
    if (carries && n > 0) {
      CollArgs rd = a;
      rd.send = sliceIn;
      rd.recv = nullptr;
      if (isRoot)
        rd.recv = bytesOf(a.recv) + at * es;
      else if (node == rootNode)
        rd.recv = partial;
      rd.count = n;
      rd.root = rootNode;
      sliceGroup->run(rd);
    }
    // 3. The round's reduced parts on node m0 to the root.
    if (node == rootNode && nodeSize > 1) {
      if (isRoot) {
        InFlightSet reqs(ctx, static_cast<std::size_t>(slices));
        for (int l = 0; l < slices; ++l) {
          const auto ul = static_cast<std::size_t>(l);
          if (l != rootLocal && counts[ul] > 0)
            reqs.recv(ul, nodeRanks[ul], bytesOf(a.recv) + displs[ul] * es, counts[ul] * es);
        }
        reqs.waitAll();
      } else if (carries && n > 0) {
        InFlight<1> reqs(ctx);
        reqs.send(0, a.root, partial, n * es);
        reqs.wait(0);
      }
    }
  }
}

}  // namespace braid::algo
