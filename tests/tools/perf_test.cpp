// braid-perf under braid-run: every collective on 2 and 3 ranks with verification, the table
// rows (sizes, counts rounded to multiples of nranks, no wrong elements), the --json records,
// every dtype x op, a single process without a launcher, and the exit codes of failures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "tool_process.hpp"

namespace braid::tooltest {
namespace {

/// braid-run -n N --timeout ... braid-perf ARGS, itself bounded.
ProcessResult perfUnderRun(
    int nranks, std::vector<std::string> perfArgs, int timeoutS = 120,
    std::vector<std::pair<std::string, std::optional<std::string>>> extraEnv = {}) {
  std::vector<std::string> argv = {toolPath("braid-run"),    "-n",
                                   std::to_string(nranks),   "--timeout",
                                   std::to_string(timeoutS), toolPath("braid-perf")};
  argv.insert(argv.end(), perfArgs.begin(), perfArgs.end());
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.env.insert(opts.env.end(), extraEnv.begin(), extraEnv.end());
  opts.timeout = std::chrono::seconds(timeoutS + 30);
  return runProcess(argv, opts);
}

struct Row {
  std::size_t size, count;
  std::string type, redop;
  int root;
  std::string algo;
  double timeUs, algbw, busbw;
  std::string wrong;
};

/// The table rows rank 0 printed ("[0]   size count type redop root algo time algbw busbw
/// #wrong").
std::vector<Row> tableRows(const ProcessResult& r) {
  static const std::regex row(
      R"(\[0\]\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+))");
  std::vector<Row> rows;
  for (const std::string& line : r.outLines()) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    rows.push_back(Row{std::stoul(m[1]), std::stoul(m[2]), m[3], m[4], std::stoi(m[5]), m[6],
                       std::stod(m[7]), std::stod(m[8]), std::stod(m[9]), m[10]});
  }
  return rows;
}

struct CollectiveCase {
  const char* name;
  bool perRankSplit;
  bool reduces;
  bool rooted;
};
constexpr CollectiveCase kCollectives[] = {
    {"allreduce", false, true, false},    {"allgather", true, false, false},
    {"reducescatter", true, true, false}, {"broadcast", false, false, true},
    {"reduce", false, true, true},        {"alltoall", true, false, false},
    {"gather", true, false, true},        {"scatter", true, false, true},
    {"sendrecv", false, false, false},
};

class PerfEveryCollective : public ::testing::TestWithParam<int> {};

TEST_P(PerfEveryCollective, RunsVerifiesAndPrintsTheTable) {
  const int n = GetParam();
  const std::vector<std::size_t> sizes = {8, 32, 128, 512, 2048, 8192, 32768, 65536};
  for (const CollectiveCase& c : kCollectives) {
    SCOPED_TRACE(std::string(c.name) + " on " + std::to_string(n) + " ranks");
    const std::string root = std::to_string(n - 1);  // a root other than 0
    const auto r = perfUnderRun(n, {c.name, "-b", "8", "-e", "64K", "-f", "4", "-c", "1", "-n", "2",
                                    "-w", "1", "--reps", "3", "-r", root});
    ASSERT_EQ(r.exitCode(), 0) << describe(r);
    EXPECT_NE(r.out.find("nranks " + std::to_string(n)), std::string::npos) << describe(r);
    EXPECT_NE(r.out.find("wrong elements: 0"), std::string::npos) << describe(r);
    const auto rows = tableRows(r);
    ASSERT_EQ(rows.size(), sizes.size()) << describe(r);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::size_t count = sizes[i] / 4;
      if (c.perRankSplit) count = count / n * n;
      EXPECT_EQ(rows[i].count, count) << describe(r);
      EXPECT_EQ(rows[i].size, count * 4) << describe(r);
      EXPECT_EQ(rows[i].type, "fp32");
      EXPECT_EQ(rows[i].redop, c.reduces ? "sum" : "none");
      EXPECT_EQ(rows[i].root, c.rooted ? n - 1 : -1);
      EXPECT_EQ(rows[i].wrong, "0") << describe(r);
      EXPECT_GT(rows[i].timeUs, 0.0);
      EXPECT_FALSE(rows[i].algo.empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, PerfEveryCollective, ::testing::Values(2, 3));

/// A flat JSON object of strings, numbers and null: key -> raw value text. Fails on anything
/// else, so a malformed record is caught.
bool parseFlatJson(const std::string& text, std::map<std::string, std::string>& out) {
  std::size_t i = 0;
  auto ws = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  auto str = [&](std::string& s) {
    if (i >= text.size() || text[i] != '"') return false;
    for (++i; i < text.size() && text[i] != '"'; ++i) {
      if (text[i] == '\\') ++i;
      if (i < text.size()) s += text[i];
    }
    if (i >= text.size()) return false;
    ++i;
    return true;
  };
  ws();
  if (i >= text.size() || text[i++] != '{') return false;
  for (;;) {
    ws();
    std::string key, value;
    if (!str(key)) return false;
    ws();
    if (i >= text.size() || text[i++] != ':') return false;
    ws();
    if (i < text.size() && text[i] == '"') {
      if (!str(value)) return false;
    } else {
      static const std::regex number(R"(-?\d+(\.\d+)?([eE][-+]?\d+)?|null)");
      std::size_t end = text.find_first_of(",}", i);
      if (end == std::string::npos) return false;
      value = text.substr(i, end - i);
      if (!std::regex_match(value, number)) return false;
      i = end;
    }
    out[key] = value;
    ws();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == '}') {
      ++i;
      ws();
      return i == text.size();
    }
    return false;
  }
}

TEST(Perf, JsonRecordsHaveEveryKey) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("braid_perf_test_" + std::to_string(::getpid()) + ".json");
  const auto r = perfUnderRun(3, {"allreduce,allgather", "-b", "8", "-e", "4K", "-f", "8", "-n",
                                  "2", "-w", "1", "--reps", "3", "--json", path.string()});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  std::ifstream in(path);
  std::vector<std::map<std::string, std::string>> records;
  for (std::string line; std::getline(in, line);) {
    std::map<std::string, std::string> rec;
    ASSERT_TRUE(parseFlatJson(line, rec)) << "not a JSON object: " << line;
    records.push_back(rec);
  }
  std::filesystem::remove(path);
  ASSERT_EQ(records.size(), 2u * 4u);  // sizes 8, 64, 512, 4096 for each collective
  for (const auto& rec : records) {
    for (const char* key :
         {"collective", "size", "count", "dtype", "redop", "root", "algo", "time_us", "algbw",
          "busbw", "wrong", "nranks", "connections", "init_ms"})
      EXPECT_TRUE(rec.count(key)) << "missing key " << key;
    EXPECT_EQ(rec.at("nranks"), "3");
    // One host: every peer through shared memory, no socket.
    EXPECT_EQ(rec.at("connections"), "0");
    EXPECT_GT(std::stod(rec.at("init_ms")), 0.0);
    EXPECT_EQ(rec.at("wrong"), "0");
    EXPECT_EQ(rec.at("dtype"), "fp32");
  }
  EXPECT_EQ(records.front().at("collective"), "allreduce");
  EXPECT_EQ(records.back().at("collective"), "allgather");
  EXPECT_EQ(records.back().at("size"), "4092");  // 1024 floats rounded down to a multiple of 3
}

std::vector<std::map<std::string, std::string>> readJsonRecords(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::map<std::string, std::string>> records;
  for (std::string line; std::getline(in, line);) {
    std::map<std::string, std::string> rec;
    EXPECT_TRUE(parseFlatJson(line, rec)) << "not a JSON object: " << line;
    records.push_back(rec);
  }
  std::filesystem::remove(path);
  return records;
}

// Over TCP (shared memory off) the full mesh of 4 ranks is 3 sockets per rank; the count is
// the transport's own, independent of the collective.
TEST(Perf, JsonCountsTcpConnections) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("braid_perf_conn_" + std::to_string(::getpid()) + ".json");
  const auto r = perfUnderRun(4,
                              {"allreduce", "-b", "1K", "-e", "4K", "-f", "4", "-n", "1", "-w", "0",
                               "--reps", "1", "--json", path.string()},
                              120, {{"BRAID_SHM_DISABLE", "1"}, {"BRAID_CONNECT", "eager"}});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  const auto records = readJsonRecords(path);
  ASSERT_EQ(records.size(), 2u);
  for (const auto& rec : records) {
    EXPECT_EQ(rec.at("connections"), "3");
    EXPECT_GT(std::stod(rec.at("init_ms")), 0.0);
  }
}

TEST(Perf, EveryDtypeAndOpVerifies) {
  const auto r =
      perfUnderRun(3, {"allreduce,reducescatter,reduce", "-d", "all", "-o", "all", "-b", "4", "-e",
                       "6K", "-f", "6", "-n", "1", "-w", "0", "--reps", "1", "-r", "2"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("wrong elements: 0"), std::string::npos) << describe(r);
  // 3 collectives x 123 supported (dtype, op) pairs x sizes {4, 24, 144, 864, 5184, 6144}. The
  // pairs: 8 integer types x 9 ops, 4 floats (fp16, bf16, fp32, fp64) and 2 float8 x 6 (no
  // bitwise), bool x 7 (no avg, premul_sum), 2 complex x 4 (sum, prod, avg, premul_sum); the
  // other 30 pairs are skipped with a note.
  EXPECT_EQ(tableRows(r).size(), 3u * 123u * 6u) << describe(r);
  EXPECT_NE(r.out.find("band is not supported for fp32, skipped"), std::string::npos)
      << describe(r);
}

TEST(Perf, MovementCollectivesWithEveryDtype) {
  const auto r =
      perfUnderRun(2, {"allgather,broadcast,alltoall,gather,scatter,sendrecv", "-d", "all", "-b",
                       "1", "-e", "3K", "-f", "7", "-n", "1", "-w", "0", "--reps", "1", "-r", "1"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("wrong elements: 0"), std::string::npos) << describe(r);
}

TEST(Perf, SingleProcessWithoutALauncher) {
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.timeout = std::chrono::seconds(60);
  const auto r = runProcess({toolPath("braid-perf"), "all", "-b", "8", "-e", "1K", "-f", "8", "-n",
                             "2", "-w", "1", "--reps", "1"},
                            opts);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("nranks 1"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("wrong elements: 0"), std::string::npos) << describe(r);
}

TEST(Perf, ForcedAlgorithmShowsInTheAlgoColumn) {
  const auto r = perfUnderRun(2, {"allreduce", "--algo", "ring", "-b", "1K", "-e", "1K", "-n", "1",
                                  "-w", "0", "--reps", "1"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  const auto rows = tableRows(r);
  ASSERT_EQ(rows.size(), 1u) << describe(r);
  EXPECT_EQ(rows[0].algo, "ring");
}

// --algo forces: a size the algorithm cannot run (shm_ll: one 1008-byte line) fails naming the
// algorithm and the constraint, instead of measuring another algorithm under its name.
TEST(Perf, ForcedAlgorithmThatCannotRunIsAnError) {
  auto r = perfUnderRun(2,
                        {"allreduce", "--algo", "shm_ll", "-b", "1K", "-e", "1K", "-n", "1", "-w",
                         "0", "--reps", "1"},
                        60);
  EXPECT_NE(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.err.find("'shm_ll' cannot run allreduce of 1024 bytes"), std::string::npos)
      << describe(r);
  EXPECT_NE(r.err.find("at most 1008 bytes"), std::string::npos) << describe(r);
  r = perfUnderRun(2, {"allreduce", "--algo", "shm_ll", "-b", "1000", "-e", "1000", "-n", "1", "-w",
                       "0", "--reps", "1"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  const auto rows = tableRows(r);
  ASSERT_EQ(rows.size(), 1u) << describe(r);
  EXPECT_EQ(rows[0].algo, "shm_ll");
}

TEST(Perf, FailuresHaveNonZeroExitCodes) {
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.timeout = std::chrono::seconds(30);
  auto r = runProcess({toolPath("braid-perf"), "nosuchcollective"}, opts);
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  r = runProcess({toolPath("braid-perf"), "allreduce", "-b", "1Q"}, opts);
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  r = runProcess({toolPath("braid-perf"), "--help"}, opts);
  EXPECT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("usage: braid-perf"), std::string::npos);
  // A root outside the communicator.
  r = perfUnderRun(2, {"broadcast", "-r", "5", "-b", "8", "-e", "8"}, 60);
  EXPECT_NE(r.exitCode(), 0) << describe(r);
  // An algorithm braid does not have.
  r = perfUnderRun(2, {"allreduce", "--algo", "no_such_algorithm", "-b", "8", "-e", "8"}, 60);
  EXPECT_NE(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.err.find("no_such_algorithm"), std::string::npos) << describe(r);
}

// Issue 25 (3): sizes near 2^64 used to corrupt the heap (the page rounding of the buffers
// wrapped to 0) or end in std::bad_alloc; each is a usage error now, exit 2, naming the option,
// before anything is allocated. 1000000G (about 1 PiB) is more memory than any host has.
TEST(Perf, SizesThatOverflowOrCannotBeAllocatedAreUsageErrors) {
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.timeout = std::chrono::seconds(30);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-b", "8", "-e", "18446744073709551615"}, "-e 18446744073709551615"},
      {{"-b", "18446744073709551615", "-e", "18446744073709551615"}, "-b 18446744073709551615"},
      {{"-b", "8", "-e", "17179869183G"}, "-e "},
      {{"-b", "8", "-e", "9223372036854775808"}, "-e 9223372036854775808"},
      {{"-b", "8", "-e", "1000000G"}, "-e 1073741824000000"},
      {{"-b", "1000000G", "-e", "1000000G"}, "-e 1073741824000000"},
  };
  for (const auto& [sizes, named] : cases) {
    std::vector<std::string> argv = {
        toolPath("braid-perf"), "allreduce", "-n", "1", "-w", "0", "--reps", "1"};
    argv.insert(argv.end(), sizes.begin(), sizes.end());
    const auto r = runProcess(argv, opts);
    EXPECT_EQ(r.exitCode(), 2) << describe(r);
    EXPECT_NE(r.err.find(named), std::string::npos) << describe(r);
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << describe(r);
  }
}

}  // namespace
}  // namespace braid::tooltest
