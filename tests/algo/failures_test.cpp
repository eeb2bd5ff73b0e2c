// Algorithms fail fast and consistently instead of hanging: ranks that disagree on the tag or
// the operation get Error(Mismatch) (or PeerLost from a rank that already failed), a missing
// rank gives Timeout, too little scratch gives InvalidArgument on every rank. Also the registry.
#include <gtest/gtest.h>

#include <braid/error.hpp>
#include <set>
#include <string>
#include <vector>

#include "rank_threads.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;

std::optional<ErrorCode> codeOf(const std::exception_ptr& e) {
  if (!e) return std::nullopt;
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    return x.code();
  } catch (...) {
    return ErrorCode::Internal;
  }
}

const algo::AlgoInfo& find(Collective c, const char* name) {
  const algo::AlgoInfo* a = algo::findAlgorithm(c, name);
  if (a == nullptr) throw std::runtime_error(std::string("no algorithm ") + name);
  return *a;
}

TEST(Registry, HasTheCoreAlgorithms) {
  const std::pair<Collective, const char*> expected[] = {
      {Collective::Allreduce, "ring"},        {Collective::Allreduce, "recursive_doubling"},
      {Collective::Reduce, "binomial_tree"},  {Collective::Broadcast, "binomial_tree"},
      {Collective::Allgather, "ring"},        {Collective::Allgatherv, "ring"},
      {Collective::ReduceScatter, "ring"},    {Collective::ReduceScatterv, "ring"},
      {Collective::Gather, "linear"},         {Collective::Scatter, "linear"},
      {Collective::Alltoall, "pairwise"},     {Collective::Alltoallv, "pairwise"},
      {Collective::Barrier, "dissemination"},
  };
  for (auto [c, name] : expected) {
    const algo::AlgoInfo* a = algo::findAlgorithm(c, name);
    ASSERT_NE(a, nullptr) << toString(c) << " " << name;
    EXPECT_EQ(a->coll, c);
    EXPECT_NE(a->run, nullptr);
    EXPECT_GT(std::string(a->summary).size(), 10u);
  }
  EXPECT_EQ(algo::findAlgorithm(Collective::Allreduce, "no_such"), nullptr);
  EXPECT_EQ(algo::findAlgorithm(Collective::Broadcast, "ring"), nullptr);
  EXPECT_EQ(algo::findAlgorithm(Collective::Send, "ring"), nullptr);
  std::set<std::pair<int, std::string>> seen;
  for (const algo::AlgoInfo& a : algo::registry())
    EXPECT_TRUE(seen.insert({static_cast<int>(a.coll), a.name}).second) << "duplicate " << a.name;
}

struct Failure {
  std::vector<std::exception_ptr> errors;
  std::chrono::steady_clock::duration took;
};

Failure runWithTags(const algo::AlgoInfo& algo, int n, std::vector<std::uint64_t> tags,
                    std::size_t count = 1000) {
  RankSetup setup;
  setup.size = n;
  setup.tags = std::move(tags);
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = runRanks(setup, [&](algo::Context& ctx) {
    std::vector<float> in(count * static_cast<std::size_t>(n), 1.0f), out(in.size());
    algo::CollArgs a;
    a.coll = algo.coll;
    a.send = in.data();
    a.recv = out.data();
    a.count = count;
    algo.run(ctx, a);
  });
  return {std::move(errors), std::chrono::steady_clock::now() - t0};
}

TEST(Failures, MismatchedTagGivesMismatchNotAHang) {
  for (const algo::AlgoInfo& algo : algo::registry()) {
    if (algo.coll == Collective::Alltoallv || algo.coll == Collective::Allgatherv ||
        algo.coll == Collective::ReduceScatterv)
      continue;  // need counts; covered by the same code paths as their fixed-size forms
    for (int n : {2, 4, 5}) {
      // Rows that cannot run over inproc ranks without a topology (shm_*, hierarchical) throw
      // their constraint instead (tests/algo/sweep_test.cpp, RowsThatCannotRunThrow).
      if (algo::cannotRun(algo, {n, 0, false, nullptr, false}) != algo::Constraint::None) continue;
      SCOPED_TRACE(std::string(toString(algo.coll)) + " " + algo.name + " n=" + std::to_string(n));
      std::vector<std::uint64_t> tags(static_cast<std::size_t>(n), 100);
      tags[1] = 101;
      Failure f = runWithTags(algo, n, tags);
      EXPECT_LT(f.took, 5s);
      int mismatches = 0;
      for (int r = 0; r < n; ++r) {
        auto code = codeOf(f.errors[static_cast<std::size_t>(r)]);
        if (code == ErrorCode::Mismatch) ++mismatches;
        // A rank that never talks to rank 1 may finish (e.g. gather leaves); any rank that
        // failed must say why precisely.
        if (code) {
          EXPECT_TRUE(*code == ErrorCode::Mismatch || *code == ErrorCode::PeerLost)
              << "rank " << r << ": " << errorText(f.errors[static_cast<std::size_t>(r)]);
        }
      }
      EXPECT_GE(mismatches, 1);
    }
  }
}

TEST(Failures, DifferentCollectivesOnDifferentRanksGiveMismatch) {
  const auto& ring = find(Collective::Allreduce, "ring");
  const auto& barrier = find(Collective::Barrier, "dissemination");
  RankSetup setup;
  setup.size = 4;
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = runRanks(setup, [&](algo::Context& ctx) {
    std::vector<float> buf(100, 1.0f);
    algo::CollArgs a;
    a.send = buf.data();
    a.recv = buf.data();
    a.count = buf.size();
    if (ctx.rank == 2)
      barrier.run(ctx, a);
    else
      ring.run(ctx, a);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  int mismatches = 0;
  for (auto& e : errors) mismatches += codeOf(e) == ErrorCode::Mismatch;
  EXPECT_GE(mismatches, 1);
}

TEST(Failures, AMissingRankGivesTimeoutOrPeerLost) {
  const auto& ring = find(Collective::Allreduce, "ring");
  RankSetup setup;
  setup.size = 4;
  setup.deadline = 300ms;
  auto errors = runRanks(setup, [&](algo::Context& ctx) {
    if (ctx.rank == 3) return;  // never joins
    std::vector<float> buf(100, 1.0f);
    algo::CollArgs a;
    a.send = buf.data();
    a.recv = buf.data();
    a.count = buf.size();
    ring.run(ctx, a);
  });
  int timeouts = 0;
  for (int r = 0; r < 3; ++r) {
    auto code = codeOf(errors[static_cast<std::size_t>(r)]);
    ASSERT_TRUE(code.has_value()) << "rank " << r << " finished without rank 3";
    EXPECT_TRUE(*code == ErrorCode::Timeout || *code == ErrorCode::PeerLost)
        << errorText(errors[static_cast<std::size_t>(r)]);
    timeouts += *code == ErrorCode::Timeout;
  }
  EXPECT_GE(timeouts, 1);
}

TEST(Failures, TooLittleScratchIsAnInvalidArgumentOnEveryRank) {
  const auto& ring = find(Collective::Allreduce, "ring");
  RankSetup setup;
  setup.size = 3;
  setup.scratchBytes = 8;  // four fp32 slots need 16 bytes
  auto errors = runRanks(setup, [&](algo::Context& ctx) {
    std::vector<float> buf(100, 1.0f);
    algo::CollArgs a;
    a.send = buf.data();
    a.recv = buf.data();
    a.count = buf.size();
    ring.run(ctx, a);
  });
  for (auto& e : errors) EXPECT_EQ(codeOf(e), ErrorCode::InvalidArgument) << errorText(e);
}

}  // namespace
}  // namespace braid::test
