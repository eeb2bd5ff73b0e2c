// The rule grammar shared by BRAID_ALGO, tuning files and tests.
#include "tuning/rules.hpp"

#include <gtest/gtest.h>

#include <braid/error.hpp>

#include "algo/algorithm.hpp"
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
      EXPECT_EQ(selectAlgorithm(none, detIn(Collective::ReduceScatterv, bytes, shm)),
                "rank_ordered");
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

}  // namespace
}  // namespace braid::tuning
