// The rule grammar shared by BRAID_ALGO, tuning files and tests.
#include "tuning/rules.hpp"

#include <gtest/gtest.h>

#include <braid/error.hpp>

#include "algo/algorithm.hpp"
#include "topology/topology.hpp"
#include "transport/transport.hpp"

namespace braid::tuning {
namespace {

SelectionInputs in(Collective c, std::size_t bytes) {
  return {c, bytes, 4, 64 * 1024};
}

TEST(Rules, DefaultPolicyPicksLatencyAlgorithmForSmallAllreduce) {
  std::vector<Rule> none;
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Allreduce, 8)), "recursive_doubling");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Allreduce, 64 * 1024 + 1)), "ring");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Broadcast, 8)), "binomial_tree");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Barrier, 0)), "dissemination");
}

TEST(Rules, DefaultPolicyPicksLogStepAlgorithmsForSmallAllgatherAndReduceScatter) {
  std::vector<Rule> none;
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Allgather, 8)), "bruck");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Allgather, 64 * 1024 + 1)), "ring");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::ReduceScatter, 64 * 1024)), "halving_doubling");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::ReduceScatter, 64 * 1024 + 1)), "ring");
  SelectionInputs odd{Collective::ReduceScatter, 8, 6, 64 * 1024};
  EXPECT_EQ(selectAlgorithm(none, odd), "ring");  // folding 6 ranks into 4 sends more
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Allgatherv, 8)), "ring");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Alltoall, 8)), "pairwise");
  // One host with shared memory keeps the direct algorithms.
  SelectionInputs shm{Collective::Allgather, 8192, 4, 64 * 1024, true};
  EXPECT_EQ(selectAlgorithm(none, shm), "shm_direct");
  shm.coll = Collective::ReduceScatter;
  EXPECT_EQ(selectAlgorithm(none, shm), "shm_direct");
}

// One host (a SharedMemoryGroup): shm_ll up to one line's 1008 bytes (allgather: per rank;
// every barrier), shm_direct above and for the collectives without a line algorithm; rules
// still win.
TEST(Rules, DefaultPolicyOnOneHost) {
  const std::vector<Rule> none;
  constexpr std::size_t kLine = 1008;  // SharedMemoryGroup::kLineBytes
  static_assert(kLine == transport::SharedMemoryGroup::kLineBytes);
  auto host = [](Collective c, std::size_t bytes, int n = 4) {
    return SelectionInputs{c, bytes, n, 64 * 1024, true};
  };
  for (Collective c : {Collective::Allreduce, Collective::Broadcast, Collective::Reduce,
                       Collective::ReduceScatter, Collective::Alltoall}) {
    EXPECT_EQ(selectAlgorithm(none, host(c, 1)), "shm_ll");
    EXPECT_EQ(selectAlgorithm(none, host(c, kLine)), "shm_ll");
    EXPECT_EQ(selectAlgorithm(none, host(c, kLine + 1)), "shm_direct");
  }
  EXPECT_EQ(selectAlgorithm(none, host(Collective::Allgather, 4 * kLine)), "shm_ll");
  EXPECT_EQ(selectAlgorithm(none, host(Collective::Allgather, 4 * kLine + 1)), "shm_direct");
  EXPECT_EQ(selectAlgorithm(none, host(Collective::Barrier, 0)), "shm_ll");
  for (Collective c : {Collective::ReduceScatterv, Collective::Alltoallv, Collective::Allgatherv})
    EXPECT_EQ(selectAlgorithm(none, host(c, 8)), "shm_direct");
  EXPECT_EQ(selectAlgorithm(none, host(Collective::Gather, 8)), "linear");
  EXPECT_EQ(selectAlgorithm(parseRules("allreduce:ring", "test"), host(Collective::Allreduce, 8)),
            "ring");
}

TEST(Rules, BareNameForcesEveryCollectiveThatHasIt) {
  auto rules = parseRules("ring", "test");
  EXPECT_EQ(selectAlgorithm(rules, in(Collective::Allreduce, 8)), "ring");
  EXPECT_EQ(selectAlgorithm(rules, in(Collective::Allgather, 8)), "ring");
  EXPECT_EQ(selectAlgorithm(rules, in(Collective::Broadcast, 8)), "binomial_tree");
}

TEST(Rules, CollectiveAndRangeRules) {
  auto rules = parseRules("allreduce:0-1K:ring; allreduce:recursive_doubling", "test");
  EXPECT_EQ(selectAlgorithm(rules, in(Collective::Allreduce, 1023)), "ring");
  EXPECT_EQ(selectAlgorithm(rules, in(Collective::Allreduce, 1024)), "recursive_doubling");
  EXPECT_EQ(selectAlgorithm(rules, in(Collective::Allreduce, 1 << 30)), "recursive_doubling");
}

TEST(Rules, ErrorsNameSourceAndRule) {
  for (const char* bad : {"allreduce:nope", "frobnicate:0-1K:ring", "allreduce:5-1:ring",
                          "allreduce:1K:ring", "a:b:c:d", "broadcast:ring"}) {
    try {
      parseRules(bad, "BRAID_ALGO");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("BRAID_ALGO"), std::string::npos) << e.what();
    }
  }
}

TEST(Rules, SizesAcceptSuffixes) {
  EXPECT_EQ(parseSize("64"), 64u);
  EXPECT_EQ(parseSize("64K"), 65536u);
  EXPECT_EQ(parseSize("4M"), 4u << 20);
  EXPECT_EQ(parseSize("1G"), 1u << 30);
  EXPECT_FALSE(parseSize("x"));
  EXPECT_FALSE(parseSize(""));
  EXPECT_FALSE(parseSize("99999999999999999999G"));
}

SelectionInputs detIn(Collective c, std::size_t bytes, bool shm) {
  SelectionInputs s{c, bytes, 4, 64 * 1024, shm};
  s.deterministic = true;
  return s;
}

TEST(Rules, DeterministicModePicksRankOrderedAlgorithms) {
  std::vector<Rule> none;
  for (bool shm : {false, true})
    for (std::size_t bytes : {std::size_t{8}, std::size_t{64} << 20}) {
      const std::string direct = shm ? "shm_direct" : "rank_ordered";
      EXPECT_EQ(selectAlgorithm(none, detIn(Collective::Allreduce, bytes, shm)), direct);
      EXPECT_EQ(selectAlgorithm(none, detIn(Collective::Reduce, bytes, shm)), direct);
      EXPECT_EQ(selectAlgorithm(none, detIn(Collective::ReduceScatter, bytes, shm)), direct);
      // shm_direct's reduce_scatterv reduces in rank order too (registered rankOrdered).
      EXPECT_EQ(selectAlgorithm(none, detIn(Collective::ReduceScatterv, bytes, shm)), direct);
    }
  // Collectives that do not reduce keep their policy.
  EXPECT_EQ(selectAlgorithm(none, detIn(Collective::Allgatherv, 8, false)), "ring");
  EXPECT_EQ(selectAlgorithm(none, detIn(Collective::Broadcast, 8, false)), "binomial_tree");
  // Every algorithm the policy picks is registered as rank-ordered.
  for (Collective c : {Collective::Allreduce, Collective::Reduce, Collective::ReduceScatter,
                       Collective::ReduceScatterv})
    for (bool shm : {false, true}) {
      const auto* a = algo::findAlgorithm(c, selectAlgorithm(none, detIn(c, 8, shm)));
      ASSERT_NE(a, nullptr);
      EXPECT_TRUE(a->rankOrdered) << toString(c) << " " << a->name;
    }
}

TEST(Rules, DeterministicModeRefusesForcedNonRankOrderedAlgorithms) {
  auto rules =
      parseRules("allreduce:0-1K:rank_ordered;allreduce:1K-2K:ring;allgather:ring", "BRAID_ALGO");
  EXPECT_EQ(selectAlgorithm(rules, detIn(Collective::Allreduce, 8, false)), "rank_ordered");
  EXPECT_EQ(selectAlgorithm(rules, detIn(Collective::Allgather, 8, false)), "ring");
  EXPECT_EQ(selectAlgorithm(rules, detIn(Collective::Allreduce, 4096, true)), "shm_direct");
  try {
    selectAlgorithm(rules, detIn(Collective::Allreduce, 1500, false));
    ADD_FAILURE() << "deterministic mode ran ring";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    const std::string w = e.what();
    EXPECT_NE(w.find("'ring'"), std::string::npos) << w;
    EXPECT_NE(w.find("BRAID_DETERMINISTIC"), std::string::npos) << w;
    EXPECT_NE(w.find("rank_ordered"), std::string::npos) << w;  // names the alternatives
  }
  EXPECT_THROW(checkDeterministicRules(rules, "BRAID_ALGO"), Error);
  EXPECT_THROW(checkDeterministicRules(parseRules("ring", "t"), "BRAID_ALGO"), Error);
  EXPECT_THROW(checkDeterministicRules(parseRules("reduce:binomial_tree", "t"), "BRAID_ALGO"),
               Error);
  EXPECT_NO_THROW(checkDeterministicRules(
      parseRules("allgather:ring;broadcast:binomial_tree;shm_direct;rank_ordered", "t"),
      "BRAID_ALGO"));
}

// ---- Selection as data: row constraints, skipped rules, forced rules ----

constexpr std::size_t kLine = transport::SharedMemoryGroup::kLineBytes;

const algo::AlgoInfo& row(Collective c, const char* name) {
  const algo::AlgoInfo* a = algo::findAlgorithm(c, name);
  EXPECT_NE(a, nullptr) << toString(c) << " " << name;
  return *a;
}

// Two nodes of `perNode` ranks, or 3 + 1 ranks (not uniform).
topology::Topology uneven() {
  std::vector<topology::PeerInfo> peers(4);
  for (int r = 0; r < 4; ++r) {
    peers[static_cast<std::size_t>(r)].hostname = r < 3 ? "a" : "b";
    peers[static_cast<std::size_t>(r)].hostId = peers[static_cast<std::size_t>(r)].hostname;
  }
  return topology::buildTopology(peers);
}

TEST(Constraints, EachConstraintDecidesAlone) {
  using algo::Constraint;
  const auto two = topology::uniformTopology(2, 2);
  const auto one = topology::uniformTopology(1, 4);
  const auto singles = topology::uniformTopology(4, 1);
  const auto bad = uneven();
  const auto& direct = row(Collective::Allreduce, "shm_direct");
  const auto& ll = row(Collective::Allreduce, "shm_ll");
  const auto& llGather = row(Collective::Allgather, "shm_ll");
  const auto& hier = row(Collective::Allreduce, "hierarchical");
  const auto& hierBcast = row(Collective::Broadcast, "hierarchical");
  const auto& ring = row(Collective::Allreduce, "ring");
  // Shared memory: needed above one rank.
  EXPECT_EQ(algo::cannotRun(direct, {4, 8, false, nullptr, false}), Constraint::SharedMemory);
  EXPECT_EQ(algo::cannotRun(direct, {4, 8, true, nullptr, false}), Constraint::None);
  EXPECT_EQ(algo::cannotRun(direct, {1, 8, false, nullptr, false}), Constraint::None);
  // One line: in all, or per rank (allgather).
  EXPECT_EQ(algo::cannotRun(ll, {4, kLine, true, nullptr, false}), Constraint::None);
  EXPECT_EQ(algo::cannotRun(ll, {4, kLine + 1, true, nullptr, false}), Constraint::MaxBytes);
  EXPECT_EQ(algo::cannotRun(ll, {1, kLine + 1, false, nullptr, false}), Constraint::MaxBytes);
  EXPECT_EQ(algo::cannotRun(llGather, {4, 4 * kLine, true, nullptr, false}), Constraint::None);
  EXPECT_EQ(algo::cannotRun(llGather, {4, 4 * kLine + 4, true, nullptr, false}),
            Constraint::MaxBytes);
  // Several nodes, and uniform ones where the row says so.
  EXPECT_EQ(algo::cannotRun(hier, {4, 8, false, nullptr, false}), Constraint::SeveralNodes);
  EXPECT_EQ(algo::cannotRun(hier, {4, 8, false, &one, false}), Constraint::SeveralNodes);
  EXPECT_EQ(algo::cannotRun(hier, {4, 8, false, &singles, false}), Constraint::SeveralNodes);
  EXPECT_EQ(algo::cannotRun(hier, {8, 8, false, &two, false}), Constraint::SeveralNodes);  // size
  EXPECT_EQ(algo::cannotRun(hier, {4, 8, false, &two, false}), Constraint::None);
  EXPECT_EQ(algo::cannotRun(hier, {4, 8, false, &bad, false}), Constraint::UniformNodes);
  EXPECT_EQ(algo::cannotRun(hierBcast, {4, 8, false, &bad, false}), Constraint::None);
  // Deterministic mode: reductions need rank-ordered rows.
  EXPECT_EQ(algo::cannotRun(ring, {4, 8, false, nullptr, true}), Constraint::RankOrdered);
  EXPECT_EQ(algo::cannotRun(row(Collective::Allgather, "ring"), {4, 8, false, nullptr, true}),
            Constraint::None);
  EXPECT_EQ(algo::cannotRun(ring, {4, 8, false, nullptr, false}), Constraint::None);
  // The text names the constraint.
  EXPECT_NE(algo::describe(Constraint::MaxBytes, llGather).find("1008 bytes per rank"),
            std::string::npos);
  EXPECT_NE(algo::describeConstraints(hier).find("same ranks per node"), std::string::npos);
  EXPECT_EQ(algo::describeConstraints(ring), "none");
}

// A rule naming a row that cannot run is skipped (the selection says which and why); forced,
// it is an Error(InvalidArgument) naming the algorithm, the constraint and the collective.
struct ConstraintCase {
  const char* what;
  const char* rule;
  SelectionInputs in;
  const char* fallsTo;     // what the default table then picks
  const char* constraint;  // a piece of the error text
};

TEST(Constraints, RuleSkippedOrForcedErrorPerConstraint) {
  const auto one = topology::uniformTopology(1, 4);
  const auto bad = uneven();
  SelectionInputs noShm{Collective::Allreduce, 8, 4, 64 * 1024};
  SelectionInputs bigLine{Collective::Allreduce, kLine + 1, 4, 64 * 1024, true};
  SelectionInputs bigBlock{Collective::Allgather, 4 * kLine + 4, 4, 64 * 1024, true};
  SelectionInputs flat{Collective::Broadcast, 8, 4, 64 * 1024};
  flat.topo = &one;
  SelectionInputs notUniform{Collective::Allreduce, 1 << 20, 4, 64 * 1024};
  notUniform.topo = &bad;
  const ConstraintCase cases[] = {
      {"no shared group", "allreduce:shm_direct", noShm, "recursive_doubling", "shared-memory"},
      {"no shared group (ll)", "allreduce:shm_ll", noShm, "recursive_doubling", "shared-memory"},
      {"message above a line", "allreduce:shm_ll", bigLine, "shm_direct", "1008 bytes in all"},
      {"block above a line", "allgather:shm_ll", bigBlock, "shm_direct", "1008 bytes per rank"},
      {"one node", "broadcast:hierarchical", flat, "binomial_tree", "at least 2 nodes"},
      {"uneven nodes", "allreduce:hierarchical", notUniform, "ring", "same number of ranks"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto rules = parseRules(c.rule, "BRAID_ALGO");
    const Selection s = select(rules, c.in);
    ASSERT_NE(s.algorithm, nullptr);
    EXPECT_STREQ(s.algorithm->name, c.fallsTo);
    EXPECT_EQ(s.reason, Selection::Reason::Default);
    EXPECT_EQ(s.skippedRule, &rules.front());
    EXPECT_NE(s.skippedBecause, algo::Constraint::None);
    SelectionInputs forced = c.in;
    forced.forced = true;
    try {
      select(rules, forced);
      ADD_FAILURE() << "forced " << c.rule << " ran something";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      const std::string w = e.what();
      const std::string name = std::string(c.rule).substr(std::string(c.rule).find(':') + 1);
      EXPECT_NE(w.find("'" + name + "'"), std::string::npos) << w;
      EXPECT_NE(w.find(c.constraint), std::string::npos) << w;
      EXPECT_NE(w.find(toString(c.in.coll)), std::string::npos) << w;
    }
  }
  // A later rule whose row can run wins over the default table.
  const auto two = parseRules("allreduce:shm_ll;allreduce:ring", "BRAID_ALGO");
  const Selection s = select(two, bigLine);
  EXPECT_STREQ(s.algorithm->name, "ring");
  EXPECT_EQ(s.reason, Selection::Reason::Rule);
  EXPECT_EQ(s.skippedRule, &two.front());
  // Forced rules that can run, run.
  SelectionInputs ok = bigLine;
  ok.forced = true;
  EXPECT_STREQ(select(parseRules("allreduce:shm_direct", "t"), ok).algorithm->name, "shm_direct");
}

// The default table always has a row that can run, and picks only rows that can, for every
// combination of the selection inputs.
TEST(Constraints, DefaultTableAlwaysPicksARunnableRow) {
  const auto two = topology::uniformTopology(2, 4);
  const auto bad = uneven();
  for (int c = 0; c < static_cast<int>(Collective::Send); ++c) {
    const auto coll = static_cast<Collective>(c);
    for (int n : {1, 2, 3, 4, 5, 7, 8})
      for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, kLine, kLine + 1,
                                std::size_t{64} << 10, std::size_t{1} << 30})
        for (bool shm : {false, true})
          for (bool det : {false, true})
            for (const topology::Topology* t :
                 {static_cast<const topology::Topology*>(nullptr), &two, &bad}) {
              SelectionInputs in{coll, bytes, n, 64 * 1024, shm, det};
              in.topo = t;
              const Selection s = select({}, in);
              ASSERT_NE(s.algorithm, nullptr) << toString(coll) << " n=" << n;
              EXPECT_EQ(s.algorithm->coll, coll);
              EXPECT_EQ(algo::cannotRun(*s.algorithm, settingOf(in)), algo::Constraint::None)
                  << toString(coll) << " " << s.algorithm->name << " n=" << n << " bytes=" << bytes;
            }
  }
}

}  // namespace
}  // namespace braid::tuning
