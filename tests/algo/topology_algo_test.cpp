// Algorithms that read Context::topo (the hierarchical allreduce) on fabricated topologies:
// blocked and cyclic rank placement, several counts (0, 1, odd, primes, > one chunk), dtypes,
// in place, a tiny chunk; expected values computed independently (tests/harness/data). The
// registry-driven sweep runs them without a topology (their flat fallback); this runs the
// composed paths.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/data.hpp"
#include "rank_threads.hpp"

namespace braid::test {
namespace {

struct Layout {
  int nodes;
  int perNode;
  bool cyclic;
};

std::string describe(const Layout& l) {
  return std::to_string(l.nodes) + "x" + std::to_string(l.perNode) +
         (l.cyclic ? " cyclic" : " blocked");
}

void checkAllreduce(const algo::AlgoInfo& algo, const topology::Topology& topo, std::size_t count,
                    DataType dt, ReduceOp op, bool inPlace) {
  const int n = topo.size();
  std::vector<double> expected(count);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < count; ++i) {
    for (int r = 0; r < n; ++r) v[static_cast<std::size_t>(r)] = testValue(dt, op, r, i);
    expected[i] = expectedReduce(dt, op, v);
  }
  RankSetup setup;
  setup.size = n;
  setup.topo = &topo;
  std::vector<std::string> reports(static_cast<std::size_t>(n));
  auto errors = runRanks(setup, [&](algo::Context& ctx) {
    Buffer in(dt, count);
    Buffer out(dt, count);
    for (std::size_t i = 0; i < count; ++i) {
      in.set(i, testValue(dt, op, ctx.rank, i));
      out.set(i, 77);
    }
    algo::CollArgs a;
    a.coll = Collective::Allreduce;
    a.count = count;
    a.dtype = dt;
    a.op = op;
    a.send = in.data();
    a.recv = inPlace ? in.data() : out.data();
    algo.run(ctx, a);
    const Buffer& res = inPlace ? in : out;
    std::size_t wrong = 0;
    std::string first;
    for (std::size_t i = 0; i < count; ++i) {
      if (res.get(i) == expected[i]) continue;
      if (wrong++ == 0)
        first = "[" + std::to_string(i) + "]=" + std::to_string(res.get(i)) + " want " +
                std::to_string(expected[i]);
    }
    if (wrong > 0)
      reports[static_cast<std::size_t>(ctx.rank)] =
          std::to_string(wrong) + " wrong elements, first " + first;
  });
  for (int r = 0; r < n; ++r) {
    if (errors[static_cast<std::size_t>(r)])
      ADD_FAILURE() << "rank " << r << " threw: " << errorText(errors[static_cast<std::size_t>(r)]);
    if (!reports[static_cast<std::size_t>(r)].empty())
      ADD_FAILURE() << "rank " << r << ": " << reports[static_cast<std::size_t>(r)];
  }
}

TEST(TopologyAlgorithms, HierarchicalAllreduceOnFabricatedHosts) {
  const algo::AlgoInfo* algo = algo::findAlgorithm(Collective::Allreduce, "hierarchical");
  ASSERT_NE(algo, nullptr);
  // Sums stay exact up to 8 ranks; larger layouts use Max.
  const Layout small[] = {{2, 2, false}, {2, 3, false}, {3, 2, true}, {2, 4, true},
                          {4, 2, false}, {3, 1, false}, {1, 4, false}};
  for (const Layout& l : small) {
    const auto topo = topology::uniformTopology(l.nodes, l.perNode, l.cyclic);
    for (std::size_t count : {0, 1, 7, 13, 257, 1031, 5003}) {
      for (auto [dt, op] : {std::pair{DataType::Float32, ReduceOp::Sum},
                            std::pair{DataType::Int32, ReduceOp::Max}}) {
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE(describe(l) + " count " + std::to_string(count) + " " + toString(dt) + " " +
                       toString(op) + (inPlace ? " in place" : ""));
          checkAllreduce(*algo, topo, count, dt, op, inPlace);
          if (HasFailure()) return;
        }
      }
    }
  }
  for (DataType dt : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
      SCOPED_TRACE(std::string("2x3 blocked, 257 ") + toString(dt) + " " + toString(op));
      checkAllreduce(*algo, topology::uniformTopology(2, 3), 257, dt, op, false);
      if (HasFailure()) return;
    }
  }
  const Layout large[] = {{4, 4, true}, {8, 8, false}};
  for (const Layout& l : large) {
    SCOPED_TRACE(describe(l));
    checkAllreduce(*algo, topology::uniformTopology(l.nodes, l.perNode, l.cyclic), 1031,
                   DataType::Int32, ReduceOp::Max, false);
  }
}

TEST(TopologyAlgorithms, HierarchicalFallsBackOnUnevenNodes) {
  // 3 ranks on one host, 1 on another: not uniform, so ring over all ranks.
  std::vector<topology::PeerInfo> peers(4);
  for (int r = 0; r < 4; ++r) {
    peers[static_cast<std::size_t>(r)].hostname = r < 3 ? "a" : "b";
    peers[static_cast<std::size_t>(r)].hostId = peers[static_cast<std::size_t>(r)].hostname;
  }
  const auto topo = topology::buildTopology(peers);
  checkAllreduce(*algo::findAlgorithm(Collective::Allreduce, "hierarchical"), topo, 1031,
                 DataType::Float32, ReduceOp::Sum, true);
}

}  // namespace
}  // namespace braid::test
