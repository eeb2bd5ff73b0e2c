// Hierarchical allreduce: composed from sub-groups, for several hosts with several ranks each.
// Between hosts the network is the bottleneck: this moves 2(M-1)/M x S across it per host
// whatever the number of ranks per host, every local rank carrying 1/L of it in parallel.
//
// With M nodes of L ranks each (Context::topo, uniform), the buffer cut into L balanced slices:
//   1. Inside each node: ring reduce_scatterv of the L slices (local rank l ends with slice l
//      reduced over its node), on a sub-group view of the node's ranks.
//   2. Across nodes: the M ranks with local rank l (one per node) run ring allreduce on slice
//      l, all L slices in parallel on disjoint rank sets.
//   3. Inside each node: ring allgatherv of the slices.
// The phases run the registered ring algorithms on SubgroupTransport views (src/algo/
// subgroup.hpp); nothing of ring is re-implemented here. The sub-groups get no topology (each
// is all shared memory or all network, and ring needs none), which keeps the call free of
// topology copies. Each slice is reduced across nodes by one ring, so every rank ends with
// bitwise the same result.
// Without a topology, with one node, with one rank per node, or with nodes of different sizes,
// it runs ring allreduce over all ranks.
// Bytes on the wire: per rank, 2(L-1)/L x S over shared memory (phases 1 and 3) and
// 2(M-1)/M x S/L over the network (phase 2); per host L x 2(M-1)/M x S/L = 2(M-1)/M x S, the
// cross-host bytes of an allreduce of 2 ranks per slice when M = 2 — independent of L.
#include <vector>

#include "algo/exchange.hpp"
#include "algo/subgroup.hpp"

namespace braid::algo {

void ringAllreduce(Context&, const CollArgs&);
void ringReduceScatterv(Context&, const CollArgs&);
void ringAllgatherv(Context&, const CollArgs&);

void hierarchicalAllreduce(Context& ctx, const CollArgs& a) {
  const topology::Topology* topo = ctx.topo;
  if (topo == nullptr || topo->size() != ctx.size || topo->numNodes() < 2 || !topo->uniform() ||
      topo->maxLocalSize() < 2) {
    ringAllreduce(ctx, a);
    return;
  }
  const std::size_t es = dataTypeSize(a.dtype);
  const int node = topo->nodeOf(ctx.rank);
  const int local = topo->localRank(ctx.rank);
  const int perNode = topo->maxLocalSize();
  const auto uL = static_cast<std::size_t>(perNode);

  std::vector<std::size_t> counts(uL);
  std::vector<std::size_t> displs(uL);
  for (int l = 0; l < perNode; ++l) {
    const patterns::Range s = patterns::evenSplit(a.count, perNode, l);
    counts[static_cast<std::size_t>(l)] = s.count;
    displs[static_cast<std::size_t>(l)] = s.offset;
  }
  std::uint8_t* const mySlice = bytesOf(a.recv) + displs[static_cast<std::size_t>(local)] * es;
  const std::size_t mySliceCount = counts[static_cast<std::size_t>(local)];

  std::vector<int> nodeRanks = topo->node(node).ranks;
  std::vector<int> sliceRanks;
  for (int m = 0; m < topo->numNodes(); ++m)
    sliceRanks.push_back(topo->node(m).ranks[static_cast<std::size_t>(local)]);
  SubgroupTransport nodeView(ctx.tr, std::move(nodeRanks));
  SubgroupTransport sliceView(ctx.tr, std::move(sliceRanks));

  // 1. Reduce-scatter inside the node; in place when send == recv (ring allows its output to
  // be exactly its own segment of the input).
  {
    Context sub = subgroupContext(ctx, nodeView, nullptr);
    CollArgs rs = a;
    rs.coll = Collective::ReduceScatterv;
    rs.counts = counts;
    rs.displs = displs;
    rs.recv = mySlice;
    rs.count = mySliceCount;
    ringReduceScatterv(sub, rs);
  }
  // 2. Allreduce of this rank's slice across the nodes, in place.
  {
    Context sub = subgroupContext(ctx, sliceView, nullptr);
    CollArgs ar = a;
    ar.coll = Collective::Allreduce;
    ar.send = mySlice;
    ar.recv = mySlice;
    ar.count = mySliceCount;
    ar.counts = {};
    ar.displs = {};
    ringAllreduce(sub, ar);
  }
  // 3. Allgather of the slices inside the node, in place.
  {
    Context sub = subgroupContext(ctx, nodeView, nullptr);
    CollArgs ag = a;
    ag.coll = Collective::Allgatherv;
    ag.send = mySlice;
    ag.recv = a.recv;
    ag.count = mySliceCount;
    ag.counts = counts;
    ag.displs = displs;
    ringAllgatherv(sub, ag);
  }
}

}  // namespace braid::algo
