// The alpha-beta-gamma cost model (src/tuning/cost_model.hpp): hand-computed predictions on
// small layouts, monotonicity in bytes, the expected winners (log-step algorithms for small
// messages at high latency, ring / hierarchical for large ones), its place in selectAlgorithm
// (rules, shared memory and deterministic mode first), the tuning-file format and the
// BRAID_TUNE / BRAID_TUNE_FILE variables and their errors.
#include "tuning/cost_model.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <braid/braid.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>

#include "algo/algorithm.hpp"

namespace braid::tuning {
namespace {

using topology::uniformTopology;

// Round numbers so the expectations below can be computed by hand.
CostParams handParams() {
  CostParams p;
  p.shm = {1e-6, 0.1e-9};  // 1 us, 10 GB/s
  p.net = {10e-6, 1e-9};   // 10 us, 1 GB/s
  p.gamma = 0.5e-9;        // 2 GB/s
  p.origin = "test";
  return p;
}

double predicted(const CostModel& m, Collective c, const char* algo, std::size_t bytes) {
  auto p = m.predict(c, algo, bytes);
  EXPECT_TRUE(p.has_value()) << toString(c) << " " << algo;
  return p ? p->seconds : -1;
}

TEST(CostModel, RingAllreduceTwoHostsByHand) {
  // 2 hosts x 2 ranks, blocked: ring 0->1 (shm) 1->2 (net) 2->3 (shm) 3->0 (net): every step
  // has a cross-host transfer, one per host. 3 reduce-scatter steps of S/4 (reduced), 3
  // allgather steps of S/4.
  const auto topo = uniformTopology(2, 2);
  const CostModel m(handParams(), topo, 4, 1 << 20);
  const double s = 1 << 20;
  const double q = s / 4;
  const double want = 3 * (10e-6 + q * 1e-9 + q * 0.5e-9) + 3 * (10e-6 + q * 1e-9);
  EXPECT_NEAR(predicted(m, Collective::Allreduce, "ring", 1 << 20), want, want * 1e-12);
}

TEST(CostModel, HierarchicalAllreduceTwoHostsByHand) {
  // L = 2, M = 2, slice S/2: reduce-scatter in the host (1 shm step of S/2, reduced), allreduce
  // of each slice across the hosts (one exchange of the whole slice per rank, reduced, both
  // local ranks at once: the host link carries 2 x S/2), allgather in the host (1 shm step of
  // S/2). Pieces of 1 MiB: one piece, so the phases add up.
  const auto topo = uniformTopology(2, 2);
  const CostModel m(handParams(), topo, 4, 1 << 20, 1 << 20);
  const double s = 1 << 20;
  const double half = s / 2;
  const double want = (1e-6 + half * 0.1e-9 + half * 0.5e-9) +
                      (10e-6 + 2 * half * 1e-9 + half * 0.5e-9) + (1e-6 + half * 0.1e-9);
  EXPECT_NEAR(predicted(m, Collective::Allreduce, "hierarchical", 1 << 20), want, want * 1e-12);
  // Cross-host bytes per host: hierarchical 2(M-1)/M x S = S, ring 2(N-1)/N x S = 1.5 S.
  EXPECT_LT(predicted(m, Collective::Allreduce, "hierarchical", 64 << 20),
            predicted(m, Collective::Allreduce, "ring", 64 << 20));
}

TEST(CostModel, DoubleBinaryTreeTwoHostsByHand) {
  // 2 hosts x 2 ranks: tree 0 is 0 <- 2 <- {1, 3}, tree 1 (mirrored) 3 <- 1 <- {2, 0}. Host 0
  // sends on 4 crossing edges (1 -> 2 and 1 -> 3 up, 0 -> 2 and 1 -> 2 down), each carrying
  // its tree's half once. Depth D = 2; chunk c.
  const auto topo = uniformTopology(2, 2);
  const double c = 256 << 10;
  const CostModel m(handParams(), topo, 4, 256 << 10);
  {
    // S = 256 KiB: one chunk per half (128 KiB), D stages; the link's total 4 x S/2 equals the
    // chunk's path of 2D hops, so either bounds it.
    const double s = 256 << 10, half = s / 2;
    const double want = 2 * (2 * 10e-6 + 2 * half * 0.5e-9) + 4 * half * 1e-9;
    EXPECT_NEAR(predicted(m, Collective::Allreduce, "double_binary_tree", 256 << 10), want,
                want * 1e-12);
  }
  {
    // S = 4 MiB: 8 chunks per half, D + 7 stages; the link's total 4 x S/2 (8 MiB) exceeds
    // the path (2D + 7 chunks).
    const double s = 4 << 20, half = s / 2;
    const double want = 9 * (2 * 10e-6 + 2 * c * 0.5e-9) + 4 * half * 1e-9;
    EXPECT_NEAR(predicted(m, Collective::Allreduce, "double_binary_tree", 4 << 20), want,
                want * 1e-12);
  }
  {
    // One host: an interior rank moves two chunks up and two down per stage, 4c beta_shm.
    const auto one = uniformTopology(1, 4);
    const CostModel h(handParams(), one, 4, 256 << 10);
    const double want = 9 * (2 * 1e-6 + 2 * c * 0.5e-9 + 4 * c * 0.1e-9);
    EXPECT_NEAR(predicted(h, Collective::Allreduce, "double_binary_tree", 4 << 20), want,
                want * 1e-12);
  }
}

TEST(CostModel, HierarchicalAllreduceThreeHostsRunsTheRingAcrossByHand) {
  // L = 2, M = 3, slice S/2: across the hosts the ring's 2 reduce-scatter steps (S/6, reduced)
  // and 2 allgather steps (S/6), both local ranks at once: the host link carries 2 x S/6.
  const auto topo = uniformTopology(3, 2);
  const CostModel m(handParams(), topo, 6, 1 << 20, 4 << 20);  // one piece
  const double s = 3 << 20;
  const double half = s / 2;
  const double seg = half / 3;
  const double want = (1e-6 + half * 0.1e-9 + half * 0.5e-9) +
                      2 * (10e-6 + 2 * seg * 1e-9 + seg * 0.5e-9) + 2 * (10e-6 + 2 * seg * 1e-9) +
                      (1e-6 + half * 0.1e-9);
  EXPECT_NEAR(predicted(m, Collective::Allreduce, "hierarchical", 3 << 20), want, want * 1e-12);
}

TEST(CostModel, HierarchicalAllreducePipelinedByHand) {
  // 4 MiB in pieces of 1 MiB: 4 pieces, each costing the longer of its network phase and its
  // in-node phases (here the network), plus one piece's in-node phases.
  const auto topo = uniformTopology(2, 2);
  const CostModel m(handParams(), topo, 4, 1 << 20, 1 << 20);
  const double p = 1 << 20;
  const double half = p / 2;
  const double rs = 1e-6 + half * 0.1e-9 + half * 0.5e-9;
  const double ag = 1e-6 + half * 0.1e-9;
  const double net = 10e-6 + 2 * half * 1e-9 + half * 0.5e-9;  // one exchange of the slice
  ASSERT_GT(net, rs + ag);
  const double want = rs + ag + 4 * net;
  EXPECT_NEAR(predicted(m, Collective::Allreduce, "hierarchical", 4 << 20), want, want * 1e-12);
  // 64 KiB pieces: 64 of them for 4 MiB.
  const CostModel small(handParams(), topo, 4, 1 << 20, 64 << 10);
  const double ps = 64 << 10;
  const double rs2 = 1e-6 + ps / 2 * 0.1e-9 + ps / 2 * 0.5e-9;
  const double ag2 = 1e-6 + ps / 2 * 0.1e-9;
  const double net2 = 10e-6 + 2 * (ps / 2) * 1e-9 + (ps / 2) * 0.5e-9;
  const double want2 = rs2 + ag2 + 64 * std::max(net2, rs2 + ag2);
  EXPECT_NEAR(predicted(small, Collective::Allreduce, "hierarchical", 4 << 20), want2,
              want2 * 1e-12);
  // Pipelining only hides in-node time: never below the network's share of the unpipelined sum.
  EXPECT_GE(predicted(m, Collective::Allreduce, "hierarchical", 4 << 20), 4 * net);
}

TEST(CostModel, HierarchicalPieceIsTheFastestCandidateByHand) {
  // Auto piece (0): the candidates are 64 KiB, 128 KiB, ... up to the cap, and the cap. 2 x 2
  // with the hand parameters, S = 64 MiB in pieces of p (slice p/2): the network phase is the
  // longer, so T(p) = rs(p) + ag(p) + (S / p) x net(p), whose minimum balances the pipeline's
  // fill (0.35 ns per byte of a piece) against one network latency per piece (10 us):
  // p* = sqrt(S x 10 us / 0.35 ns) = 1.39 MB, between the candidates 1 MiB and 2 MiB.
  const auto topo = uniformTopology(2, 2);
  auto byHand = [&](const CostParams& cp, double p, double total = 64 << 20) {
    const double slice = std::min(p, total) / 2;
    const double rs = cp.shm.alpha + slice * cp.shm.beta + slice * cp.gamma;
    const double ag = cp.shm.alpha + slice * cp.shm.beta;
    const double net = cp.net.alpha + 2 * slice * cp.net.beta + slice * cp.gamma;
    const double pieces = std::ceil(total / p);
    return pieces == 1 ? rs + net + ag : rs + ag + pieces * std::max(net, rs + ag);
  };
  auto bestByHand = [&](const CostParams& cp, std::size_t cap) {
    std::size_t best = 0;
    double bestTime = 0;
    for (std::size_t p = 64 << 10;; p = std::min(2 * p, cap)) {
      const double t = byHand(cp, static_cast<double>(p));
      if (best == 0 || t < bestTime) {
        best = p;
        bestTime = t;
      }
      if (p >= cap) break;
    }
    return best;
  };
  const CostModel m(handParams(), topo, 4, 1 << 20, 0, 4 << 20);
  EXPECT_EQ(m.maxPieceBytes(), std::size_t{4} << 20);  // half of 4 MiB x 2 ranks per host
  EXPECT_EQ(bestByHand(handParams(), 4 << 20), std::size_t{1} << 20);
  EXPECT_EQ(m.hierPieceBytes(64 << 20), std::size_t{1} << 20);
  // The prediction is the chosen piece's, and the log names it.
  const auto p = m.predict(Collective::Allreduce, "hierarchical", 64 << 20);
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->seconds, byHand(handParams(), 1 << 20), 1e-15);
  EXPECT_NE(p->steps.find("64 overlapped pieces of 1 MiB"), std::string::npos) << p->steps;
  // A size is decided at its class's upper end: 40 MiB as 64 MiB.
  EXPECT_EQ(m.hierPieceBytes(40 << 20), std::size_t{1} << 20);
  // A millisecond per network step: pieces as large as the scratch allows.
  CostParams slow = handParams();
  slow.net.alpha = 1e-3;
  const CostModel far(slow, topo, 4, 1 << 20, 0, 4 << 20);
  EXPECT_EQ(bestByHand(slow, 4 << 20), std::size_t{4} << 20);
  EXPECT_EQ(far.hierPieceBytes(64 << 20), std::size_t{4} << 20);
  // A 64 KiB scratch caps every piece at 32 KiB x 2 ranks per host.
  const CostModel tight(slow, topo, 4, 1 << 20, 0, 64 << 10);
  EXPECT_EQ(tight.maxPieceBytes(), std::size_t{64} << 10);
  EXPECT_EQ(tight.hierPieceBytes(64 << 20), std::size_t{64} << 10);
  // Small messages: one piece, whatever the candidates.
  EXPECT_NEAR(predicted(m, Collective::Allreduce, "hierarchical", 1 << 10),
              byHand(handParams(), 64 << 10, 1 << 10), 1e-15);
  // A fixed piece (BRAID_HIER_PIECE_SIZE) is used as given, below the cap.
  const CostModel fixed(handParams(), topo, 4, 1 << 20, 256 << 10, 4 << 20);
  EXPECT_EQ(fixed.hierPieceBytes(64 << 20), std::size_t{256} << 10);
  const CostModel over(handParams(), topo, 4, 1 << 20, 16 << 20, 4 << 20);
  EXPECT_EQ(over.hierPieceBytes(64 << 20), std::size_t{4} << 20);
}

TEST(CostModel, RecursiveDoublingAndBruckByHand) {
  // 4 hosts x 1 rank: every step crosses, one rank per host.
  const auto topo = uniformTopology(4, 1);
  const CostModel m(handParams(), topo, 4, 1 << 20);
  // Recursive doubling: 2 rounds of the full 8 bytes, each reduced.
  EXPECT_NEAR(predicted(m, Collective::Allreduce, "recursive_doubling", 8),
              2 * (10e-6 + 8 * 1e-9 + 8 * 0.5e-9), 1e-15);
  // Bruck allgather of 4 x 8 bytes: 1 block, then 2 blocks, then the 32-byte rotation.
  EXPECT_NEAR(predicted(m, Collective::Allgather, "bruck", 32),
              (10e-6 + 8 * 1e-9) + (10e-6 + 16 * 1e-9) + 32 * 0.1e-9, 1e-15);
  EXPECT_NEAR(predicted(m, Collective::Allgather, "ring", 32), 3 * (10e-6 + 8 * 1e-9), 1e-15);
  // Ring reduce_scatter of 4 x 8 bytes: 3 steps of one block, reduced.
  EXPECT_NEAR(predicted(m, Collective::ReduceScatter, "ring", 32),
              3 * (10e-6 + 8 * 1e-9 + 8 * 0.5e-9), 1e-15);
}

TEST(CostModel, PairwiseAndHierarchicalPhasesByHand) {
  // 2 hosts x 2 ranks, blocked, blocks of b = 1000 bytes (S = 4000).
  const auto topo = uniformTopology(2, 2);
  const CostModel m(handParams(), topo, 4, 1 << 20);
  const double b = 1000;
  // Pairwise step s sends to r+s: s = 1 and 3 cross once per host, s = 2 twice.
  EXPECT_NEAR(predicted(m, Collective::Alltoall, "pairwise", 4000),
              (10e-6 + b * 1e-9) + (10e-6 + 2 * b * 1e-9) + (10e-6 + b * 1e-9), 1e-15);
  // Hierarchical allgather: across hosts among equal local ranks (both local ranks share the
  // host link), then inside the host with M = 2 blocks each.
  EXPECT_NEAR(predicted(m, Collective::Allgather, "hierarchical", 4000),
              (10e-6 + 2 * b * 1e-9) + (1e-6 + 2 * b * 0.1e-9), 1e-15);
  // Hierarchical reduce_scatter: inside the host (S/2, reduced), then across hosts.
  EXPECT_NEAR(predicted(m, Collective::ReduceScatter, "hierarchical", 4000),
              (1e-6 + 2 * b * 0.1e-9 + 2 * b * 0.5e-9) + (10e-6 + 2 * b * 1e-9 + b * 0.5e-9),
              1e-15);
  // Hierarchical broadcast of 4000 B, 2 slices of 2000 B (one chunk each): the root sends one
  // slice to its host's other rank (shm), 2 one-level binomial trees cross the network at once
  // (the host link carries both: 2 x 2000 B), one shm ring step of 2000 B inside each host.
  EXPECT_NEAR(predicted(m, Collective::Broadcast, "hierarchical", 4000),
              (1e-6 + 2000 * 0.1e-9) + (10e-6 + 2 * 2000 * 1e-9) + (1e-6 + 2000 * 0.1e-9), 1e-15);
  // Reduce: the same phases, the network and the ring steps reduce their bytes (0.5e-9 s/B).
  EXPECT_NEAR(predicted(m, Collective::Reduce, "hierarchical", 4000),
              (1e-6 + 2000 * 0.1e-9) + (10e-6 + 2000 * (2 * 1e-9 + 0.5e-9)) +
                  (1e-6 + 2000 * 0.1e-9 + 2000 * 0.5e-9),
              1e-15);
  // Binomial broadcast from rank 0: children 1 (shm) and 2 (net), one chunk, 2 levels.
  EXPECT_NEAR(predicted(m, Collective::Broadcast, "binomial_tree", 4000),
              2 * 10e-6 + 4000 * 0.1e-9 + 4000 * 1e-9, 1e-15);
  // Reduce adds the reduction of each child's chunk.
  EXPECT_NEAR(predicted(m, Collective::Reduce, "binomial_tree", 4000),
              2 * 10e-6 + 4000 * (0.1e-9 + 0.5e-9) + 4000 * (1e-9 + 0.5e-9), 1e-15);
}

TEST(CostModel, OneRankCostsNothingAndUnknownAlgorithmsHaveNoFormula) {
  const auto topo = uniformTopology(1, 1);
  const CostModel m(handParams(), topo, 1, 1 << 20);
  EXPECT_EQ(predicted(m, Collective::Allreduce, "ring", 1 << 20), 0.0);
  EXPECT_FALSE(m.predict(Collective::Allreduce, "shm_direct", 8).has_value());
  EXPECT_FALSE(m.predict(Collective::Gather, "linear", 8).has_value());
  EXPECT_TRUE(m.candidates(Collective::Gather, 8).empty());
}

struct Layout {
  int nodes, perNode;
  bool cyclic;
};
constexpr Layout kLayouts[] = {{1, 4, false}, {2, 2, false}, {2, 4, false},
                               {4, 1, false}, {3, 2, true},  {5, 1, false},
                               {8, 8, false}, {7, 3, false}, {64, 8, false}};
constexpr Collective kModelled[] = {Collective::Allreduce,     Collective::Allgather,
                                    Collective::ReduceScatter, Collective::Broadcast,
                                    Collective::Reduce,        Collective::Alltoall};

TEST(CostModel, PredictionsGrowWithBytes) {
  for (const Layout& l : kLayouts) {
    const auto topo = uniformTopology(l.nodes, l.perNode, l.cyclic);
    for (std::size_t chunk : {std::size_t{4096}, std::size_t{1} << 20}) {
      const CostModel m(CostParams{}, topo, topo.size(), chunk);
      for (Collective c : kModelled) {
        for (const auto& a : algo::registry()) {
          if (a.coll != c || !m.predict(c, a.name, 8)) continue;
          double last = -1;
          for (std::size_t bytes = 0; bytes <= (std::size_t{1} << 32);
               bytes = bytes == 0 ? 1 : bytes * 3) {
            const double t = m.predict(c, a.name, bytes)->seconds;
            EXPECT_GE(t, last) << toString(c) << " " << a.name << " " << bytes << " bytes on "
                               << l.nodes << "x" << l.perNode;
            EXPECT_TRUE(std::isfinite(t));
            last = t;
          }
        }
      }
    }
  }
}

TEST(CostModel, LogStepAlgorithmsWinSmallMessagesAtHighLatency) {
  CostParams p;
  p.net = {1e-3, 1.0 / 125e6};  // 1 ms added delay, 1 Gbit/s
  p.origin = "test";
  for (const Layout& l : {Layout{4, 1, false}, Layout{8, 1, false}, Layout{4, 2, false}}) {
    const auto topo = uniformTopology(l.nodes, l.perNode);
    const CostModel m(p, topo, topo.size(), 256 << 10);
    SCOPED_TRACE(std::to_string(l.nodes) + "x" + std::to_string(l.perNode));
    const std::set<std::string> logStep = {"recursive_doubling", "halving_doubling",
                                           "double_binary_tree"};
    EXPECT_TRUE(logStep.count(*m.choose(Collective::Allreduce, 8)))
        << *m.choose(Collective::Allreduce, 8);
    EXPECT_LT(predicted(m, Collective::Allreduce, "recursive_doubling", 8),
              predicted(m, Collective::Allreduce, "ring", 8));
    EXPECT_EQ(*m.choose(Collective::Allgather, 8 * topo.size()), "bruck");
    EXPECT_EQ(*m.choose(Collective::Alltoall, 8 * topo.size()), "bruck");
  }
}

TEST(CostModel, RingAndHierarchicalWinLargeMessages) {
  CostParams p;
  p.net = {50e-6, 1.0 / 125e6};  // 1 Gbit/s
  p.origin = "test";
  const std::size_t big = 64 << 20;
  {
    // Several ranks per host: the hierarchical algorithm moves the fewest bytes across hosts.
    for (const Layout& l : {Layout{2, 2, false}, Layout{4, 8, false}, Layout{3, 2, true}}) {
      const auto topo = uniformTopology(l.nodes, l.perNode, l.cyclic);
      const CostModel m(p, topo, topo.size(), 256 << 10);
      EXPECT_EQ(*m.choose(Collective::Allreduce, big), "hierarchical")
          << l.nodes << "x" << l.perNode;
    }
  }
  {
    // One rank per host, not a power of two: folding costs two extra full-buffer steps, trees
    // move ~2 x S per rank: ring.
    const auto topo = uniformTopology(5, 1);
    const CostModel m(p, topo, 5, 256 << 10);
    EXPECT_EQ(*m.choose(Collective::Allreduce, big), "ring");
    EXPECT_EQ(*m.choose(Collective::Allgather, big), "ring");
    EXPECT_EQ(*m.choose(Collective::ReduceScatter, big), "ring");
  }
  {
    // A power of two: halving-doubling sends ring's bytes in fewer steps, so it ties or wins;
    // recursive doubling (log2 N full buffers) and the tree (~2 x S) do not.
    const auto topo = uniformTopology(4, 1);
    const CostModel m(p, topo, 4, 256 << 10);
    const std::string c = *m.choose(Collective::Allreduce, big);
    EXPECT_TRUE(c == "ring" || c == "halving_doubling" || c == "hierarchical") << c;
    EXPECT_GT(predicted(m, Collective::Allreduce, "recursive_doubling", big),
              predicted(m, Collective::Allreduce, "ring", big));
    EXPECT_GT(predicted(m, Collective::Allreduce, "double_binary_tree", big),
              predicted(m, Collective::Allreduce, "ring", big));
  }
}

TEST(CostModel, SizeClasses) {
  EXPECT_EQ(CostModel::sizeClass(0), 0);
  EXPECT_EQ(CostModel::sizeClass(1), 0);
  EXPECT_EQ(CostModel::sizeClass(2), 1);
  EXPECT_EQ(CostModel::sizeClass(3), 2);
  EXPECT_EQ(CostModel::sizeClass(4), 2);
  EXPECT_EQ(CostModel::sizeClass(5), 3);
  EXPECT_EQ(CostModel::sizeClass(1 << 20), 20);
  EXPECT_EQ(CostModel::sizeClass((1 << 20) + 1), 21);
  EXPECT_EQ(CostModel::classBytes(20), std::size_t{1} << 20);
  const auto topo = uniformTopology(2, 2);
  const CostModel m(CostParams{}, topo, 4, 1 << 18);
  EXPECT_TRUE(m.firstUse(Collective::Allreduce, 1000));
  EXPECT_FALSE(m.firstUse(Collective::Allreduce, 1024));  // same class (513 .. 1024)
  EXPECT_TRUE(m.firstUse(Collective::Allreduce, 1025));
  EXPECT_TRUE(m.firstUse(Collective::Allgather, 1000));
}

TEST(CostModel, SelectionOrder) {
  const auto two = uniformTopology(2, 2);
  const CostModel multi(CostParams{}, two, 4, 1 << 18);
  const auto one = uniformTopology(1, 4);
  const CostModel single(CostParams{}, one, 4, 1 << 18);
  EXPECT_TRUE(multi.decides());
  EXPECT_FALSE(single.decides());  // one host, default parameters: the fixed policy
  auto in = [&](Collective c, std::size_t bytes, const CostModel& m) {
    SelectionInputs s{c, bytes, m.worldSize(), 64 * 1024};
    s.model = &m;
    s.topo = &m == &multi ? &two : &one;
    return s;
  };
  // One host: exactly the fixed policy.
  EXPECT_EQ(selectAlgorithm({}, in(Collective::Allreduce, 8, single)), "recursive_doubling");
  EXPECT_EQ(selectAlgorithm({}, in(Collective::Allreduce, 1 << 20, single)), "ring");
  // Several hosts: the model's choice, for every size.
  for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}, std::size_t{64} << 20}) {
    EXPECT_EQ(selectAlgorithm({}, in(Collective::Allreduce, bytes, multi)),
              *multi.choose(Collective::Allreduce, bytes));
  }
  EXPECT_EQ(selectAlgorithm({}, in(Collective::Allreduce, 64 << 20, multi)), "hierarchical");
  // Rules first.
  EXPECT_EQ(selectAlgorithm(parseRules("allreduce:ring", "t"),
                            in(Collective::Allreduce, 64 << 20, multi)),
            "ring");
  // Shared memory first (one host with shm: the model never sees it).
  auto shm = in(Collective::Allreduce, 8, multi);
  shm.sharedMemory = true;
  EXPECT_EQ(selectAlgorithm({}, shm), "shm_ll");
  // Deterministic mode first.
  auto det = in(Collective::Allreduce, 64 << 20, multi);
  det.deterministic = true;
  EXPECT_EQ(selectAlgorithm({}, det), "rank_ordered");
  // Collectives without a choice keep the fixed policy.
  EXPECT_EQ(selectAlgorithm({}, in(Collective::Gather, 8, multi)), "linear");
  EXPECT_EQ(selectAlgorithm({}, in(Collective::Barrier, 0, multi)), "dissemination");
  // Tuned parameters make the model decide on one host too.
  CostParams tuned;
  tuned.origin = "calibrated";
  const CostModel tunedSingle(tuned, one, 4, 1 << 18);
  EXPECT_TRUE(tunedSingle.decides());
  EXPECT_EQ(selectAlgorithm({}, in(Collective::Allreduce, 1 << 20, tunedSingle)),
            *tunedSingle.choose(Collective::Allreduce, 1 << 20));
}

TEST(CostModel, ExplanationListsEveryCandidateAndTheChoice) {
  const auto topo = uniformTopology(2, 2);
  const CostModel m(CostParams{}, topo, 4, 1 << 18);
  SelectionInputs s{Collective::Allreduce, 1000, 4, 64 * 1024};
  s.model = &m;
  s.topo = &topo;
  const std::string chosen = selectAlgorithm({}, s);
  const auto lines = explainSelection({}, s, chosen);
  ASSERT_GE(lines.size(), 6u);
  EXPECT_NE(lines[0].find("allreduce 1000 B (size class 512 B < size <= 1 KiB)"), std::string::npos)
      << lines[0];
  int candidates = 0;
  int marked = 0;
  for (const auto& l : lines) {
    candidates += l.find("candidate ") != std::string::npos ? 1 : 0;
    marked += l.find("<- chosen") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(candidates, 5);  // ring, recursive_doubling, halving_doubling, dbt, hierarchical
  EXPECT_EQ(marked, 1);
  EXPECT_NE(lines.back().find("chosen " + chosen + ": cost model"), std::string::npos)
      << lines.back();
  const auto ruled = explainSelection(parseRules("allreduce:ring", "t"), s, "ring");
  EXPECT_NE(ruled.back().find("rule"), std::string::npos) << ruled.back();
}

TEST(CostParams, FormatParsesBackExactly) {
  CostParams p;
  p.shm = {1.2345e-6, 1.0 / 7.77e9};
  p.net = {33.3e-6, 1.0 / 0.9e9};
  p.gamma = 1.0 / 3.21e9;
  p.origin = "calibrated";
  const std::string text = p.format();
  const CostParams q = parseCostParams(text, "text");
  // Every rank parses rank 0's text: the same text gives bitwise the same parameters, close
  // to what the text was made from.
  EXPECT_EQ(q, parseCostParams(text, "text"));
  EXPECT_NEAR(q.shm.alpha / p.shm.alpha, 1.0, 1e-5);
  EXPECT_NEAR(q.shm.beta / p.shm.beta, 1.0, 1e-5);
  EXPECT_NEAR(q.net.alpha / p.net.alpha, 1.0, 1e-5);
  EXPECT_NEAR(q.net.beta / p.net.beta, 1.0, 1e-5);
  EXPECT_NEAR(q.gamma / p.gamma, 1.0, 1e-5);
  EXPECT_NE(text.find("net.latency_us = 33.3\n"), std::string::npos) << text;
}

TEST(CostParams, FileKeysRulesAndErrors) {
  std::vector<Rule> rules;
  const CostParams p = parseCostParams(
      "# measured on the lab cluster\n"
      "net.latency_us = 50   # one switch\n"
      "net.bandwidth_GBps = 0.125\n"
      "\n"
      "algo = allreduce:0-4K:recursive_doubling\n"
      "algo = allgather:ring\n",
      "lab.tune", &rules);
  EXPECT_DOUBLE_EQ(p.net.alpha, 50e-6);
  EXPECT_DOUBLE_EQ(p.net.beta, 1.0 / 0.125e9);
  EXPECT_EQ(p.shm.alpha, CostParams{}.shm.alpha);  // not given: default
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].algorithm, "recursive_doubling");
  EXPECT_EQ(rules[0].maxBytes, 4096u);
  auto fails = [](const char* text, const char* want) {
    try {
      parseCostParams(text, "f.tune");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  fails("net.latency_us = 1\nnet.bandwidth_GBps = -3\n", "f.tune:2: 'net.bandwidth_GBps = -3'");
  fails("net.latency = 5\n", "unknown key 'net.latency'");
  fails("shm.latency_us = fast\n", "f.tune:1");
  fails("just words\n", "is not 'key = value'");
  fails("algo = allreduce:nonesuch\n", "f.tune:1: rule 'allreduce:nonesuch'");
  try {
    loadCostParams("/nonexistent/braid.tune", "BRAID_TUNE_FILE");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_TUNE_FILE='/nonexistent/braid.tune'"),
              std::string::npos)
        << e.what();
  }
}

TEST(CostParams, BandwidthAndLatencyUnits) {
  EXPECT_DOUBLE_EQ(*parseBandwidth("1.25"), 1.25e9);
  EXPECT_DOUBLE_EQ(*parseBandwidth("10Gbit"), 1.25e9);
  EXPECT_DOUBLE_EQ(*parseBandwidth("100mbit"), 12.5e6);
  EXPECT_DOUBLE_EQ(*parseBandwidth("2GB/s"), 2e9);
  EXPECT_FALSE(parseBandwidth("0").has_value());
  EXPECT_FALSE(parseBandwidth("fast").has_value());
  EXPECT_DOUBLE_EQ(*parseLatency("25"), 25e-6);
  EXPECT_DOUBLE_EQ(*parseLatency("1ms"), 1e-3);
  EXPECT_DOUBLE_EQ(*parseLatency("500ns"), 500e-9);
  EXPECT_FALSE(parseLatency("-1").has_value());
}

class TuneEnv : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    unsetenv("BRAID_TUNE");
    unsetenv("BRAID_TUNE_FILE");
  }
};

TEST_F(TuneEnv, VariablesParseAndErrorsNameThem) {
  EXPECT_FALSE(Options::fromEnv().tune);
  EXPECT_TRUE(Options::fromEnv().tuneFile.empty());
  setenv("BRAID_TUNE", "1", 1);
  setenv("BRAID_TUNE_FILE", "/tmp/x.tune", 1);
  EXPECT_TRUE(Options::fromEnv().tune);
  EXPECT_EQ(Options::fromEnv().tuneFile, "/tmp/x.tune");
  setenv("BRAID_TUNE", "yes", 1);
  try {
    Options::fromEnv();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_TUNE='yes'"), std::string::npos) << e.what();
  }
  std::set<std::string> listed;
  for (const auto& v : environmentVariables()) listed.insert(v.name);
  EXPECT_TRUE(listed.count("BRAID_TUNE"));
  EXPECT_TRUE(listed.count("BRAID_TUNE_FILE"));
}

TEST_F(TuneEnv, BadTuningFileFailsCreationNamingVariableFileAndLine) {
  const std::string file = testing::TempDir() + "braid_bad_" + std::to_string(::getpid()) + ".tune";
  {
    std::ofstream out(file);
    out << "net.latency_us = 5\nnet.bandwidth_GBps = lots\n";
  }
  Options o;
  o.tuneFile = file;
  try {
    auto c = Comm::create(LaunchInfo{}, o);
    ADD_FAILURE() << "accepted a bad tuning file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("BRAID_TUNE_FILE=" + file + ":2"), std::string::npos)
        << e.what();
  }
  std::remove(file.c_str());
}

}  // namespace
}  // namespace braid::tuning
