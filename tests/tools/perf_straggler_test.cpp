// braid-perf --straggler RANK:US under braid-run (ranks as processes): the injected straggler is
// named at >= 95% of the analyzed collectives, in braid-perf's report, in rank 0's
// BRAID_METRICS_FILE (strict OpenMetrics reader) and in the BRAID_DEBUG=INFO summary at
// destruction; bad --straggler values are usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "harness/openmetrics.hpp"
#include "tool_process.hpp"

namespace braid::tooltest {
namespace {

ProcessResult perfUnderRun(int nranks, std::vector<std::string> perfArgs,
                           std::vector<std::pair<std::string, std::optional<std::string>>> env = {},
                           int timeoutS = 120) {
  std::vector<std::string> argv = {toolPath("braid-run"),    "-n",
                                   std::to_string(nranks),   "--timeout",
                                   std::to_string(timeoutS), toolPath("braid-perf")};
  argv.insert(argv.end(), perfArgs.begin(), perfArgs.end());
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.env.insert(opts.env.end(), env.begin(), env.end());
  opts.timeout = std::chrono::seconds(timeoutS + 30);
  return runProcess(argv, opts);
}

struct Verdict {
  int rank = -1;
  long last = 0, of = 0;
};

/// The report's first (most frequent) line.
Verdict topVerdict(const std::string& text) {
  std::smatch m;
  static const std::regex re("rank (\\d+) arrived last in (\\d+) of (\\d+)");
  Verdict v;
  if (std::regex_search(text, m, re)) v = {std::stoi(m[1]), std::stol(m[2]), std::stol(m[3])};
  return v;
}

TEST(PerfStraggler, NamesTheInjectedRankInAtLeast95PercentOfOperations) {
  char tmpl[] = "/tmp/braid-perf-straggler-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  for (int late : {2, 0}) {
    const ProcessResult r =
        perfUnderRun(4,
                     {"allreduce,broadcast", "-b", "8", "-e", "64K", "-n", "20", "--reps", "3",
                      "--straggler", std::to_string(late) + ":5000"},
                     {{"BRAID_METRICS_FILE", dir + "/m.%r.prom"}, {"BRAID_DEBUG", "INFO"}});
    ASSERT_EQ(r.exitCode(), 0) << r.out << r.err;
    EXPECT_NE(r.out.find("# injected: rank " + std::to_string(late) +
                         " sleeps 5000 us before every operation"),
              std::string::npos)
        << r.out;
    // The report, as braid-perf prints it at the end.
    const std::string report = r.out.substr(r.out.find("# straggler report"));
    const Verdict v = topVerdict(report);
    EXPECT_EQ(v.rank, late) << report;
    // 2 collectives x 8 sizes x (5 warmup + 3 x (20 + 2) + 2 check) = 1168 collectives.
    EXPECT_GE(v.of, 1100) << report;
    EXPECT_GE(static_cast<double>(v.last), 0.95 * static_cast<double>(v.of)) << report;
    EXPECT_NE(report.find("late by"), std::string::npos);
    // Rank 0's metrics file, written at destruction after the last exchange.
    std::ifstream in(dir + "/m.0.prom");
    std::stringstream ss;
    ss << in.rdbuf();
    test::OmExposition e;
    try {
      e = test::parseOpenMetrics(ss.str());
    } catch (const std::exception& ex) {
      FAIL() << ex.what() << "\n" << ss.str();
    }
    EXPECT_EQ(e.sum("braid_straggler_rank"), late) << ss.str();
    const double analyzed = e.sum("braid_straggler_analyzed_total");
    EXPECT_GE(analyzed, static_cast<double>(v.of));
    EXPECT_GE(e.sum("braid_straggler_last_total", {{"last_rank", std::to_string(late)}}),
              0.95 * analyzed);
    EXPECT_GT(e.sum("braid_straggler_lateness_seconds"), 0.003);
    EXPECT_GT(e.sum("braid_operations_total", {{"collective", "broadcast"}}), 0);
    // The summary at destruction (BRAID_DEBUG=INFO), logged by rank 0.
    const std::size_t at = r.err.find("straggler report, communicator 0, 4 ranks");
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(topVerdict(r.err.substr(at)).rank, late) << r.err.substr(at);
  }
  std::filesystem::remove_all(dir);
}

TEST(PerfStraggler, BadValuesAreUsageErrors) {
  for (const char* bad : {"2", "x:10", "1:-5", "1:"}) {
    ProcessOptions opts;
    opts.env = cleanLaunchEnv();
    const ProcessResult r =
        runProcess({toolPath("braid-perf"), "allreduce", "--straggler", bad}, opts);
    EXPECT_EQ(r.exitCode(), 2) << bad << r.err;
    EXPECT_NE(r.err.find("--straggler"), std::string::npos) << r.err;
  }
  const ProcessResult r =
      perfUnderRun(2, {"allreduce", "-b", "8", "-e", "8", "--straggler", "2:10"});
  EXPECT_EQ(r.exitCode(), 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--straggler 2: the rank must be below nranks (2)"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace braid::tooltest
