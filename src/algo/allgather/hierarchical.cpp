// Hierarchical allgather: composed from sub-groups, for several hosts with several ranks each.
// Every block crosses the network once per other host, carried by its own rank: the cross-host
// bytes per host are (M-1)/M x S whatever the number of ranks per host, and every local rank
// carries 1/L of them in parallel.
//
// With M nodes of L ranks each (Context::topo, uniform), rank (m, l) = local rank l of node m:
//   1. Across nodes: the M ranks with local rank l (one per node) run allgatherv of their own
//      blocks on their slice group, all L groups in parallel on disjoint rank sets; rank (m, l)
//      then holds the blocks of (m', l) for every node m'.
//   2. Inside each node, once per node m' (in node order): allgatherv of the blocks of
//      (m', 0) .. (m', L-1) on the node group, local rank l contributing (m', l).
// Every block goes straight to its place in the output (global rank order, any placement of
// ranks on nodes): no scratch, no staging copy. The phases are collectives of the groups
// (Context::groups, algo/group.hpp): a communicator's sub-communicators select their own
// algorithms (shm_direct in a node of one host), views run ring.
// Needs a topology of at least 2 nodes, at least 2 ranks on a node, the same number on every
// node (the row's constraints; selection runs it only then, a direct call throws).
// Steps: M-1 across nodes, then M x (L-1) inside the node (N-1 in all, as ring).
// Bytes on the wire per rank, c the block: (M-1) x c over the network (phase 1) and
// M(L-1) x c over shared memory (phase 2), (N-1) x c in all; per host L(M-1) x c =
// (M-1)/M x S over the network, against (N-1) x c through each host's boundary link for a
// flat ring.
#include <vector>

#include "algo/exchange.hpp"
#include "algo/group.hpp"

namespace braid::algo {

void hierarchicalAllgather(Context& ctx, const CollArgs& a) {
  const topology::Topology* topo =
      &requireNodes(ctx, Collective::Allgather, "hierarchical", /*uniform=*/true);
  Groups& groups = requireGroups(ctx, Collective::Allgather, "hierarchical");
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t blockBytes = a.count * es;
  std::uint8_t* const out = bytesOf(a.recv);
  // The rank's own block into place (nothing to do in place).
  copyBytes(out + static_cast<std::size_t>(ctx.rank) * blockBytes, a.send, blockBytes);
  if (a.count == 0) return;

  const int numNodes = topo->numNodes();
  const int local = topo->localRank(ctx.rank);
  const int perNode = topo->maxLocalSize();
  const auto uM = static_cast<std::size_t>(numNodes);
  const auto uL = static_cast<std::size_t>(perNode);
  const auto ul = static_cast<std::size_t>(local);
  auto globalRank = [&](int m, std::size_t l) { return topo->node(m).ranks[l]; };

  // 1. Across nodes: the blocks of local rank `local` of every node.
  {
    std::vector<int> sliceRanks(uM);
    std::vector<std::size_t> counts(uM, a.count);
    std::vector<std::size_t> displs(uM);
    for (int m = 0; m < numNodes; ++m) {
      const auto um = static_cast<std::size_t>(m);
      sliceRanks[um] = globalRank(m, ul);
      displs[um] = static_cast<std::size_t>(sliceRanks[um]) * a.count;
    }
    CollArgs ag = a;
    ag.coll = Collective::Allgatherv;
    ag.send = out + static_cast<std::size_t>(ctx.rank) * blockBytes;
    ag.recv = out;
    ag.counts = counts;
    ag.displs = displs;
    groups.slice()->run(ag);
  }
  // 2. Inside the node, one ring per node m': local rank l contributes the block of (m', l).
  Group& nodeGroup = groups.node();
  std::vector<std::size_t> counts(uL, a.count);
  std::vector<std::size_t> displs(uL);
  for (int m = 0; m < numNodes; ++m) {
    for (std::size_t l = 0; l < uL; ++l)
      displs[l] = static_cast<std::size_t>(globalRank(m, l)) * a.count;
    CollArgs ag = a;
    ag.coll = Collective::Allgatherv;
    ag.send = out + displs[ul] * es;
    ag.recv = out;
    ag.counts = counts;
    ag.displs = displs;
    nodeGroup.run(ag);
  }
}

}  // namespace braid::algo
