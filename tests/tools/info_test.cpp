// braid-info: version, kernel ISA, every registered algorithm, every documented environment
// variable with its current value, and the option handling.
#include <gtest/gtest.h>

#include <braid/braid.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "algo/algorithm.hpp"
#include "kernels/reduce.hpp"
#include "tool_process.hpp"

namespace braid::tooltest {
namespace {

ProcessResult braidInfo(std::vector<std::string> args, ProcessOptions opts = {}) {
  args.insert(args.begin(), toolPath("braid-info"));
  opts.timeout = std::chrono::seconds(30);
  return runProcess(args, opts);
}

TEST(BraidInfo, PrintsVersionIsaAlgorithmsAndEnvironment) {
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.env.emplace_back("BRAID_CHUNK_SIZE", "1M");
  const auto r = braidInfo({}, opts);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find(std::string("braid ") + braid::version()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string("kernels: ") + kernels::selectedIsa()), std::string::npos)
      << r.out;
  ASSERT_NE(r.out.find("algorithms:"), std::string::npos) << r.out;
  for (const algo::AlgoInfo& a : algo::registry()) {
    EXPECT_NE(r.out.find(a.name), std::string::npos) << "algorithm " << a.name << " missing";
    EXPECT_NE(r.out.find(toString(a.coll)), std::string::npos);
    if (a.summary != nullptr && *a.summary != '\0') {
      EXPECT_NE(r.out.find(a.summary), std::string::npos) << "summary of " << a.name;
      // Deterministic mode's algorithms are marked, the others not.
      EXPECT_EQ(r.out.find(std::string(a.summary) + " [rank-ordered") != std::string::npos,
                a.rankOrdered)
          << a.name;
      // The row's constraints follow on the next line (algo::describeConstraints).
      const auto at = r.out.find(a.summary);
      const auto next = r.out.find('\n', at);
      EXPECT_EQ(r.out.compare(r.out.find_first_not_of(' ', next + 1), 7, "needs: "), 0) << a.name;
      EXPECT_NE(r.out.find("needs: " + algo::describeConstraints(a), next), std::string::npos)
          << a.name;
    }
  }
  for (const EnvVarDoc& d : environmentVariables()) {
    EXPECT_NE(r.out.find(d.name), std::string::npos) << "variable " << d.name << " missing";
    EXPECT_NE(r.out.find(d.meaning), std::string::npos) << "meaning of " << d.name;
  }
  EXPECT_NE(r.out.find("current: BRAID_CHUNK_SIZE=1M"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunk 1048576 B"), std::string::npos) << r.out;
}

// --tune: every decision with the source it came from; a second run reads what the first
// measured; BRAID_LLC_SIZE and BRAID_SHM_CMA_THRESHOLD win; BRAID_TUNE_CACHE=off keeps nothing;
// a corrupt file is measured over with a warning. A file of the test's own, never ~/.cache.
TEST(BraidInfo, TunePrintsEveryDecisionAndItsSource) {
  char dirTemplate[] = "/tmp/braid-info-tune-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  const std::string path = std::string(dirTemplate) + "/machine.tune";
  auto withCache = [](const std::string& cache) {
    ProcessOptions o;
    o.env = cleanLaunchEnv();
    o.env.emplace_back("BRAID_TUNE_CACHE", cache);
    o.env.emplace_back("BRAID_TUNE_MAX_BUSY", "100");  // kept however busy the test machine is
    return o;
  };
  ProcessOptions opts = withCache(path);
  for (const char* v : {"BRAID_LLC_SIZE", "BRAID_SHM_CMA_THRESHOLD", "BRAID_SHM_CMA_DISABLE",
                        "BRAID_CHUNK_SIZE", "BRAID_SHM_CHUNK_SIZE"})
    opts.env.emplace_back(v, std::nullopt);
  auto r = braidInfo({"--tune"}, opts);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("profile file: " + path + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  streaming threshold: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  effective cache: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    from: measured now in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", kept in " + path), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  chunk size (message algorithms): 256 KiB\n    from: default"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  shm single-copy threshold (one host): at creation"), std::string::npos)
      << r.out;
  r = braidInfo({"--tune"}, opts);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("    from: cached in " + path + " (measured 20"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("measured now"), std::string::npos) << r.out;

  ProcessOptions over = withCache(path);
  over.env.emplace_back("BRAID_LLC_SIZE", "12M");
  over.env.emplace_back("BRAID_SHM_CMA_THRESHOLD", "128K");
  over.env.emplace_back("BRAID_CHUNK_SIZE", "1M");
  r = braidInfo({"--tune"}, over);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("streaming threshold: 6 MiB\n    from: BRAID_LLC_SIZE=12 MiB"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("128 KiB\n    from: BRAID_SHM_CMA_THRESHOLD"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunk size (message algorithms): 1 MiB\n    from: BRAID_CHUNK_SIZE"),
            std::string::npos)
      << r.out;

  ProcessOptions off = withCache("off");
  r = braidInfo({"--tune"}, off);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("profile file: none (BRAID_TUNE_CACHE=off)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not kept (BRAID_TUNE_CACHE=off)"), std::string::npos) << r.out;

  { std::ofstream(path) << "not a profile\n"; }
  r = braidInfo({"--tune"}, opts);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("warning: BRAID_TUNE_CACHE " + path + " is corrupt (line 1: "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("    from: measured now in "), std::string::npos) << r.out;
  std::filesystem::remove_all(dirTemplate);
}

TEST(BraidInfo, EnvOptionPrintsOnlyTheVariables) {
  const auto r = braidInfo({"--env"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_EQ(r.out.find("algorithms:"), std::string::npos) << r.out;
  for (const EnvVarDoc& d : environmentVariables())
    EXPECT_NE(r.out.find(d.name), std::string::npos) << "variable " << d.name << " missing";
}

TEST(BraidInfo, HelpAndUnknownOptions) {
  auto r = braidInfo({"--help"});
  EXPECT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("usage: braid-info"), std::string::npos);
  r = braidInfo({"--bogus"});
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
}

TEST(BraidInfo, PathsReportsHowEveryPairOfRanksTalks) {
  for (const char* disable : {"0", "1"}) {
    ProcessOptions opts;
    opts.env = cleanLaunchEnv();
    opts.env.emplace_back("BRAID_SHM_DISABLE", disable);
    opts.timeout = std::chrono::seconds(60);
    const auto r = runProcess({toolPath("braid-run"), "-n", "3", "--timeout", "50", "--",
                               toolPath("braid-info"), "--paths"},
                              opts);
    ASSERT_EQ(r.exitCode(), 0) << describe(r);
    EXPECT_NE(r.out.find("self"), std::string::npos) << r.out;
    // Three ranks of one host: every off-diagonal pair uses shared memory unless disabled.
    const std::string path = std::string(disable) == "1" ? "tcp" : "shm";
    std::size_t pairs = 0;
    for (std::size_t at = r.out.find(path); at != std::string::npos; at = r.out.find(path, at + 1))
      ++pairs;
    EXPECT_EQ(pairs, 6u) << r.out;
    // Over shared memory: from which size collectives and messages go single copy, and why.
    const bool shm = std::string(disable) == "0";
    EXPECT_EQ(r.out.find("single copy over shared memory (rank 0): ") != std::string::npos, shm)
        << r.out;
  }
}

}  // namespace
}  // namespace braid::tooltest
