// The rule grammar shared by BRAID_ALGO, tuning files and tests.
#include <gtest/gtest.h>

#include <braid/error.hpp>

#include "tuning/rules.hpp"

namespace braid::tuning {
namespace {

SelectionInputs in(Collective c, std::size_t bytes) { return {c, bytes, 4, 64 * 1024}; }

TEST(Rules, DefaultPolicyPicksLatencyAlgorithmForSmallAllreduce) {
  std::vector<Rule> none;
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Allreduce, 8)), "recursive_doubling");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Allreduce, 64 * 1024 + 1)), "ring");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Broadcast, 8)), "binomial_tree");
  EXPECT_EQ(selectAlgorithm(none, in(Collective::Barrier, 0)), "dissemination");
}

// One host (a SharedMemoryGroup): shm_ll up to one 48-byte line (allgather: per rank; every
// barrier), shm_direct above and for the collectives without a line algorithm; rules still win.
TEST(Rules, DefaultPolicyOnOneHost) {
  const std::vector<Rule> none;
  auto host = [](Collective c, std::size_t bytes, int n = 4) {
    return SelectionInputs{c, bytes, n, 64 * 1024, true};
  };
  for (Collective c : {Collective::Allreduce, Collective::Broadcast, Collective::Reduce}) {
    EXPECT_EQ(selectAlgorithm(none, host(c, 1)), "shm_ll");
    EXPECT_EQ(selectAlgorithm(none, host(c, 48)), "shm_ll");
    EXPECT_EQ(selectAlgorithm(none, host(c, 49)), "shm_direct");
  }
  EXPECT_EQ(selectAlgorithm(none, host(Collective::Allgather, 4 * 48)), "shm_ll");
  EXPECT_EQ(selectAlgorithm(none, host(Collective::Allgather, 4 * 48 + 1)), "shm_direct");
  EXPECT_EQ(selectAlgorithm(none, host(Collective::Barrier, 0)), "shm_ll");
  for (Collective c : {Collective::ReduceScatter, Collective::ReduceScatterv, Collective::Alltoall,
                       Collective::Alltoallv, Collective::Allgatherv})
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

}  // namespace
}  // namespace braid::tuning
