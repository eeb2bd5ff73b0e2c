// The simulator (src/sim/): the simulated transport's contract and clocks on hand-made
// schedules, then every registered algorithm that can run on it, at 1,024 ranks and at 5, 7
// and 8, with the bytes and messages each rank sent checked against the formulas of
// docs/algorithms.md ("Messages and bytes per rank"), computed here from N, S and the chunk
// alone; the shared-memory algorithms must be refused; the simulated ring allreduce time must
// agree with the cost model's formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "algo/patterns/double_tree.hpp"
#include "algo/patterns/tree.hpp"
#include "algo/subgroup.hpp"
#include "sim/simulate.hpp"
#include "tuning/cost_model.hpp"

namespace braid::test {
namespace {

using algo::AlgoInfo;
using sim::Engine;
using sim::EngineOptions;
using topology::Topology;
using transport::Request;

constexpr std::uint64_t kTag = 77;

tuning::CostParams handParams() {
  tuning::CostParams p;
  p.shm = {1e-6, 1e-9};   // 1 us, 1 GB/s
  p.net = {10e-6, 1e-8};  // 10 us, 100 MB/s
  return p;
}

// ---- The transport's contract and clocks -------------------------------------------------

TEST(SimEngine, FifoPerPairCopiesPayloadsAndCountsMessages) {
  const Topology topo = topology::uniformTopology(1, 2);
  EngineOptions o;
  o.copyPayloads = true;
  Engine e(topo, o);
  std::vector<std::vector<int>> got(3);
  e.run([&](int r, transport::Transport& tr) {
    std::vector<std::vector<int>> msgs = {{1, 2, 3}, {4}, {}, {5, 6}};
    if (r == 0) {
      std::vector<Request> reqs(msgs.size());
      for (std::size_t i = 0; i < msgs.size(); ++i)
        tr.postSend(1, msgs[i].data(), msgs[i].size() * sizeof(int), kTag, reqs[i]);
      for (auto& q : reqs) tr.wait(q, {});
    } else {
      // Posted after the sends and before them: both orders match in FIFO order.
      for (std::size_t i = 0; i < msgs.size(); ++i) {
        std::vector<int> buf(msgs[i].size(), -1);
        Request q;
        tr.postRecv(0, buf.data(), buf.size() * sizeof(int), kTag, q);
        tr.wait(q, {});
        EXPECT_EQ(buf, msgs[i]) << "message " << i;
      }
    }
  });
  EXPECT_EQ(e.traffic(0).totalMessages(), 4u);
  EXPECT_EQ(e.traffic(0).totalSent(), 6 * sizeof(int));
  EXPECT_EQ(e.traffic(1).messagesReceived, 4u);
  EXPECT_EQ(e.traffic(0).bytesSent[static_cast<int>(topology::LinkClass::Shm)], 6 * sizeof(int));
}

TEST(SimEngine, ClocksAreAlphaBetaWithSerializedLinks) {
  // Hosts of one rank: rank 0 sends m bytes to ranks 1 and 2 back to back (its host's egress
  // serializes them), ranks 3 and 4 both send m bytes to rank 5 (its ingress serializes them).
  const Topology topo = topology::uniformTopology(6, 1);
  EngineOptions o;
  o.cost = handParams();
  Engine e(topo, o);
  constexpr std::size_t m = 1000;
  std::vector<std::uint8_t> buf(m);
  e.run([&](int r, transport::Transport& tr) {
    Request a, b;
    if (r == 0) {
      tr.postSend(1, buf.data(), m, kTag, a);
      tr.postSend(2, buf.data(), m, kTag, b);
      tr.wait(a, {});
      tr.wait(b, {});
    } else if (r == 1 || r == 2) {
      tr.postRecv(0, buf.data(), m, kTag, a);
      tr.wait(a, {});
    } else if (r == 3 || r == 4) {
      tr.postSend(5, buf.data(), m, kTag, a);
      tr.wait(a, {});
    } else {
      tr.postRecv(3, buf.data(), m, kTag, a);
      tr.postRecv(4, buf.data(), m, kTag, b);
      tr.wait(a, {});
      tr.wait(b, {});
    }
  });
  const double alpha = 10e-6, wire = m * 1e-8;
  EXPECT_DOUBLE_EQ(e.traffic(0).clock, 2 * wire);  // both sends left
  EXPECT_DOUBLE_EQ(e.traffic(1).clock, alpha + wire);
  EXPECT_DOUBLE_EQ(e.traffic(2).clock, alpha + 2 * wire);
  EXPECT_DOUBLE_EQ(e.traffic(5).clock, alpha + 2 * wire);
  EXPECT_DOUBLE_EQ(e.seconds(), alpha + 2 * wire);
  EXPECT_EQ(e.steps(), 1u);
}

TEST(SimEngine, StepsAreTheLongestChainAndShmUsesItsOwnCosts) {
  // A relay 0 -> 1 -> 2 -> 3 on one host: 3 steps, 3 x (alpha + m beta) of shared memory.
  const Topology topo = topology::uniformTopology(1, 4);
  EngineOptions o;
  o.cost = handParams();
  Engine e(topo, o);
  constexpr std::size_t m = 500;
  std::vector<std::uint8_t> buf(m);
  e.run([&](int r, transport::Transport& tr) {
    Request q;
    if (r > 0) {
      tr.postRecv(r - 1, buf.data(), m, kTag, q);
      tr.wait(q, {});
    }
    if (r < 3) {
      tr.postSend(r + 1, buf.data(), m, kTag, q);
      tr.wait(q, {});
    }
  });
  EXPECT_EQ(e.steps(), 3u);
  EXPECT_EQ(e.traffic(3).depth, 3u);
  EXPECT_NEAR(e.seconds(), 3 * (1e-6 + m * 1e-9), 1e-15);
}

TEST(SimEngine, MismatchAndDeadlockAreErrorsNotHangs) {
  const Topology topo = topology::uniformTopology(2, 1);
  {
    Engine e(topo, {});
    std::uint8_t buf[16];
    try {
      e.run([&](int r, transport::Transport& tr) {
        Request q;
        if (r == 0)
          tr.postSend(1, buf, 8, kTag, q);
        else
          tr.postRecv(0, buf, 16, kTag, q);
        tr.wait(q, {});
      });
      FAIL() << "no error";
    } catch (const Error& x) {
      EXPECT_EQ(x.code(), ErrorCode::Mismatch) << x.what();
      EXPECT_NE(std::string(x.what()).find("expected 16 bytes"), std::string::npos) << x.what();
    }
  }
  {
    Engine e(topo, {});
    std::uint8_t buf[8];
    try {
      // Both ranks receive first: nobody can run.
      e.run([&](int r, transport::Transport& tr) {
        Request q;
        tr.postRecv(1 - r, buf, 8, kTag, q);
        tr.wait(q, {});
      });
      FAIL() << "no error";
    } catch (const Error& x) {
      EXPECT_EQ(x.code(), ErrorCode::Internal) << x.what();
      EXPECT_NE(std::string(x.what()).find("deadlocks"), std::string::npos) << x.what();
      EXPECT_NE(std::string(x.what()).find("rank 1 waits for a receive from rank 0"),
                std::string::npos)
          << x.what();
    }
  }
  {
    Engine e(topo, {});
    std::uint8_t buf[8];
    EXPECT_THROW(e.run([&](int r, transport::Transport& tr) {
      Request q;
      tr.postSend(r, buf, 8, kTag, q);  // to itself
    }),
                 Error);
  }
}

// ---- Every algorithm against its formulas ------------------------------------------------

int floorPow2(int n) {
  return static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
}
int ceilLog2(int n) {
  return algo::patterns::ceilLog2(n);
}
std::uint64_t ceilDiv(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

/// One run's shape: N ranks on `topo`, elements per buffer (allreduce, reduce, broadcast) or
/// per rank block (the rest), chunk and scratch in bytes.
struct Case {
  const Topology* topo;
  std::size_t elems;
  std::size_t chunk;
  std::size_t scratch;
  int root;
};

constexpr std::uint64_t kEs = 4;  // fp32

/// Elements per chunk of an algorithm that keeps `slots` chunk slots in scratch (0: none).
std::uint64_t chunkElems(const Case& c, std::uint64_t slots) {
  std::uint64_t b = c.chunk;
  if (slots > 0) b = std::min<std::uint64_t>(b, c.scratch / slots);
  return std::max<std::uint64_t>(1, b / kEs);
}

struct Expect {
  std::uint64_t bytes;
  std::uint64_t messages;
};

/// Bytes and messages rank r sends, by docs/algorithms.md; nullopt: no formula (fails).
std::optional<Expect> formula(Collective coll, const std::string& name, const Case& c, int r) {
  const Topology& t = *c.topo;
  const int n = t.size();
  const auto un = static_cast<std::uint64_t>(n);
  const std::uint64_t full = c.elems * kEs;   // S for allreduce / reduce / broadcast
  const std::uint64_t block = c.elems * kEs;  // c for the per-rank collectives
  const int p = floorPow2(n);
  const int e = n - p;
  const bool foldedEven = r < 2 * e && r % 2 == 0;
  const bool foldedOdd = r < 2 * e && r % 2 == 1;
  const auto rounds = static_cast<std::uint64_t>(ceilLog2(p));
  // Ring passes over N balanced segments (the longest is ceil(count / N)), chunk-major, one
  // message per segment chunk and step, empty ones included.
  auto ringRs = [&](std::uint64_t count) {
    return (un - 1) * ceilDiv(ceilDiv(count, un), chunkElems(c, 4));
  };
  // The allgather pass between two ranks forwards nothing: one message per segment, unchunked.
  auto ringAg = [&](std::uint64_t longest) {
    return (un - 1) * (n == 2 ? (longest > 0 ? 1 : 0) : ceilDiv(longest, chunkElems(c, 0)));
  };
  const std::uint64_t seg = ceilDiv(c.elems, un);
  if (n == 1) return Expect{0, 0};
  if (name == "hierarchical") {
    const int nodes = t.numNodes();
    const int local = t.maxLocalSize();
    const bool uniform = t.uniform();
    // checkCase only gets here where the row's constraints hold (several nodes, uniform
    // ones for allreduce / allgather / reduce_scatter).
    (void)uniform;
    // Hosts of L ranks, M hosts; one piece (the sizes here), the sub-algorithms' chunks of
    // C elements (the chunk: the scratch is large enough here for every sub-algorithm's
    // slots in its half).
    const auto L = static_cast<std::uint64_t>(local);
    const auto M = static_cast<std::uint64_t>(nodes);
    const int m = t.nodeOf(r);
    const int l = t.localRank(r);
    const std::uint64_t C = chunkElems(c, 0);
    const std::uint64_t sliceChunks = ceilDiv(c.elems / L, C);  // per slice of S/L
    switch (coll) {
      case Collective::Allreduce:
        // Ring reduce-scatter and allgather of the L slices in the node (L-1 steps per chunk
        // each), ring allreduce of the rank's slice across nodes (2(M-1) messages; between
        // two hosts one exchange of the whole slice).
        return Expect{full * 2 * (L - 1) / L + (full / L) * 2 * (M - 1) / M,
                      2 * (L - 1) * sliceChunks + (M == 2 ? 1 : 2 * (M - 1))};
      case Collective::Allgather:
      case Collective::ReduceScatter: {
        // Across nodes a ring of the own blocks (M-1 steps), in the node a ring whose steps
        // carry M blocks, one message each (M(L-1)); per chunk of a block. Between two hosts
        // the allgather's ring is one unchunked exchange (the reduce-scatter's still chunks).
        const std::uint64_t chunks = ceilDiv(c.elems, C);
        const std::uint64_t across = coll == Collective::Allgather && M == 2 ? 1 : (M - 1) * chunks;
        return Expect{M * (L - 1) * block + (M - 1) * block, across + M * (L - 1) * chunks};
      }
      case Collective::Broadcast: {
        // Node allgather: L - 1 ring steps; tree across nodes: one message per child node;
        // both per chunk of a slice. The root first scatters L - 1 slices, one message each.
        const std::uint64_t slice = full / L;
        const auto children = static_cast<std::uint64_t>(
            algo::patterns::binomialTree(m, nodes, t.nodeOf(c.root)).numChildren);
        std::uint64_t bytes = (full - slice) + slice * children;
        std::uint64_t msgs = ((L - 1) + children) * sliceChunks;
        if (r == c.root) {
          bytes += full - slice;
          msgs += L - 1;
        }
        return Expect{bytes, msgs};
      }
      case Collective::Reduce: {
        // Node ring reduce-scatter (L-1 steps) and the tree towards the root's node (one
        // message off it), both per chunk of a slice; on the root's node every other rank
        // then sends its slice to the root, one message.
        const std::uint64_t slice = full / L;
        const int rootNode = t.nodeOf(c.root);
        std::uint64_t bytes = full - slice, msgs = (L - 1) * sliceChunks;
        if (m != rootNode) {
          bytes += slice;
          msgs += sliceChunks;
        }
        if (m == rootNode && l != t.localRank(c.root)) {
          bytes += slice;
          msgs += 1;
        }
        return Expect{bytes, msgs};
      }
      default:
        return std::nullopt;
    }
  }
  switch (coll) {
    case Collective::Allreduce:
      if (name == "ring") return Expect{full * 2 * (un - 1) / un, ringRs(c.elems) + ringAg(seg)};
      if (name == "rank_ordered")
        return Expect{full * 2 * (un - 1) / un,
                      (un - 1) * ceilDiv(seg, chunkElems(c, 2 * un)) + ringAg(seg)};
      if (name == "recursive_doubling") {
        const std::uint64_t k = ceilDiv(c.elems, chunkElems(c, 1));
        if (foldedEven) return Expect{full, k};
        return Expect{full * rounds + (foldedOdd ? full : 0), k * (rounds + (foldedOdd ? 1 : 0))};
      }
      if (name == "halving_doubling") {
        const std::uint64_t k = ceilDiv(c.elems, chunkElems(c, 1));
        const auto up = static_cast<std::uint64_t>(p);
        if (foldedEven) return Expect{full, k};
        return Expect{full * 2 * (up - 1) / up + (foldedOdd ? full : 0),
                      k * (2 * rounds + (foldedOdd ? 1 : 0))};
      }
      if (name == "double_binary_tree") {
        const std::uint64_t k = ceilDiv(c.elems / 2, chunkElems(c, 4));
        std::uint64_t links = 0;
        for (int w = 0; w < 2; ++w) {
          const auto l = algo::patterns::doubleBinaryTree(r, n, w);
          links += static_cast<std::uint64_t>((l.parent >= 0 ? 1 : 0) + l.numChildren);
        }
        return Expect{(full / 2) * links, k * links};
      }
      break;
    case Collective::Reduce: {
      if (name == "binomial_tree") {
        const std::uint64_t k =
            ceilDiv(c.elems, chunkElems(c, 2 * static_cast<std::uint64_t>(ceilLog2(n) + 1)));
        return r == c.root ? Expect{0, 0} : Expect{full, k};
      }
      if (name == "rank_ordered") {
        const std::uint64_t k = ceilDiv(c.elems, chunkElems(c, 2 * un));
        return r == c.root ? Expect{0, 0} : Expect{full, k};
      }
      break;
    }
    case Collective::Broadcast:
      if (name == "binomial_tree") {
        const auto children =
            static_cast<std::uint64_t>(algo::patterns::binomialTree(r, n, c.root).numChildren);
        return Expect{full * children, children * ceilDiv(c.elems, chunkElems(c, 0))};
      }
      break;
    case Collective::Allgather:
      if (name == "ring") return Expect{block * (un - 1), ringAg(c.elems)};
      if (name == "bruck") return Expect{block * (un - 1), static_cast<std::uint64_t>(ceilLog2(n))};
      break;
    case Collective::Allgatherv:
      // Equal blocks here: as the ring allgather.
      if (name == "ring") return Expect{block * (un - 1), ringAg(c.elems)};
      break;
    case Collective::ReduceScatter:
    case Collective::ReduceScatterv:
      if (name == "ring") return Expect{block * (un - 1), ringRs(c.elems * un)};
      if (name == "rank_ordered")
        return Expect{block * (un - 1), (un - 1) * ceilDiv(c.elems, chunkElems(c, 2 * un))};
      if (name == "halving_doubling") {
        // Chunks of every block at once (elements [off, off + ce) of each of the N blocks).
        const std::uint64_t k = ceilDiv(c.elems, chunkElems(c, 2 * un));
        if (foldedEven) return Expect{block * un, k};
        if (p == n) return Expect{block * (un - 1), k * rounds};
        return std::nullopt;  // the active ranks' share depends on the block layout
      }
      break;
    case Collective::Gather:
      if (name == "linear") return r == c.root ? Expect{0, 0} : Expect{block, 1};
      break;
    case Collective::Scatter:
      if (name == "linear") return r == c.root ? Expect{block * (un - 1), un - 1} : Expect{0, 0};
      break;
    case Collective::Alltoall:
    case Collective::Alltoallv:
      if (name == "pairwise") return Expect{block * (un - 1), un - 1};
      if (name == "bruck") {
        std::uint64_t blocks = 0;
        for (int k = 0; (1 << k) < n; ++k)
          for (int i = 0; i < n; ++i) blocks += (i >> k) & 1;
        const std::uint64_t pieces =
            ceilDiv(c.elems, chunkElems(c, 2 * ceilDiv(un, 2)));  // per step
        return Expect{block * blocks, static_cast<std::uint64_t>(ceilLog2(n)) * pieces};
      }
      break;
    case Collective::Barrier:
      if (name == "dissemination") return Expect{0, static_cast<std::uint64_t>(ceilLog2(n))};
      break;
    default:
      break;
  }
  return std::nullopt;
}

/// The nccl-tests size of a case.
std::size_t sizeOf(Collective coll, const Case& c) {
  switch (coll) {
    case Collective::Allreduce:
    case Collective::Reduce:
    case Collective::Broadcast:
      return c.elems * kEs;
    case Collective::Barrier:
      return 0;
    default:
      return c.elems * kEs * static_cast<std::size_t>(c.topo->size());
  }
}

void checkCase(const AlgoInfo& a, const Case& c, const std::string& what) {
  SCOPED_TRACE(what);
  sim::SimOptions o;
  o.chunkBytes = c.chunk;
  o.scratchBytes = c.scratch;
  o.root = c.root;
  // One piece for the hierarchical allreduce (its formula above is for one piece).
  o.pieceBytes = std::size_t{1} << 30;
  // Where the row's constraints fail the simulator refuses it, as selection would.
  if (const algo::Constraint why =
          algo::cannotRun(a, {c.topo->size(), sizeOf(a.coll, c), false, c.topo, false});
      why != algo::Constraint::None) {
    try {
      sim::simulate(a, *c.topo, sizeOf(a.coll, c), o);
      ADD_FAILURE() << "simulated " << a.name << " where it cannot run";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(algo::describe(why, a)), std::string::npos) << e.what();
    }
    return;
  }
  const sim::SimResult res = sim::simulate(a, *c.topo, sizeOf(a.coll, c), o);
  ASSERT_EQ(res.bytes, sizeOf(a.coll, c));
  std::uint64_t total = 0;
  bool anyFormula = false;
  for (int r = 0; r < c.topo->size(); ++r) {
    const auto f = formula(a.coll, a.name, c, r);
    const sim::RankTraffic& t = res.perRank[static_cast<std::size_t>(r)];
    EXPECT_EQ(t.bytesSent[0], 0u) << "rank " << r << " sent to itself";
    total += t.totalSent();
    if (!f) continue;
    anyFormula = true;
    EXPECT_EQ(t.totalSent(), f->bytes) << "bytes of rank " << r;
    EXPECT_EQ(t.totalMessages(), f->messages) << "messages of rank " << r;
    if (testing::Test::HasFailure()) return;  // one rank's report is enough
  }
  EXPECT_TRUE(anyFormula) << "no formula for " << toString(a.coll) << " " << a.name
                          << ": add one to docs/algorithms.md and here";
  EXPECT_EQ(total, res.totalBytes);
  EXPECT_GT(res.seconds, 0.0);
  if (a.coll == Collective::Allreduce && std::string(a.name) == "ring") {
    EXPECT_EQ(res.steps, 2u * static_cast<std::uint32_t>(c.topo->size() - 1) *
                             static_cast<std::uint32_t>(
                                 ceilDiv(ceilDiv(c.elems, c.topo->size()), chunkElems(c, 0))));
  }
}

class SimFormulas : public testing::TestWithParam<const AlgoInfo*> {};

TEST_P(SimFormulas, ThousandRanks) {
  const AlgoInfo& a = *GetParam();
  const Topology topo = topology::uniformTopology(128, 8);
  // Buffers of 2 elements per rank (allreduce: 2048); per-rank blocks of 4 elements: every
  // transfer fits one chunk.
  const bool perBuffer = a.coll == Collective::Allreduce || a.coll == Collective::Reduce ||
                         a.coll == Collective::Broadcast;
  checkCase(a, Case{&topo, perBuffer ? 2048u : 4u, 256 * 1024, 4 << 20, 517}, "1024 ranks");
}

TEST_P(SimFormulas, SmallRanksAndSeveralChunks) {
  const AlgoInfo& a = *GetParam();
  // 5 and 7 ranks (not powers of two: folds, uneven trees), 8 as 2 hosts x 4; chunks of 1,024
  // elements, so the buffers below take several.
  const Topology five = topology::uniformTopology(5, 1);
  const Topology seven = topology::uniformTopology(1, 7);
  const Topology eight = topology::uniformTopology(2, 4);
  const bool perBuffer = a.coll == Collective::Allreduce || a.coll == Collective::Reduce ||
                         a.coll == Collective::Broadcast;
  for (const Topology* t : {&five, &seven, &eight}) {
    // 6720 = 2^6 x 3 x 5 x 7 splits evenly over every N here.
    checkCase(a, Case{t, perBuffer ? 6720u : 1500u, 4096, 64 * 1024, t->size() / 2}, t->summary());
    if (HasFailure()) return;
  }
}

TEST(SimFormulas, SharedMemoryAlgorithmsAreRefused) {
  const Topology topo = topology::uniformTopology(1, 4);
  int refused = 0;
  for (const AlgoInfo& a : algo::registry()) {
    if (!sim::needsSharedMemory(a)) continue;
    ++refused;
    try {
      sim::simulate(a, topo, 4096, {});
      ADD_FAILURE() << toString(a.coll) << " " << a.name << " ran";
    } catch (const Error& x) {
      EXPECT_EQ(x.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(x.what()).find("needs a shared-memory group"), std::string::npos)
          << x.what();
    }
  }
  EXPECT_GE(refused, 10);
}

std::vector<const AlgoInfo*> runnable() {
  std::vector<const AlgoInfo*> v;
  for (const AlgoInfo& a : algo::registry())
    if (!sim::needsSharedMemory(a)) v.push_back(&a);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, SimFormulas, testing::ValuesIn(runnable()),
                         [](const testing::TestParamInfo<const AlgoInfo*>& i) {
                           return std::string(toString(i.param->coll)) + "_" + i.param->name;
                         });

// ---- Real data through the simulated transport -------------------------------------------

TEST(SimData, AllreduceResultsAreRightWithCopiedPayloads) {
  // The algorithms' own results over the simulated transport with payloads copied: what the
  // schedule moves is what the real transports move.
  for (const int n : {7, 64}) {
    const Topology topo = topology::uniformTopology(n == 7 ? 1 : 8, n == 7 ? 7 : 8);
    for (const AlgoInfo& a : algo::registry()) {
      if (a.coll != Collective::Allreduce ||
          algo::cannotRun(a, {n, 0, false, &topo, false}) != algo::Constraint::None)
        continue;
      SCOPED_TRACE(std::string(a.name) + " on " + topo.summary());
      constexpr std::size_t count = 3000;  // several chunks of 1 KiB
      EngineOptions o;
      o.copyPayloads = true;
      Engine e(topo, o);
      std::vector<std::size_t> wrong(static_cast<std::size_t>(n), 0);
      e.run([&](int r, transport::Transport& tr) {
        std::vector<float> in(count, static_cast<float>(r + 1)), out(count, -1.0f);
        std::vector<std::uint8_t> scratch(64 * 1024);
        algo::Context ctx{tr, r, n, 1024, scratch, {}, kTag, false, &topo};
        ctx.pieceBytes = 4096;
        algo::ViewGroups views(ctx);
        ctx.groups = &views;
        algo::CollArgs args;
        args.coll = Collective::Allreduce;
        args.send = in.data();
        args.recv = out.data();
        args.count = count;
        a.run(ctx, args);
        const auto want = static_cast<float>(n * (n + 1) / 2);
        for (float v : out) wrong[static_cast<std::size_t>(r)] += v != want ? 1 : 0;
      });
      for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[static_cast<std::size_t>(r)], 0u) << "rank " << r;
    }
  }
}

// ---- The cost model ------------------------------------------------------------------------

TEST(SimTime, RingAllreduceAgreesWithTheCostModel) {
  // One rank per host: every ring step crosses the network, where the model's synchronous
  // steps and the simulated dataflow describe the same schedule. Reductions cost nothing in
  // the simulator, so the model gets a negligible gamma.
  tuning::CostParams p;
  p.gamma = 1e-15;
  for (const int n : {16, 64}) {
    const Topology topo = topology::uniformTopology(n, 1);
    const AlgoInfo& ring = *algo::findAlgorithm(Collective::Allreduce, "ring");
    for (const std::size_t bytes : {std::size_t{4096} * 4, std::size_t{1} << 20}) {
      sim::SimOptions o;
      o.cost = p;
      const sim::SimResult r = sim::simulate(ring, topo, bytes, o);
      const tuning::CostModel model(p, topo, n, std::min(o.chunkBytes, o.scratchBytes / 2), 0,
                                    o.scratchBytes);
      const auto want = model.predict(Collective::Allreduce, "ring", r.bytes);
      ASSERT_TRUE(want.has_value());
      SCOPED_TRACE(std::to_string(n) + " ranks, " + std::to_string(bytes) + " bytes: simulated " +
                   std::to_string(r.seconds) + " s, model " + std::to_string(want->seconds) + " s");
      EXPECT_GT(r.seconds, want->seconds / 1.5);
      EXPECT_LT(r.seconds, want->seconds * 1.5);
      // And the plain alpha-beta formula of one-chunk segments: 2(N-1) x (alpha + S/N x beta).
      if (bytes / static_cast<std::size_t>(n) <= o.chunkBytes) {
        const double formula =
            2.0 * (n - 1) * (p.net.alpha + static_cast<double>(r.bytes) / n * p.net.beta);
        EXPECT_NEAR(r.seconds, formula, formula * 1e-9);
      }
    }
  }
}

}  // namespace
}  // namespace braid::test
