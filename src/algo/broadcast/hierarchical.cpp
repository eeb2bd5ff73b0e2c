// Hierarchical broadcast: composed from sub-groups, for several hosts with several ranks each.
// The buffer crosses the network once per other host, cut into P slices carried in parallel by
// P local ranks of every host, instead of whole between single ranks.
//
// With M nodes (Context::topo; nodes may differ in size), P = the smallest number of ranks on a
// node, the buffer cut into P balanced slices, the root on node m0:
//   1. On node m0: the root sends slice l to its local rank l, for every l < P (itself aside).
//   2. Across nodes: the M ranks with local rank l < P (one per node) broadcast slice l from
//      node m0 on their slice group, all P slices in parallel on disjoint rank sets.
//   3. Inside each node with more than one rank: allgatherv of the P slices on the node group
//      (local ranks >= P contribute nothing and receive everything).
// Phases 2 and 3 are collectives of the groups (Context::groups, algo/group.hpp): a
// communicator's sub-communicators select their own algorithms (shm_direct in a node of one
// host), views run binomial tree and ring; phase 1 is one message per slice, posted directly.
// Needs a topology of at least 2 nodes and at least 2 ranks on a node (the row's constraints;
// selection runs it only then, a direct call throws).
// Bytes on the wire per rank (l its local rank, m its node, s_l the bytes of slice l, s_j = 0
// for j >= P): the root sends S - s_r over shared memory (phase 1, r the root's local rank if
// < P); over the network s_l x (children of node m in the binomial tree of the M nodes rooted
// at m0) (phase 2, with a binomial tree); in the node S - s_l at most (phase 3).
// All nodes together send (M-1) x S over the network, the least a broadcast can: each host
// receives the buffer exactly once.
#include <algorithm>
#include <vector>

#include "algo/exchange.hpp"
#include "algo/group.hpp"

namespace braid::algo {

void hierarchicalBroadcast(Context& ctx, const CollArgs& a) {
  const topology::Topology* topo =
      &requireNodes(ctx, Collective::Broadcast, "hierarchical", /*uniform=*/false);
  Groups& groups = requireGroups(ctx, Collective::Broadcast, "hierarchical");
  const std::size_t es = dataTypeSize(a.dtype);
  std::uint8_t* const buf = bytesOf(a.recv);
  const bool isRoot = ctx.rank == a.root;
  // The communicator passes send == recv == buf; a distinct root send buffer is copied first.
  if (isRoot && a.send != nullptr) copyBytes(buf, a.send, a.count * es);
  if (a.count == 0) return;

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

  // 1. The root hands slice l to local rank l of its node.
  if (node == rootNode) {
    if (isRoot) {
      InFlightSet reqs(ctx, static_cast<std::size_t>(slices));
      for (int l = 0; l < slices; ++l) {
        const patterns::Range s = slice(l);
        if (l != rootLocal && s.count > 0)
          reqs.send(static_cast<std::size_t>(l), nodeRanks[static_cast<std::size_t>(l)],
                    buf + s.offset * es, s.count * es);
      }
      reqs.waitAll();
    } else if (local < slices && slice(local).count > 0) {
      const patterns::Range s = slice(local);
      InFlight<1> reqs(ctx);
      reqs.recv(0, a.root, buf + s.offset * es, s.count * es);
      reqs.wait(0);
    }
  }
  // 2. Slice `local` from node m0 to every node, on the slice group. (The node group first:
  // every rank builds its groups in the same order, node then slice.)
  Group& nodeGroup = groups.node();
  if (local < slices) {
    const patterns::Range s = slice(local);
    CollArgs bc = a;
    bc.recv = buf + s.offset * es;
    bc.send = bc.recv;  // in place, as a communicator passes it
    bc.count = s.count;
    bc.root = rootNode;
    groups.slice()->run(bc);
  }
  // 3. The slices to every rank of the node.
  if (nodeSize > 1) {
    const auto uL = static_cast<std::size_t>(nodeSize);
    std::vector<std::size_t> counts(uL, 0);
    std::vector<std::size_t> displs(uL, 0);
    for (int l = 0; l < slices; ++l) {
      counts[static_cast<std::size_t>(l)] = slice(l).count;
      displs[static_cast<std::size_t>(l)] = slice(l).offset;
    }
    CollArgs ag = a;
    ag.coll = Collective::Allgatherv;
    ag.send = buf + displs[static_cast<std::size_t>(local)] * es;
    ag.recv = buf;
    ag.counts = counts;
    ag.displs = displs;
    nodeGroup.run(ag);
  }
}

}  // namespace braid::algo
