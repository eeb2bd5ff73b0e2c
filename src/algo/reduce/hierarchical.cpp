// Hierarchical reduce: composed from sub-groups, for several hosts with several ranks each.
// The mirror of the hierarchical broadcast: each node reduces its inputs first, so only node
// partials cross the network, cut into P slices carried in parallel by P local ranks of every
// host.
//
// With M nodes (Context::topo; nodes may differ in size), P = the smallest number of ranks on a
// node, the buffer cut into P balanced slices, the root on node m0:
//   1. Inside each node with more than one rank: ring reduce_scatterv of the P slices; local
//      rank l < P ends with slice l reduced over its node (ranks >= P keep nothing).
//   2. Across nodes: the M ranks with local rank l < P (one per node) run binomial tree reduce
//      of slice l to node m0, all P slices in parallel on disjoint rank sets.
//   3. On node m0: local rank l < P sends its slice, now reduced over every rank, to the root
//      (the root's own slice, if it has one, was reduced straight into its output).
// Phases 1 and 2 run the registered ring and binomial tree algorithms on SubgroupTransport
// views (src/algo/subgroup.hpp); phase 3 is one message per slice, posted directly.
// Memory: one slice allocated per call on ranks that carry one. Non-root ranks never touch
// recv (it may be null); in place at the root works since its input is read only in phase 1.
// Without a topology, with one node, or with one rank on every node, it runs binomial tree
// reduce over all ranks.
// Bytes on the wire per rank (l its local rank, m its node, s_l the bytes of slice l, s_j = 0
// for j >= P): over shared memory S - s_l (phase 1, on nodes of several ranks) plus s_l on
// node m0 for l != the root's local rank (phase 3); over the network s_l when m != m0 (phase
// 2). All nodes together send (M-1) x S over the network: each host's partial once.
#include <algorithm>
#include <vector>

#include "algo/exchange.hpp"
#include "algo/subgroup.hpp"

namespace braid::algo {

void binomialTreeReduce(Context&, const CollArgs&);
void ringReduceScatterv(Context&, const CollArgs&);

void hierarchicalReduce(Context& ctx, const CollArgs& a) {
  const topology::Topology* topo = ctx.topo;
  if (topo == nullptr || topo->size() != ctx.size || topo->numNodes() < 2 ||
      topo->maxLocalSize() < 2) {
    binomialTreeReduce(ctx, a);
    return;
  }
  if (a.count == 0) return;
  const std::size_t es = dataTypeSize(a.dtype);
  const bool isRoot = ctx.rank == a.root;
  const int numNodes = topo->numNodes();
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
  const patterns::Range mine = carries ? slice(local) : patterns::Range{};

  // This rank's slice reduced over its node (a node of one rank: its input, P == 1).
  std::vector<std::uint8_t> partial;
  const std::uint8_t* sliceIn = bytesOf(a.send) + mine.offset * es;

  // 1. Reduce-scatter of the slices inside the node.
  if (nodeSize > 1) {
    partial.resize(std::max<std::size_t>(1, mine.count * es));
    const auto uL = static_cast<std::size_t>(nodeSize);
    std::vector<std::size_t> counts(uL, 0);
    std::vector<std::size_t> displs(uL, 0);
    for (int l = 0; l < slices; ++l) {
      counts[static_cast<std::size_t>(l)] = slice(l).count;
      displs[static_cast<std::size_t>(l)] = slice(l).offset;
    }
    SubgroupTransport nodeView(ctx.tr, nodeRanks);
    Context sub = subgroupContext(ctx, nodeView, nullptr);
    CollArgs rs = a;
    rs.coll = Collective::ReduceScatterv;
    rs.recv = partial.data();
    rs.count = mine.count;
    rs.counts = counts;
    rs.displs = displs;
    ringReduceScatterv(sub, rs);
    sliceIn = partial.data();
  }
  // 2. Slice `local` of every node to node m0, binomial tree over the nodes. On node m0 the
  // result goes to the root's output (the root's own slice) or back into the partial.
  if (carries) {
    std::vector<int> sliceRanks(static_cast<std::size_t>(numNodes));
    for (int m = 0; m < numNodes; ++m)
      sliceRanks[static_cast<std::size_t>(m)] =
          topo->node(m).ranks[static_cast<std::size_t>(local)];
    SubgroupTransport sliceView(ctx.tr, std::move(sliceRanks));
    Context sub = subgroupContext(ctx, sliceView, nullptr);
    CollArgs rd = a;
    rd.send = sliceIn;
    rd.recv = nullptr;
    if (isRoot)
      rd.recv = bytesOf(a.recv) + mine.offset * es;
    else if (node == rootNode)
      rd.recv = partial.data();  // nodeSize > 1 here: the root is another rank of this node
    rd.count = mine.count;
    rd.root = rootNode;
    binomialTreeReduce(sub, rd);
  }
  // 3. The reduced slices of node m0 to the root.
  if (node == rootNode && nodeSize > 1) {
    if (isRoot) {
      InFlightSet reqs(ctx, static_cast<std::size_t>(slices));
      for (int l = 0; l < slices; ++l) {
        const patterns::Range s = slice(l);
        if (l != rootLocal && s.count > 0)
          reqs.recv(static_cast<std::size_t>(l), nodeRanks[static_cast<std::size_t>(l)],
                    bytesOf(a.recv) + s.offset * es, s.count * es);
      }
      reqs.waitAll();
    } else if (carries && mine.count > 0) {
      InFlight<1> reqs(ctx);
      reqs.send(0, a.root, partial.data(), mine.count * es);
      reqs.wait(0);
    }
  }
}

}  // namespace braid::algo
