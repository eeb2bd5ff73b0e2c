// The collective sweep over the real communicator (TCP transport, ranks as threads): every
// collective x world size {1,2,3,4,5,7,8} x count {0, 1, 7, 13, more than many chunks} x dtype x
// op x in-place, with each allreduce algorithm forced in turn, a tiny chunk (64 B) so
// pipelining runs, and every element compared with an independently computed expectation.
#include <gtest/gtest.h>

#include "harness/checks.hpp"
#include "harness/ranks.hpp"

#include <string>
#include <tuple>

namespace braid::test {
namespace {

class CollectiveSweep : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(CollectiveSweep, EveryCollectiveDtypeOpCount) {
  const auto [n, algo] = GetParam();
  runThreads(n, testOptions(algo), [&](Comm& c) { sweepCollectives(c); });
}

std::string sweepName(const ::testing::TestParamInfo<std::tuple<int, std::string>>& info) {
  const auto& [n, algo] = info.param;
  return "n" + std::to_string(n) + "_" + (algo.empty() ? std::string("auto") : algo);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectiveSweep,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 7, 8),
                                            ::testing::Values("", "ring", "recursive_doubling")),
                         sweepName);

// The added dtypes and ops (bool, int16, unsigned, float8, complex; bitwise, PremulSum with
// per-rank factors, Avg) on the real communicator: a focused subset of world sizes and counts
// (harness/checks.hpp, kExtendedCounts), auto selection and the ring forced; and every
// unsupported combination rejected on every rank.
class ExtendedSweep : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(ExtendedSweep, AddedDtypesAndOps) {
  const auto [n, algo] = GetParam();
  runThreads(n, testOptions(algo), [&](Comm& c) {
    checkExtendedReductions(c);
    checkUnsupportedReductions(c);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ExtendedSweep,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8),
                                            ::testing::Values("", "ring")),
                         sweepName);

TEST(ExtendedDeterministic, AddedDtypesAndOpsInRankOrder) {
  Options o = testOptions();
  o.deterministic = true;
  runThreads(3, o, [&](Comm& c) { checkExtendedReductions(c); });
}

}  // namespace
}  // namespace braid::test
