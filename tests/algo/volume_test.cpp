// Communication volume of every registered algorithm: ranks as threads over the inproc
// transport wrapped in the traffic-counting transport, on fabricated topologies of up to 64
// ranks (8 hosts x 8). Each rank's bytes sent must equal the algorithm's formula (documented in
// docs/algorithms.md), computed here from N, the rank and the sizes alone; the per-link-class
// split must add up, nothing may go to the rank itself, and what was sent must be received.
// An algorithm without a formula here fails the test: add its formula when adding it.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "algo/patterns/double_tree.hpp"
#include "algo/patterns/tree.hpp"
#include "rank_threads.hpp"
#include "tuning/rules.hpp"

namespace braid::test {
namespace {

using algo::AlgoInfo;
using algo::CollArgs;
using algo::Context;
using topology::LinkClass;
using topology::Topology;
using topology::Traffic;

struct Layout {
  int nodes;
  int perNode;
  bool cyclic;
};
constexpr Layout kLayouts[] = {{1, 1, false}, {2, 1, false}, {1, 3, false},
                               {2, 2, false}, {5, 1, false}, {7, 1, false},
                               {2, 4, false}, {4, 4, true},  {8, 8, false}};

// Element counts: 6720 = 2^6 x 3 x 5 x 7 splits evenly over every N used and every power of
// two up to 64, so the formulas are exact.
constexpr std::size_t kFull = 6720;  // allreduce, reduce, broadcast: elements of the buffer
constexpr std::size_t kBlock = 60;   // per-rank blocks of the other collectives
constexpr std::size_t kEs = 4;       // float32

std::size_t vCount(int j) {
  return 10 + static_cast<std::size_t>(j);
}
std::size_t pairCount(int from, int to) {
  return 5 + static_cast<std::size_t>((from + 2 * to) % 7);
}

int floorPow2(int n) {
  return static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
}
int log2Of(int p) {
  return std::countr_zero(static_cast<unsigned>(p));
}

/// What the formulas need besides the algorithm.
struct Shape {
  int n;
  int root;
  const Topology* topo;
};

/// The hierarchical allreduce runs its composed path (else ring over all ranks).
bool hierarchicalApplies(const Topology& t) {
  return t.numNodes() > 1 && t.uniform() && t.maxLocalSize() > 1;
}

/// The hierarchical algorithm of `coll` runs its composed path (else its flat fallback):
/// allgather and reduce_scatter need uniform nodes as the allreduce; broadcast and reduce any
/// multi-host layout with several ranks on some host.
bool hierarchicalRuns(Collective coll, const Topology& t) {
  if (coll == Collective::Broadcast || coll == Collective::Reduce)
    return t.numNodes() > 1 && t.maxLocalSize() > 1;
  return hierarchicalApplies(t);
}

/// Bytes a rank sends over shared memory and over the network.
struct ClassBytes {
  std::uint64_t shm = 0;
  std::uint64_t net = 0;
};

/// The composed hierarchical paths, per link class: M nodes, rank r = local rank l of node m
/// (L ranks), P = the fewest ranks on a node, slices of S cut in P (docs/algorithms.md).
ClassBytes hierarchicalClasses(Collective coll, const Shape& s, int r) {
  const Topology& t = *s.topo;
  const auto nodes = static_cast<std::uint64_t>(t.numNodes());
  const int m = t.nodeOf(r);
  const int l = t.localRank(r);
  const int localSize = t.localSize(r);
  const auto local = static_cast<std::uint64_t>(localSize);
  int p = localSize;
  for (const topology::Node& node : t.nodes()) p = std::min(p, static_cast<int>(node.ranks.size()));
  const std::uint64_t full = kFull * kEs;
  const std::uint64_t block = kBlock * kEs;
  // Slice j of the buffer: kFull / P elements (kFull splits evenly), none for j >= P.
  auto slice = [&](int j) { return j < p ? full / static_cast<std::uint64_t>(p) : 0; };
  const int rootNode = t.nodeOf(s.root);
  const int rootLocal = t.localRank(s.root);
  ClassBytes b;
  switch (coll) {
    case Collective::Allreduce:
      b.shm = full * 2 * (local - 1) / local;
      b.net = (full / local) * 2 * (nodes - 1) / nodes;
      break;
    case Collective::Allgather:
    case Collective::ReduceScatter:
      b.shm = nodes * (local - 1) * block;
      b.net = (nodes - 1) * block;
      break;
    case Collective::Broadcast: {
      if (r == s.root) b.shm += full - slice(rootLocal);
      if (localSize > 1) b.shm += full - slice((l + 1) % localSize);
      const auto children = static_cast<std::uint64_t>(
          algo::patterns::binomialTree(m, t.numNodes(), rootNode).numChildren);
      b.net = slice(l) * children;
      break;
    }
    case Collective::Reduce:
      if (localSize > 1) b.shm += full - slice(l);
      if (m == rootNode && l != rootLocal) b.shm += slice(l);
      if (m != rootNode) b.net = slice(l);
      break;
    default:
      break;
  }
  return b;
}

/// Network bytes host m sends in the composed hierarchical path, from M and S alone (what the
/// issue asks: independent of the ranks per host).
std::uint64_t hierarchicalHostNetwork(Collective coll, const Shape& s, int m) {
  const Topology& t = *s.topo;
  const auto nodes = static_cast<std::uint64_t>(t.numNodes());
  const std::uint64_t full = kFull * kEs;
  const std::uint64_t gathered = kBlock * kEs * static_cast<std::uint64_t>(s.n);
  const int rootNode = t.nodeOf(s.root);
  switch (coll) {
    case Collective::Allreduce:
      return full * 2 * (nodes - 1) / nodes;
    case Collective::Allgather:
    case Collective::ReduceScatter:
      return gathered * (nodes - 1) / nodes;
    case Collective::Broadcast:
      return full * static_cast<std::uint64_t>(
                        algo::patterns::binomialTree(m, t.numNodes(), rootNode).numChildren);
    case Collective::Reduce:
      return m == rootNode ? 0 : full;
    default:
      return 0;
  }
}

/// Bytes rank r sends, by the algorithm's formula; nullopt: no per-rank formula (the aggregate
/// check still applies).
using Formula = std::optional<std::uint64_t>;

std::string resolve(const AlgoInfo& a) {
  return a.name;
}

std::optional<Formula> perRank(Collective coll, const std::string& name, const Shape& s, int r) {
  const int n = s.n;
  const std::uint64_t full = kFull * kEs;
  const std::uint64_t block = kBlock * kEs;
  const int p = floorPow2(n);
  const int extra = n - p;
  const bool foldedEven = r < 2 * extra && r % 2 == 0;
  const bool foldedOdd = r < 2 * extra && r % 2 == 1;
  auto sum = [](auto f, int n) {
    std::uint64_t t = 0;
    for (int j = 0; j < n; ++j) t += f(j);
    return t;
  };
  if (name == "hierarchical" && coll != Collective::Allreduce) {
    const ClassBytes b = hierarchicalClasses(coll, s, r);
    return b.shm + b.net;
  }
  switch (coll) {
    case Collective::Allreduce:
      if (name == "ring") return full * 2 * static_cast<std::uint64_t>(n - 1) / n;
      if (name == "recursive_doubling") {
        if (foldedEven) return full;
        return full * static_cast<std::uint64_t>(log2Of(p)) + (foldedOdd ? full : 0);
      }
      if (name == "halving_doubling") {
        if (foldedEven) return full;
        return full * 2 * static_cast<std::uint64_t>(p - 1) / p + (foldedOdd ? full : 0);
      }
      if (name == "hierarchical") {
        const auto local = static_cast<std::uint64_t>(s.topo->maxLocalSize());
        const auto nodes = static_cast<std::uint64_t>(s.topo->numNodes());
        return full * 2 * (local - 1) / local + (full / local) * 2 * (nodes - 1) / nodes;
      }
      // Inputs' foreign segments to their owners, then a ring allgather of the segments.
      if (name == "rank_ordered") return full * 2 * static_cast<std::uint64_t>(n - 1) / n;
      if (name == "double_binary_tree") {
        // Per tree: half the buffer up to the parent, half down to each child.
        std::uint64_t t = 0;
        for (int w = 0; w < 2; ++w) {
          const auto links = algo::patterns::doubleBinaryTree(r, n, w);
          t += (full / 2) *
               static_cast<std::uint64_t>((links.parent >= 0 ? 1 : 0) + links.numChildren);
        }
        return t;
      }
      break;
    case Collective::Reduce:
      if (name == "binomial_tree" || name == "rank_ordered") return r == s.root ? 0 : full;
      break;
    case Collective::Broadcast:
      if (name == "binomial_tree")
        return full *
               static_cast<std::uint64_t>(algo::patterns::binomialTree(r, n, s.root).numChildren);
      break;
    case Collective::Allgather:
      if (name == "ring" || name == "bruck") return block * static_cast<std::uint64_t>(n - 1);
      break;
    case Collective::Allgatherv:
      // Ring forwards every block but the one of r+1, which r would send back to its owner.
      if (name == "ring")
        return kEs * (sum(vCount, n) - (n > 1 ? vCount((r + 1) % n) : sum(vCount, n)));
      break;
    case Collective::ReduceScatter:
      if (name == "ring" || name == "rank_ordered")
        return block * static_cast<std::uint64_t>(n - 1);
      if (name == "halving_doubling") {
        if (p == n) return block * static_cast<std::uint64_t>(n - 1);
        if (foldedEven) return block * static_cast<std::uint64_t>(n);
        return Formula{};  // the active ranks' share depends on the block layout: aggregate
      }
      break;
    case Collective::ReduceScatterv:
      if (name == "ring" || name == "rank_ordered")
        return kEs * (sum(vCount, n) - vCount(r)) * (n > 1 ? 1 : 0);
      break;
    case Collective::Gather:
      if (name == "linear") return r == s.root ? 0 : block;
      break;
    case Collective::Scatter:
      if (name == "linear") return r == s.root ? block * static_cast<std::uint64_t>(n - 1) : 0;
      break;
    case Collective::Alltoall:
      if (name == "pairwise") return block * static_cast<std::uint64_t>(n - 1);
      if (name == "bruck") {
        // Step k moves every slot i < N with bit k set.
        std::uint64_t blocks = 0;
        for (int k = 0; (1 << k) < n; ++k)
          for (int i = 0; i < n; ++i) blocks += (i >> k) & 1;
        return block * blocks;
      }
      break;
    case Collective::Alltoallv:
      if (name == "pairwise")
        return kEs * sum([&](int j) { return j == r ? 0 : pairCount(r, j); }, n);
      break;
    case Collective::Barrier:
      if (name == "dissemination") return 0;
      break;
    default:
      break;
  }
  return std::nullopt;
}

/// The total over all ranks, where it has a closed form of its own.
std::optional<std::uint64_t> aggregate(Collective coll, const std::string& name, int n) {
  const std::uint64_t full = kFull * kEs;
  const std::uint64_t block = kBlock * kEs;
  const auto un = static_cast<std::uint64_t>(n);
  const int p = floorPow2(n);
  const auto extra = static_cast<std::uint64_t>(n - p);
  if (coll == Collective::Allreduce && name == "double_binary_tree") return 2 * (un - 1) * full;
  if (coll == Collective::Allreduce && name == "ring") return 2 * (un - 1) * full;
  if (coll == Collective::Broadcast && name == "binomial_tree") return (un - 1) * full;
  if (coll == Collective::ReduceScatter && name == "halving_doubling")
    return (extra + static_cast<std::uint64_t>(p - 1)) * un * block + extra * block;
  if (coll == Collective::Allreduce && name == "halving_doubling")
    return 2 * extra * full + 2 * static_cast<std::uint64_t>(p - 1) * full;
  return std::nullopt;
}

Traffic runCounted(const AlgoInfo& a, const Topology& topo, int root, std::vector<Traffic>& out) {
  const int n = topo.size();
  RankSetup setup;
  setup.size = n;
  setup.chunkBytes = 64 * 1024;
  setup.scratchBytes = 1 << 20;
  setup.deadline = std::chrono::milliseconds(120000);
  setup.spin = std::chrono::microseconds(2);
  setup.topo = &topo;
  setup.traffic = &out;
  const auto un = static_cast<std::size_t>(n);
  auto errors = runRanks(setup, [&](Context& ctx) {
    const int r = ctx.rank;
    CollArgs args;
    args.coll = a.coll;
    args.dtype = DataType::Float32;
    args.op = ReduceOp::Sum;
    args.root = root;
    std::vector<float> in, res;
    std::vector<std::size_t> counts, recvCounts, displs, recvDispls;
    // Packed displacements, as the communicator passes them (algorithms may rely on them).
    auto packed = [](const std::vector<std::size_t>& c) {
      std::vector<std::size_t> d(c.size(), 0);
      for (std::size_t i = 1; i < c.size(); ++i) d[i] = d[i - 1] + c[i - 1];
      return d;
    };
    switch (a.coll) {
      case Collective::Allreduce:
      case Collective::Reduce:
      case Collective::Broadcast:
        args.count = kFull;
        in.assign(kFull, 1.0f);
        res.assign(kFull, 0.0f);
        break;
      case Collective::Allgather:
      case Collective::Gather:
        args.count = kBlock;
        in.assign(kBlock, 1.0f);
        res.assign(un * kBlock, 0.0f);
        break;
      case Collective::ReduceScatter:
      case Collective::Scatter:
        args.count = kBlock;
        in.assign(un * kBlock, 1.0f);
        res.assign(kBlock, 0.0f);
        break;
      case Collective::Alltoall:
        args.count = kBlock;
        in.assign(un * kBlock, 1.0f);
        res.assign(un * kBlock, 0.0f);
        break;
      case Collective::Allgatherv:
      case Collective::ReduceScatterv: {
        for (int j = 0; j < n; ++j) counts.push_back(vCount(j));
        const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
        const std::size_t mine = vCount(r);
        const bool gather = a.coll == Collective::Allgatherv;
        in.assign(gather ? mine : total, 1.0f);
        res.assign(gather ? total : mine, 0.0f);
        args.counts = counts;
        displs = packed(counts);
        args.displs = displs;
        break;
      }
      case Collective::Alltoallv: {
        for (int j = 0; j < n; ++j) {
          counts.push_back(pairCount(r, j));
          recvCounts.push_back(pairCount(j, r));
        }
        in.assign(std::accumulate(counts.begin(), counts.end(), std::size_t{0}), 1.0f);
        res.assign(std::accumulate(recvCounts.begin(), recvCounts.end(), std::size_t{0}), 0.0f);
        args.counts = counts;
        args.recvCounts = recvCounts;
        displs = packed(counts);
        recvDispls = packed(recvCounts);
        args.displs = displs;
        args.recvDispls = recvDispls;
        break;
      }
      default:
        break;
    }
    if (a.coll == Collective::Allreduce) in.assign(kFull, static_cast<float>(r + 1));
    args.send = in.empty() ? nullptr : in.data();
    args.recv = res.empty() ? nullptr : res.data();
    if (a.coll == Collective::Broadcast) args.send = args.recv = in.data();
    a.run(ctx, args);
    if (a.coll == Collective::Allreduce) {
      // The result as well: 1 + 2 + .. + N, exact in float32.
      const auto want = static_cast<float>(n * (n + 1) / 2);
      std::size_t wrong = 0;
      for (float v : res) wrong += v != want ? 1 : 0;
      if (wrong > 0) throw Error(ErrorCode::Internal, std::to_string(wrong) + " wrong elements");
    }
  });
  for (int r = 0; r < n; ++r)
    if (errors[static_cast<std::size_t>(r)])
      ADD_FAILURE() << "rank " << r << " threw: " << errorText(errors[static_cast<std::size_t>(r)]);
  Traffic sum;
  for (const Traffic& t : out)
    for (int c = 0; c < topology::kLinkClasses; ++c) {
      sum.bytesSent[c] += t.bytesSent[c];
      sum.bytesReceived[c] += t.bytesReceived[c];
      sum.messagesSent[c] += t.messagesSent[c];
    }
  return sum;
}

class Volume : public testing::TestWithParam<const AlgoInfo*> {};

/// Hosts of different sizes, given as the host of each rank: 3+1, 2+2+1, 3+2 (the root n/2
/// on a local rank beyond the smallest host), 2+3+3 interleaved.
const std::vector<std::vector<int>> kUneven = {
    {0, 0, 0, 1}, {0, 0, 1, 1, 2}, {0, 0, 0, 1, 1}, {0, 1, 2, 1, 2, 0, 1, 2}};

Topology unevenTopology(const std::vector<int>& hostOf) {
  std::vector<topology::PeerInfo> peers(hostOf.size());
  for (std::size_t r = 0; r < hostOf.size(); ++r) {
    peers[r].hostname = "host" + std::to_string(hostOf[r]);
    peers[r].hostId = peers[r].hostname;
  }
  return topology::buildTopology(std::move(peers));
}

std::vector<std::pair<Topology, std::string>> layouts() {
  std::vector<std::pair<Topology, std::string>> out;
  for (const Layout& l : kLayouts)
    out.emplace_back(topology::uniformTopology(l.nodes, l.perNode, l.cyclic),
                     std::to_string(l.nodes) + " nodes x " + std::to_string(l.perNode) +
                         (l.cyclic ? " cyclic" : " blocked"));
  for (const auto& hosts : kUneven) out.emplace_back(unevenTopology(hosts), "");
  for (auto& [topo, what] : out)
    if (what.empty()) what = topo.summary();
  return out;
}

TEST_P(Volume, MatchesFormula) {
  const AlgoInfo& a = *GetParam();
  const std::string name = resolve(a);
  int ran = 0;
  for (const auto& [topo, what] : layouts()) {
    const int n = topo.size();
    // Layouts where the row's constraints fail: selection never runs it there.
    if (algo::cannotRun(a, {n, 0, false, &topo, false}) != algo::Constraint::None) continue;
    ++ran;
    const Shape shape{n, n / 2, &topo};
    SCOPED_TRACE(what + " (" + name + ")");
    std::vector<Traffic> traffic;
    const Traffic sum = runCounted(a, topo, shape.root, traffic);
    if (HasFailure()) return;
    ASSERT_EQ(sum.sent(LinkClass::Self), 0u) << "messages to the rank itself";
    ASSERT_EQ(sum.totalSent(), sum.received(LinkClass::Shm) + sum.received(LinkClass::Network));
    ASSERT_EQ(sum.sent(LinkClass::Network), sum.received(LinkClass::Network));
    if (topo.numNodes() == 1) {
      ASSERT_EQ(sum.sent(LinkClass::Network), 0u);
    }
    if (topo.maxLocalSize() == 1) {
      ASSERT_EQ(sum.sent(LinkClass::Shm), 0u);
    }
    bool any = false;
    std::uint64_t expectedTotal = 0;
    bool allKnown = true;
    for (int r = 0; r < n; ++r) {
      const auto f = perRank(a.coll, name, shape, r);
      if (!f) {
        FAIL() << "no volume formula for " << toString(a.coll) << " " << a.name
               << ": add one to tests/algo/volume_test.cpp and docs/algorithms.md";
      }
      if (!f->has_value()) {
        allKnown = false;
        continue;
      }
      any = true;
      expectedTotal += **f;
      EXPECT_EQ(traffic[static_cast<std::size_t>(r)].totalSent(), **f) << "rank " << r;
    }
    if (allKnown) {
      EXPECT_EQ(sum.totalSent(), expectedTotal);
    }
    if (const auto agg = aggregate(a.coll, name, n)) {
      EXPECT_EQ(sum.totalSent(), *agg);
    } else {
      EXPECT_TRUE(any) << "neither a per-rank nor an aggregate formula checked";
    }
    if (a.coll == Collective::Barrier) {
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(traffic[static_cast<std::size_t>(r)].totalMessagesSent(),
                  static_cast<std::uint64_t>(algo::patterns::ceilLog2(n)));
      }
    }
    if (name == "hierarchical" && hierarchicalRuns(a.coll, topo)) {
      // Per rank: the shm and network bytes of the composed path; per host: the network bytes
      // of M hosts and S alone, whatever the ranks per host (allreduce 2(M-1)/M x S, allgather
      // and reduce_scatter (M-1)/M x S, broadcast S per child host, reduce S per non-root host).
      for (int m = 0; m < topo.numNodes(); ++m) {
        std::uint64_t net = 0;
        for (int r : topo.node(m).ranks) {
          const Traffic& t = traffic[static_cast<std::size_t>(r)];
          const ClassBytes want = hierarchicalClasses(a.coll, shape, r);
          net += t.sent(LinkClass::Network);
          EXPECT_EQ(t.sent(LinkClass::Shm), want.shm) << "rank " << r;
          EXPECT_EQ(t.sent(LinkClass::Network), want.net) << "rank " << r;
        }
        EXPECT_EQ(net, hierarchicalHostNetwork(a.coll, shape, m)) << "host " << m;
      }
    }
    // Ring algorithms talk to one neighbour: all bytes on the class of the link to r+1.
    if (name == "ring" && a.coll != Collective::Allgatherv &&
        a.coll != Collective::ReduceScatterv) {
      for (int r = 0; r < n && n > 1; ++r)
        EXPECT_EQ(traffic[static_cast<std::size_t>(r)].sent(topo.link(r, (r + 1) % n)),
                  traffic[static_cast<std::size_t>(r)].totalSent())
            << "rank " << r;
    }
  }
  EXPECT_GT(ran, 0) << "no layout where the row can run";
}

// The shared-memory rows send no messages and need a group the inproc transport has not.
std::vector<const AlgoInfo*> all() {
  std::vector<const AlgoInfo*> v;
  for (const AlgoInfo& a : algo::registry())
    if (!a.needs.sharedMemory) v.push_back(&a);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, Volume, testing::ValuesIn(all()),
                         [](const testing::TestParamInfo<const AlgoInfo*>& i) {
                           return std::string(toString(i.param->coll)) + "_" + i.param->name;
                         });

}  // namespace
}  // namespace braid::test
