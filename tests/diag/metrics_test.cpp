// Metrics and straggler attribution of real communicators (ranks as threads and as processes):
// the BRAID_METRICS_FILE of each rank, parsed by the strict OpenMetrics reader
// (harness/openmetrics.hpp), counts exactly the operations and bytes the ranks ran, and is
// rewritten at the interval; the metrics port answers curl (a real HTTP client) with the same
// exposition; Comm::stragglerReport names a rank that is made late; the flight recorder and the
// timeline carry the verdicts.
#include "core/metrics.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <braid/braid.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "harness/openmetrics.hpp"
#include "harness/ranks.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;

std::string tempDir() {
  char tmpl[] = "/tmp/braid-metrics-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
  return tmpl;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;)
    out.append(buf.data(), n);
  ::pclose(p);
  return out;
}

OmExposition parseOrFail(const std::string& text) {
  try {
    return parseOpenMetrics(text);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << text;
    return {};
  }
}

// Per rank: k allreduces of `count` floats and one broadcast; the file written at destruction
// holds exactly those (plus nothing else), for every world size; every collective is timed with
// BRAID_STRAGGLER=1, every 64th (sequence numbers 0, 64, ...) by default.
TEST(Metrics, FileCountsEveryOperationAndByte) {
  for (int n : {1, 2, 3, 5})
    for (unsigned sample : {1u, 0u}) {
      const std::string dir = tempDir();
      Options o = testOptions();
      o.stragglerSample = sample;
      o.metricsFile = dir + "/m.%r.prom";
      o.metricsInterval = 1h;  // only the file at destruction
      constexpr int kAllreduces = 13;
      constexpr std::size_t kCount = 7;
      runThreads(n, o, [&](Comm& c) {
        std::vector<float> v(kCount, 1.0f);
        for (int i = 0; i < kAllreduces; ++i)
          c.allreduce(v.data(), v.data(), kCount, DataType::Float32, ReduceOp::Sum);
        c.broadcast(v.data(), 1, DataType::Float32, 0);
      });
      for (int r = 0; r < n; ++r) {
        const std::string path = dir + "/m." + std::to_string(r) + ".prom";
        const OmExposition e = parseOrFail(readFile(path));
        EXPECT_EQ(e.sum("braid_operations_total", {{"rank", std::to_string(r)}}), kAllreduces + 1)
            << path;
        EXPECT_EQ(e.sum("braid_operations_total", {{"collective", "allreduce"}}), kAllreduces);
        EXPECT_EQ(e.sum("braid_bytes_total", {{"collective", "allreduce"}}),
                  kAllreduces * kCount * 4);
        EXPECT_EQ(e.sum("braid_bytes_total", {{"collective", "broadcast"}}), 4);
        const int timed = sample == 1 ? kAllreduces + 1 : 1;  // default: only op #0 of 14
        EXPECT_EQ(e.sum("braid_operation_seconds_count"), timed);
        EXPECT_GT(e.sum("braid_operation_seconds_sum"), 0);
        EXPECT_EQ(e.sum("braid_errors_total"), 0);
        if (r == 0 && n > 1) {
          // The last exchange at destruction joined every rank's stamps (all destroyed together).
          EXPECT_EQ(e.sum("braid_straggler_analyzed_total"), timed) << path;
          EXPECT_EQ(e.sum("braid_straggler_last_total"), timed);
          EXPECT_EQ(e.count("braid_peer_wait_seconds_total"), static_cast<std::size_t>(n));
        }
      }
      std::filesystem::remove_all(dir);
    }
}

TEST(Metrics, FileIsRewrittenAtTheIntervalWhileTheCommunicatorLives) {
  const std::string dir = tempDir();
  Options o = testOptions();
  o.metricsFile = dir + "/m.%r.prom";
  o.metricsInterval = 50ms;
  runThreads(2, o, [&](Comm& c) {
    float v = 1;
    for (int i = 0; i < 5; ++i) c.allreduce(&v, &v, 1, DataType::Float32, ReduceOp::Sum);
    c.barrier();
    // Within a few intervals the file shows the 6 operations, before destruction.
    const std::string path = dir + "/m." + std::to_string(c.rank()) + ".prom";
    double seen = 0;
    for (int t = 0; t < 200 && seen < 6; ++t) {
      std::this_thread::sleep_for(10ms);
      const std::string text = readFile(path);
      if (!text.empty()) seen = parseOrFail(text).sum("braid_operations_total");
    }
    EXPECT_EQ(seen, 6) << path;
    c.barrier();
  });
  std::filesystem::remove_all(dir);
}

TEST(Metrics, PortServesTheExpositionToCurl) {
  Options o = testOptions();
  o.metricsPort = 0;  // a free port; the test asks the process's server which one
  runThreads(3, o, [&](Comm& c) {
    float v = 1;
    for (int i = 0; i < 4; ++i) c.allreduce(&v, &v, 1, DataType::Float32, ReduceOp::Sum);
    c.barrier();
    if (c.rank() == 0) {
      std::string error;
      const int port = core::MetricsServer::serve("127.0.0.1", 0, &error);
      ASSERT_GT(port, 0) << error;
      const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
      const std::string body = run("curl -sS --max-time 10 " + url);
      const OmExposition e = parseOrFail(body);
      // One exposition for the three communicators (ranks) of this process.
      for (int r = 0; r < 3; ++r)
        EXPECT_EQ(e.sum("braid_operations_total", {{"rank", std::to_string(r)}}), 5) << body;
      const std::string head = run("curl -sS --max-time 10 -o /dev/null -D - " + url + " 2>&1");
      EXPECT_NE(head.find("HTTP/1.1 200 OK"), std::string::npos) << head;
      EXPECT_NE(head.find("Content-Type: application/openmetrics-text; version=1.0.0"),
                std::string::npos)
          << head;
      const std::string missing =
          run("curl -s --max-time 10 -o /dev/null -w '%{http_code}' "
              "http://127.0.0.1:" +
              std::to_string(port) + "/other");
      EXPECT_EQ(missing, "404");
      const std::string post =
          run("curl -s --max-time 10 -o /dev/null -w '%{http_code}' -X POST " + url);
      EXPECT_EQ(post, "405");
    }
    c.barrier();
  });
  // The last communicator left: the server is gone.
  std::string error;
  const int port = core::MetricsServer::serve("256.0.0.1", 0, &error);
  EXPECT_EQ(port, -1);
  EXPECT_NE(error.find("256.0.0.1"), std::string::npos) << error;
}

TEST(Metrics, ABadAddressIsAWarningNotAFailure) {
  Options o = testOptions();
  o.metricsPort = 0;
  o.metricsAddress = "not-an-address";
  runThreads(2, o, [&](Comm& c) { c.barrier(); });
}

// Ranks as processes: rank `late` sleeps before every collective; the report names it at
// (nearly) every collective, on every world size. The flight recorder dump carries the verdicts.
TEST(Straggler, ReportNamesTheLateRankAsProcesses) {
  for (int n : {2, 3, 4}) {
    const int late = n - 1;
    Options o = testOptions();
    o.stragglerSample = 1;
    runProcesses(n, o, [&](Comm& c) {
      float v = 1;
      for (int i = 0; i < 40; ++i) {
        if (c.rank() == late) std::this_thread::sleep_for(5ms);
        c.allreduce(&v, &v, 1, DataType::Float32, ReduceOp::Sum);
      }
      const std::string report = c.stragglerReport();
      std::smatch m;
      const std::regex re("rank (\\d+) arrived last in (\\d+) of (\\d+)");
      if (!std::regex_search(report, m, re)) throw std::runtime_error("no verdict: " + report);
      // At least 90% here (40 collectives, ranks sharing CPUs with parallel tests); the >= 95%
      // criterion is braid-perf's (PerfStraggler), over more than 1000 collectives.
      if (std::stoi(m[1]) != late || std::stoi(m[3]) != 40 || std::stoi(m[2]) < 36)
        throw std::runtime_error("wrong verdict: " + report);
      if (report.find("late by") == std::string::npos) throw std::runtime_error(report);
    });
  }
}

TEST(Straggler, ReportNeedsTheStampsAndIsTrivialOnOneRank) {
  Options o = testOptions();
  runThreads(2, o, [&](Comm& c) {
    try {
      c.stragglerReport();
      ADD_FAILURE() << "no error without Options::straggler";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("BRAID_STRAGGLER"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(c.rank())), std::string::npos);
    }
  });
  runThreads(1, o,
             [&](Comm& c) { EXPECT_NE(c.stragglerReport().find("1 rank"), std::string::npos); });
}

// Threads: the verdicts reach the timeline (an instant event per analyzed collective). Rank 1
// is late by 20 ms: with 3 ms, a run of the whole suite (ctest -j 2 on 2 CPUs) once named it in 8
// of the 10 (another rank's thread descheduled longer); how accurate the verdicts are is
// ReportNamesTheLateRankAsProcesses's subject.
TEST(Straggler, TimelineCarriesTheVerdicts) {
  const std::string dir = tempDir();
  Options o = testOptions();
  o.stragglerSample = 1;
  o.timeline = dir + "/t.%r.json";
  runThreads(3, o, [&](Comm& c) {
    float v = 1;
    for (int i = 0; i < 10; ++i) {
      if (c.rank() == 1) std::this_thread::sleep_for(20ms);
      c.allreduce(&v, &v, 1, DataType::Float32, ReduceOp::Sum);
    }
    c.stragglerReport();
  });
  for (int r = 0; r < 3; ++r) {
    const std::string text = readFile(dir + "/t." + std::to_string(r) + ".json");
    std::size_t events = 0, named = 0;
    for (std::size_t p = 0; (p = text.find("\"cat\":\"straggler\"", p)) != std::string::npos; ++p)
      ++events;
    for (std::size_t p = 0; (p = text.find("\"last_rank\":1,", p)) != std::string::npos; ++p)
      ++named;
    EXPECT_EQ(events, 10u) << r;
    EXPECT_GE(named, 9u) << r;
    const std::string cmd = "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " + dir +
                            "/t." + std::to_string(r) + ".json";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid::test
