// braid-perf allreduce --compress under braid-run: each method prints wire bytes below the
// uncompressed ones (and the documented volumes), a relative error in the range its bound allows,
// and the same numbers as --json fields; misuse is a usage error (exit 2).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tool_process.hpp"

namespace braid::tooltest {
namespace {

ProcessResult perfUnderRun(int nranks, std::vector<std::string> perfArgs, int timeoutS = 180) {
  std::vector<std::string> argv = {toolPath("braid-run"),    "-n",
                                   std::to_string(nranks),   "--timeout",
                                   std::to_string(timeoutS), toolPath("braid-perf")};
  argv.insert(argv.end(), perfArgs.begin(), perfArgs.end());
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.timeout = std::chrono::seconds(timeoutS + 30);
  return runProcess(argv, opts);
}

/// The value of "key" in a flat JSON object line ("" when missing), quotes stripped.
std::string field(const std::string& line, const std::string& key) {
  const std::regex re("\"" + key + "\":(\"[^\"]*\"|[^,}]+)");
  std::smatch m;
  if (!std::regex_search(line, m, re)) return "";
  std::string v = m[1];
  if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

struct MethodCase {
  const char* spec;
  double maxRelErr;  // what the method's bound allows on braid-perf's data
  double minRelErr;  // a lossy method cannot be exact on random data
};

TEST(PerfCompress, EveryMethodReportsWireBytesAndError) {
  // int8: per element at most sum_r m_r/127 with similar magnitudes: far below 0.05 in 2-norm.
  // top-k / random-k at 1/8: the dropped mass of random data, below 1. sign: below 1.
  const MethodCase cases[] = {{"int8", 0.05, 1e-6},
                              {"topk:0.125", 1.0, 0.1},
                              {"randk:0.125", 1.0, 0.5},
                              {"sign", 1.0, 0.1},
                              {"none", 1e-6, 0.0}};
  const int n = 3;
  for (const MethodCase& c : cases) {
    SCOPED_TRACE(c.spec);
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() /
        ("braid_perf_compress_" + std::to_string(::getpid()) + ".json");
    const auto r =
        perfUnderRun(n, {"allreduce", "-b", "4K", "-e", "64K", "-f", "4", "-n", "2", "-w", "1",
                         "--reps", "1", "--compress", c.spec, "--json", path.string()});
    ASSERT_EQ(r.exitCode(), 0) << describe(r);
    EXPECT_NE(r.out.find("relerr"), std::string::npos) << describe(r);
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::filesystem::remove(path);
    ASSERT_EQ(lines.size(), 3u) << describe(r);  // 4K, 16K, 64K
    for (const std::string& line : lines) {
      EXPECT_EQ(field(line, "compress"), c.spec) << line;
      const double size = std::stod(field(line, "size"));
      const double wire = std::stod(field(line, "wire_bytes"));
      const double dense = std::stod(field(line, "dense_wire_bytes"));
      const double err = std::stod(field(line, "rel_error"));
      EXPECT_NEAR(dense, 2.0 * (n - 1) / n * size, 1.0) << line;
      const std::string spec = c.spec;
      if (spec == "none") {
        EXPECT_EQ(wire, dense) << line;
      } else {
        EXPECT_LT(wire, dense) << line;
      }
      if (spec == "int8") {  // 2(n-1)/n (count + 4 count / 256), slices padded to 4 bytes
        EXPECT_NEAR(wire, 2.0 * (n - 1) / n * (size / 4 + size / 256), 16.0) << line;
      }
      if (spec == "topk:0.125") {
        EXPECT_NEAR(wire, (n - 1) * 8.0 * (size / 4 / 8), 1.0) << line;
      }
      if (spec == "randk:0.125") {
        EXPECT_NEAR(wire, 2.0 * (n - 1) / n * 4.0 * (size / 4 / 8), 1.0) << line;
      }
      EXPECT_LE(err, c.maxRelErr) << line;
      EXPECT_GE(err, c.minRelErr) << line;
    }
  }
}

TEST(PerfCompress, MisuseIsAUsageError) {
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.timeout = std::chrono::seconds(30);
  for (std::vector<std::string> args : {
           std::vector<std::string>{"allreduce", "--compress", "int4"},
           std::vector<std::string>{"allreduce", "--compress", "topk:0"},
           std::vector<std::string>{"allgather", "--compress", "int8"},
           std::vector<std::string>{"allreduce", "-d", "fp64", "--compress", "sign"},
           std::vector<std::string>{"allreduce", "-o", "max", "--compress", "randk:0.1"},
       }) {
    args.insert(args.begin(), toolPath("braid-perf"));
    const auto r = runProcess(args, opts);
    EXPECT_EQ(r.exitCode(), 2) << describe(r);
    EXPECT_NE(r.err.find("--compress"), std::string::npos) << describe(r);
  }
}

}  // namespace
}  // namespace braid::tooltest
