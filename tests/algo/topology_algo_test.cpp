// Algorithms that read Context::topo (the hierarchical allreduce, allgather, reduce_scatter,
// broadcast and reduce) on fabricated topologies, hosts of equal and of different sizes:
// blocked and cyclic rank placement, several counts (0, 1, odd, primes, > one chunk), dtypes,
// in place, a tiny chunk; expected values computed independently (tests/harness/data). On a
// layout where a row's constraints fail (one node, one rank per node, uneven nodes for the
// allreduce, allgather and reduce_scatter) every rank must throw Error(InvalidArgument) naming
// the constraint: no algorithm runs another in its place.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <utility>
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

/// Where `algo` cannot run on `topo` (its row's constraints): runs it anyway and expects every
/// rank to throw Error(InvalidArgument) naming the algorithm and the constraint. True then.
bool refusedOn(const algo::AlgoInfo& algo, const topology::Topology& topo, RankSetup setup) {
  const algo::Constraint why = algo::cannotRun(algo, {topo.size(), 0, false, &topo, false});
  if (why == algo::Constraint::None) return false;
  setup.size = topo.size();
  setup.topo = &topo;
  const std::size_t elems = 64 * static_cast<std::size_t>(topo.size());
  auto errors = runRanks(setup, [&](algo::Context& ctx) {
    std::vector<float> in(elems, 1.0f), out(elems, 0.0f);
    algo::CollArgs a;
    a.coll = algo.coll;
    a.count = 8;
    a.send = in.data();
    a.recv = out.data();
    algo.run(ctx, a);
  });
  const std::string text = algo::describe(why, algo);
  for (int r = 0; r < topo.size(); ++r) {
    const std::string w = errorText(errors[static_cast<std::size_t>(r)]);
    EXPECT_NE(w.find("'" + std::string(algo.name) + "' cannot run"), std::string::npos)
        << "rank " << r << " on " << topo.summary() << ": " << w;
    EXPECT_NE(w.find(text), std::string::npos) << w;
  }
  return true;
}

/// pieceBytes: Context::pieceBytes of every rank (0: the Context's default).
void checkAllreduce(const algo::AlgoInfo& algo, const topology::Topology& topo, std::size_t count,
                    DataType dt, ReduceOp op, bool inPlace, std::size_t pieceBytes = 0,
                    RankSetup setup = {}) {
  if (refusedOn(algo, topo, setup)) return;
  const int n = topo.size();
  std::vector<double> expected(count);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < count; ++i) {
    for (int r = 0; r < n; ++r) v[static_cast<std::size_t>(r)] = testValue(dt, op, r, i);
    expected[i] = expectedReduce(dt, op, v);
  }
  setup.size = n;
  setup.topo = &topo;
  std::vector<std::string> reports(static_cast<std::size_t>(n));
  auto errors = runRanks(setup, [&](algo::Context& ctx) {
    if (pieceBytes > 0) ctx.pieceBytes = pieceBytes;
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

TEST(TopologyAlgorithms, HierarchicalAllreducePipelinedByPieces) {
  // Tiny pieces, so a buffer makes many of them (and pieces smaller than one element per local
  // rank, leaving some slices and network segments empty): every overlap of one piece's network
  // phase with the in-node phases of its neighbours runs, with both request pairs in turn.
  const algo::AlgoInfo* algo = algo::findAlgorithm(Collective::Allreduce, "hierarchical");
  ASSERT_NE(algo, nullptr);
  const Layout layouts[] = {{2, 2, false}, {3, 2, false}, {2, 3, true}, {4, 2, true}};
  for (const Layout& l : layouts) {
    const auto topo = topology::uniformTopology(l.nodes, l.perNode, l.cyclic);
    for (std::size_t piece : {std::size_t{1}, std::size_t{12}, std::size_t{100}}) {
      for (std::size_t count : {0, 1, 2, 3, 7, 13, 31, 257, 1031}) {
        for (auto [dt, op] : {std::pair{DataType::Float32, ReduceOp::Sum},
                              std::pair{DataType::Int32, ReduceOp::Max}}) {
          for (bool inPlace : {false, true}) {
            SCOPED_TRACE(describe(l) + " piece " + std::to_string(piece) + " bytes, count " +
                         std::to_string(count) + " " + toString(dt) + " " + toString(op) +
                         (inPlace ? " in place" : ""));
            checkAllreduce(*algo, topo, count, dt, op, inPlace, piece);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  // Every dtype and op over 2x2 and 4x2, 7 elements per piece (1031 = 147 pieces + 2).
  for (const Layout& l : {Layout{2, 2, false}, Layout{4, 2, true}}) {
    for (DataType dt : kAllDataTypes) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE(describe(l) + " 1031 " + std::string(toString(dt)) + " " + toString(op) +
                       (inPlace ? " in place" : ""));
          checkAllreduce(*algo, topology::uniformTopology(l.nodes, l.perNode, l.cyclic), 1031, dt,
                         op, inPlace, 7 * dataTypeSize(dt));
          if (HasFailure()) return;
        }
      }
    }
  }
  // Pieces capped by the scratch: 128 bytes of scratch leave 64 for the network's receive
  // buffer, so a piece holds at most 64 x L x M bytes whatever pieceBytes says (64 x L between
  // two nodes, which exchange whole slices); the in-node rings get the other 64 (four 16-byte
  // chunk slots).
  RankSetup small;
  small.scratchBytes = 128;
  small.chunkBytes = 16;
  for (const Layout& l : {Layout{2, 2, false}, Layout{3, 2, true}}) {
    for (std::size_t count : {1, 5, 997, 5003}) {
      SCOPED_TRACE(describe(l) + " 128-byte scratch, count " + std::to_string(count));
      checkAllreduce(*algo, topology::uniformTopology(l.nodes, l.perNode, l.cyclic), count,
                     DataType::Float32, ReduceOp::Sum, count % 2 == 1, std::size_t{1} << 20, small);
      if (HasFailure()) return;
    }
  }
}

TEST(TopologyAlgorithms, HierarchicalAllreduceRanksAgreeBitwise) {
  // Float sums of values whose rounding depends on the order: every rank must still end with
  // the same bits (each element is reduced by one chain, then copied).
  const algo::AlgoInfo* algo = algo::findAlgorithm(Collective::Allreduce, "hierarchical");
  ASSERT_NE(algo, nullptr);
  for (const Layout& l : {Layout{2, 2, false}, Layout{3, 2, false}, Layout{2, 3, true}}) {
    const auto topo = topology::uniformTopology(l.nodes, l.perNode, l.cyclic);
    const int n = topo.size();
    const std::size_t count = 4099;
    std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
    RankSetup setup;
    setup.size = n;
    setup.topo = &topo;
    auto errors = runRanks(setup, [&](algo::Context& ctx) {
      ctx.pieceBytes = 52;
      std::vector<float> buf(count);
      for (std::size_t i = 0; i < count; ++i)
        buf[i] = 1.0f / static_cast<float>(
                            1 + ((i * 7919 + static_cast<std::size_t>(ctx.rank) * 104729) % 977));
      algo::CollArgs a;
      a.coll = Collective::Allreduce;
      a.count = count;
      a.dtype = DataType::Float32;
      a.op = ReduceOp::Sum;
      a.send = buf.data();
      a.recv = buf.data();
      algo->run(ctx, a);
      results[static_cast<std::size_t>(ctx.rank)] = std::move(buf);
    });
    SCOPED_TRACE(describe(l));
    for (int r = 0; r < n; ++r) {
      ASSERT_FALSE(errors[static_cast<std::size_t>(r)])
          << "rank " << r << ": " << errorText(errors[static_cast<std::size_t>(r)]);
      ASSERT_EQ(std::memcmp(results[static_cast<std::size_t>(r)].data(), results[0].data(),
                            count * sizeof(float)),
                0)
          << "rank " << r << " differs from rank 0";
    }
    // And close to the sum computed here in double.
    for (std::size_t i = 0; i < count; i += 97) {
      double want = 0;
      for (int r = 0; r < n; ++r)
        want += static_cast<double>(
            1.0f /
            static_cast<float>(1 + ((i * 7919 + static_cast<std::size_t>(r) * 104729) % 977)));
      ASSERT_NEAR(results[0][i], want, 1e-5 * want) << "element " << i;
    }
  }
}

TEST(TopologyAlgorithms, HierarchicalAllreduceRefusesUnevenNodes) {
  // 3 ranks on one host, 1 on another: not uniform, so the row cannot run (checkAllreduce
  // expects every rank's Error naming the constraint).
  std::vector<topology::PeerInfo> peers(4);
  for (int r = 0; r < 4; ++r) {
    peers[static_cast<std::size_t>(r)].hostname = r < 3 ? "a" : "b";
    peers[static_cast<std::size_t>(r)].hostId = peers[static_cast<std::size_t>(r)].hostname;
  }
  const auto topo = topology::buildTopology(peers);
  EXPECT_EQ(algo::cannotRun(*algo::findAlgorithm(Collective::Allreduce, "hierarchical"),
                            {4, 4124, false, &topo, false}),
            algo::Constraint::UniformNodes);
  checkAllreduce(*algo::findAlgorithm(Collective::Allreduce, "hierarchical"), topo, 1031,
                 DataType::Float32, ReduceOp::Sum, true);
}

// ---- Hierarchical allgather, reduce_scatter, broadcast and reduce ----

/// A topology with the host of every rank given (hosts of any size, any placement).
topology::Topology hostsTopology(const std::vector<int>& hostOf) {
  std::vector<topology::PeerInfo> peers(hostOf.size());
  for (std::size_t r = 0; r < hostOf.size(); ++r) {
    peers[r].hostname = "host" + std::to_string(hostOf[r]);
    peers[r].hostId = peers[r].hostname;
  }
  return topology::buildTopology(std::move(peers));
}

struct NamedTopology {
  topology::Topology topo;
  std::string what;
};

/// World sizes 1..8: uniform blocked and round-robin, and hosts of different sizes (3+1, 1+3,
/// 2+2+1, 3+2, 3+2+2 interleaved, 1+2+2+3).
std::vector<NamedTopology> smallLayouts() {
  std::vector<NamedTopology> out;
  const Layout uniform[] = {{1, 1, false}, {2, 1, false}, {1, 2, false}, {3, 1, false},
                            {2, 2, false}, {2, 2, true},  {2, 3, false}, {3, 2, true},
                            {4, 2, false}, {2, 4, true}};
  for (const Layout& l : uniform)
    out.push_back({topology::uniformTopology(l.nodes, l.perNode, l.cyclic), describe(l)});
  const std::vector<std::vector<int>> uneven = {{0, 0, 0, 1},          {0, 1, 1, 1},
                                                {0, 0, 1, 1, 2},       {0, 0, 0, 1, 1},
                                                {0, 1, 0, 2, 1, 0, 2}, {3, 1, 2, 3, 2, 1, 3, 0}};
  for (const auto& hosts : uneven) {
    std::string what = "hosts";
    for (int h : hosts) what += " " + std::to_string(h);
    out.push_back({hostsTopology(hosts), what});
  }
  return out;
}

std::vector<int> rootsOf(Collective coll, int n) {
  if (coll != Collective::Broadcast && coll != Collective::Reduce) return {0};
  std::vector<int> roots{0};
  for (int r : {n / 2, n - 1})
    if (r != roots.back()) roots.push_back(r);
  return roots;
}

struct HierCase {
  std::size_t count = 0;
  DataType dt = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  bool inPlace = false;
  int root = 0;
};

/// Runs one case of `algo` (allgather, reduce_scatter, broadcast or reduce) and checks every
/// rank's output element by element against values computed here.
void checkHierarchical(const algo::AlgoInfo& algo, const topology::Topology& topo,
                       const HierCase& c, RankSetup setup = {}) {
  if (refusedOn(algo, topo, setup)) return;
  const int n = topo.size();
  const auto un = static_cast<std::size_t>(n);
  const Collective coll = algo.coll;
  const bool reduction = coll == Collective::ReduceScatter || coll == Collective::Reduce;
  const ReduceOp vop = reduction ? c.op : ReduceOp::Sum;
  auto value = [&](int r, std::size_t i) { return testValue(c.dt, vop, r, i); };
  // Reductions: element i of the reduced buffer over all ranks.
  std::vector<double> expected;
  if (reduction) {
    const std::size_t total = coll == Collective::ReduceScatter ? un * c.count : c.count;
    expected.resize(total);
    std::vector<double> v(un);
    for (std::size_t i = 0; i < total; ++i) {
      for (int r = 0; r < n; ++r) v[static_cast<std::size_t>(r)] = value(r, i);
      expected[i] = expectedReduce(c.dt, c.op, v);
    }
  }
  setup.size = n;
  setup.topo = &topo;
  std::vector<std::string> reports(un);
  auto errors = runRanks(setup, [&](algo::Context& ctx) {
    const int me = ctx.rank;
    const auto ume = static_cast<std::size_t>(me);
    algo::CollArgs a;
    a.coll = coll;
    a.count = c.count;
    a.dtype = c.dt;
    a.op = c.op;
    a.root = c.root;
    std::size_t wrong = 0;
    std::string first;
    auto expect = [&](const char* what, std::size_t i, double got, double want) {
      if (got == want) return;
      if (wrong++ == 0)
        first = std::string(what) + "[" + std::to_string(i) + "]=" + std::to_string(got) +
                " want " + std::to_string(want);
    };
    switch (coll) {
      case Collective::Allgather: {
        Buffer in(c.dt, c.count);
        Buffer out(c.dt, un * c.count);
        for (std::size_t i = 0; i < c.count; ++i) in.set(i, value(me, i));
        for (std::size_t i = 0; i < un * c.count; ++i) out.set(i, 77);
        a.send = in.data();
        a.recv = out.data();
        if (c.inPlace) {
          for (std::size_t i = 0; i < c.count; ++i) out.set(ume * c.count + i, value(me, i));
          a.send = out.at(ume * c.count);
        }
        algo.run(ctx, a);
        for (int j = 0; j < n; ++j)
          for (std::size_t i = 0; i < c.count; ++i) {
            const std::size_t k = static_cast<std::size_t>(j) * c.count + i;
            expect("recv", k, out.get(k), value(j, i));
          }
        break;
      }
      case Collective::ReduceScatter: {
        Buffer in(c.dt, un * c.count);
        Buffer out(c.dt, c.count);
        for (std::size_t i = 0; i < un * c.count; ++i) in.set(i, value(me, i));
        for (std::size_t i = 0; i < c.count; ++i) out.set(i, 77);
        a.send = in.data();
        a.recv = c.inPlace ? in.at(ume * c.count) : out.data();
        algo.run(ctx, a);
        for (std::size_t i = 0; i < c.count; ++i)
          expect("recv", i, c.inPlace ? in.get(ume * c.count + i) : out.get(i),
                 expected[ume * c.count + i]);
        break;
      }
      case Collective::Broadcast: {
        Buffer buf(c.dt, c.count);
        Buffer src(c.dt, c.count);
        for (std::size_t i = 0; i < c.count; ++i) {
          buf.set(i, 77);
          src.set(i, value(c.root, i));
        }
        a.send = buf.data();
        a.recv = buf.data();
        if (me == c.root) {
          if (c.inPlace)
            buf = src;
          else
            a.send = src.data();
        }
        algo.run(ctx, a);
        for (std::size_t i = 0; i < c.count; ++i) expect("buf", i, buf.get(i), value(c.root, i));
        break;
      }
      case Collective::Reduce: {
        Buffer in(c.dt, c.count);
        Buffer out(c.dt, c.count);
        for (std::size_t i = 0; i < c.count; ++i) {
          in.set(i, value(me, i));
          out.set(i, 77);
        }
        a.send = in.data();
        a.recv = c.inPlace ? in.data() : (me == c.root ? out.data() : nullptr);
        algo.run(ctx, a);
        if (me == c.root)
          for (std::size_t i = 0; i < c.count; ++i)
            expect("recv", i, c.inPlace ? in.get(i) : out.get(i), expected[i]);
        else if (!c.inPlace)
          for (std::size_t i = 0; i < c.count; ++i) expect("send", i, in.get(i), value(me, i));
        break;
      }
      default:
        throw Error(ErrorCode::Internal, "no check for this collective");
    }
    if (wrong > 0) reports[ume] = std::to_string(wrong) + " wrong elements, first " + first;
  });
  for (int r = 0; r < n; ++r) {
    if (errors[static_cast<std::size_t>(r)])
      ADD_FAILURE() << "rank " << r << " threw: " << errorText(errors[static_cast<std::size_t>(r)]);
    if (!reports[static_cast<std::size_t>(r)].empty())
      ADD_FAILURE() << "rank " << r << ": " << reports[static_cast<std::size_t>(r)];
  }
}

std::string caseText(const std::string& layout, const HierCase& c) {
  return layout + " count " + std::to_string(c.count) + " " + toString(c.dt) + " " +
         toString(c.op) + (c.inPlace ? " in place" : "") + " root " + std::to_string(c.root);
}

class HierarchicalCollective : public testing::TestWithParam<Collective> {
 protected:
  const algo::AlgoInfo& algo() const {
    const algo::AlgoInfo* a = algo::findAlgorithm(GetParam(), "hierarchical");
    if (a == nullptr) throw Error(ErrorCode::Internal, "no hierarchical algorithm");
    return *a;
  }
  bool reduction() const {
    return GetParam() == Collective::ReduceScatter || GetParam() == Collective::Reduce;
  }
};

TEST_P(HierarchicalCollective, SizesOnFabricatedHosts) {
  // Every small layout, count, two dtype/op pairs, in place or not, three roots; 64-byte
  // chunks and 4 KiB scratch (RankSetup's defaults) so every pipelining path runs.
  const auto kinds =
      reduction() ? std::vector<std::pair<DataType, ReduceOp>>{{DataType::Float32, ReduceOp::Sum},
                                                               {DataType::Int32, ReduceOp::Max}}
                  : std::vector<std::pair<DataType, ReduceOp>>{{DataType::Float32, ReduceOp::Sum},
                                                               {DataType::Int8, ReduceOp::Sum}};
  for (const NamedTopology& l : smallLayouts()) {
    for (std::size_t count : {0, 1, 7, 13, 257, 1031, 5003}) {
      for (auto [dt, op] : kinds) {
        for (bool inPlace : {false, true}) {
          for (int root : rootsOf(GetParam(), l.topo.size())) {
            const HierCase c{count, dt, op, inPlace, root};
            SCOPED_TRACE(caseText(l.what, c));
            checkHierarchical(algo(), l.topo, c);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST_P(HierarchicalCollective, TypesAndOps) {
  std::vector<ReduceOp> ops{ReduceOp::Sum};
  if (reduction()) ops = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
  const NamedTopology layouts[] = {{topology::uniformTopology(2, 3), "2x3 blocked"},
                                   {hostsTopology({0, 1, 0, 2, 1, 0, 2}), "hosts 3+2+2"}};
  for (const NamedTopology& l : layouts) {
    for (DataType dt : kAllDataTypes) {
      for (ReduceOp op : ops) {
        for (bool inPlace : {false, true}) {
          const HierCase c{257, dt, op, inPlace, l.topo.size() - 1};
          SCOPED_TRACE(caseText(l.what, c));
          checkHierarchical(algo(), l.topo, c);
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_P(HierarchicalCollective, LargeLayoutsAndChunks) {
  // Up to 64 ranks as threads (sums would overflow the exact range: Max for reductions), and
  // the communicator's default chunk (256 KiB) and scratch (4 MiB) over several chunks.
  const ReduceOp op = reduction() ? ReduceOp::Max : ReduceOp::Sum;
  std::vector<int> roundRobin60(60);
  for (int r = 0; r < 60; ++r) roundRobin60[static_cast<std::size_t>(r)] = r % 8;
  const NamedTopology large[] = {{topology::uniformTopology(4, 4, true), "4x4 cyclic"},
                                 {topology::uniformTopology(8, 8), "8x8 blocked"},
                                 {hostsTopology(roundRobin60), "60 ranks over 8 hosts"}};
  RankSetup setup;
  setup.deadline = std::chrono::milliseconds(300000);
  for (const NamedTopology& l : large) {
    const HierCase c{1031, DataType::Int32, op, false, l.topo.size() / 3};
    SCOPED_TRACE(caseText(l.what, c));
    checkHierarchical(algo(), l.topo, c, setup);
    if (HasFailure()) return;
  }
  setup.chunkBytes = 256 * 1024;
  setup.scratchBytes = 4 * 1024 * 1024;
  for (bool inPlace : {false, true}) {
    const HierCase c{300007, DataType::Float32, ReduceOp::Sum, inPlace, 1};
    SCOPED_TRACE(caseText("2x2 cyclic, 256 KiB chunks", c));
    checkHierarchical(algo(), topology::uniformTopology(2, 2, true), c, setup);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Hierarchical, HierarchicalCollective,
                         testing::Values(Collective::Allgather, Collective::ReduceScatter,
                                         Collective::Broadcast, Collective::Reduce),
                         [](const testing::TestParamInfo<Collective>& i) {
                           return std::string(toString(i.param));
                         });

}  // namespace
}  // namespace braid::test
