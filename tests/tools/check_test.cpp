// braid-check: passes under braid-run on 2, 3 and 4 ranks (shared memory and TCP) with a JSON
// report holding the matrices; under torchrun-style variables without braid-run; fails with a
// readable report and the right exit status, within its timeout, when the store is unreachable,
// when a rank never joins, when a rank holds the wrong auth key, and when a rank is killed while
// the pairs are measured. Also the tournament schedule the pair measurements follow.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../tools/braid-check/pair_schedule.hpp"
#include "tool_process.hpp"

namespace braid::tooltest {
namespace {

// ---------------------------------------------------------------- a small JSON reader

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  const Json& operator[](const std::string& key) const {
    static const Json kNull;
    auto it = obj.find(key);
    return it == obj.end() ? kNull : it->second;
  }
  bool has(const std::string& key) const { return obj.count(key) != 0; }
};

/// Strict enough to reject malformed output: throws std::runtime_error on anything unexpected.
class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  Json parseDocument() {
    Json v = value();
    ws();
    if (i_ != s_.size()) throw std::runtime_error("trailing text at " + std::to_string(i_));
    return v;
  }

 private:
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    ws();
    if (i_ >= s_.size() || s_[i_] != c)
      throw std::runtime_error(std::string("expected '") + c + "' at " + std::to_string(i_));
    ++i_;
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(i_, w.size(), w) != 0) return false;
    i_ += w.size();
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) throw std::runtime_error("control char in string");
      if (c == '\\') {
        if (i_ >= s_.size()) break;
        const char e = s_[i_++];
        if (e == 'u') {
          if (i_ + 4 > s_.size()) throw std::runtime_error("bad \\u escape");
          out += static_cast<char>(std::stoi(s_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          continue;
        }
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
      }
      out += c;
    }
    expect('"');
    return out;
  }
  Json value() {
    ws();
    if (i_ >= s_.size()) throw std::runtime_error("unexpected end");
    Json v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Kind::Object;
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return v;
      }
      while (true) {
        ws();
        std::string key = string();
        expect(':');
        v.obj[key] = value();
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::Array;
      ++i_;
      ws();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return v;
      }
      while (true) {
        v.arr.push_back(value());
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::String;
      v.str = string();
      return v;
    }
    if (literal("null")) return v;
    if (literal("true") || literal("false")) {
      v.kind = Json::Kind::Bool;
      v.b = s_[i_ - 1] == 'e' && s_[i_ - 2] == 'u';
      return v;
    }
    std::size_t used = 0;
    v.kind = Json::Kind::Number;
    v.num = std::stod(s_.substr(i_), &used);
    if (used == 0) throw std::runtime_error("bad value at " + std::to_string(i_));
    i_ += used;
    return v;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

Json readJsonFile(const std::string& path) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return JsonParser(text).parseDocument();
}

// ---------------------------------------------------------------- running the tool

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("braid_check_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

/// braid-run -n N --timeout ... braid-check ARGS.
ProcessResult checkUnderRun(
    int nranks, std::vector<std::string> args,
    std::vector<std::pair<std::string, std::optional<std::string>>> env = {}, int timeoutS = 240) {
  std::vector<std::string> argv = {toolPath("braid-run"),    "-n",
                                   std::to_string(nranks),   "--timeout",
                                   std::to_string(timeoutS), toolPath("braid-check")};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.env.insert(opts.env.end(), env.begin(), env.end());
  opts.timeout = std::chrono::seconds(timeoutS + 30);
  return runProcess(argv, opts);
}

/// A port nothing listens on right now (bound, then released).
int unusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return 1;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

using EnvList = std::vector<std::pair<std::string, std::optional<std::string>>>;

/// torchrun's variables for one rank, without braid-run.
EnvList torchrunEnv(int rank, int size, int port) {
  EnvList env = cleanLaunchEnv();
  env.emplace_back("RANK", std::to_string(rank));
  env.emplace_back("WORLD_SIZE", std::to_string(size));
  env.emplace_back("LOCAL_RANK", std::to_string(rank));
  env.emplace_back("MASTER_ADDR", "127.0.0.1");
  env.emplace_back("MASTER_PORT", std::to_string(port));
  env.emplace_back("BRAID_AUTH_KEY", std::nullopt);
  return env;
}

/// Starts one braid-check process per entry of `envs` at once; returns their results by rank.
std::vector<ProcessResult> runRanks(const std::vector<EnvList>& envs,
                                    const std::vector<std::string>& args, int timeoutS,
                                    std::function<void(std::size_t, ProcessOptions&)> tweak = {}) {
  std::vector<std::future<ProcessResult>> running;
  for (std::size_t r = 0; r < envs.size(); ++r) {
    ProcessOptions opts;
    opts.env = envs[r];
    opts.timeout = std::chrono::seconds(timeoutS);
    if (tweak) tweak(r, opts);
    std::vector<std::string> argv = {toolPath("braid-check")};
    argv.insert(argv.end(), args.begin(), args.end());
    running.push_back(
        std::async(std::launch::async, [argv, opts] { return runProcess(argv, opts); }));
  }
  std::vector<ProcessResult> out;
  for (auto& f : running) out.push_back(f.get());
  return out;
}

std::string describeAll(const std::vector<ProcessResult>& results) {
  std::string s;
  for (std::size_t r = 0; r < results.size(); ++r)
    s += "===== rank " + std::to_string(r) + ": " + describe(results[r]) + "\n";
  return s;
}

// ---------------------------------------------------------------- the report

/// Checks a passing report of n ranks; `path`: the path every pair must use ("" = any).
void expectPassingJson(const Json& j, int n, const std::string& path) {
  ASSERT_EQ(j.kind, Json::Kind::Object);
  EXPECT_EQ(j["tool"].str, "braid-check");
  EXPECT_TRUE(j["passed"].b);
  EXPECT_EQ(j["exit_code"].num, 0);
  EXPECT_EQ(j["nranks"].num, n);
  ASSERT_EQ(j["stages"].arr.size(), 5u);
  for (const Json& s : j["stages"].arr)
    EXPECT_TRUE(s["status"].str == "PASS" || s["status"].str == "WARN") << s["name"].str;
  ASSERT_EQ(j["ranks"].arr.size(), static_cast<std::size_t>(n));
  std::set<double> pids;
  for (const Json& k : j["ranks"].arr) {
    EXPECT_TRUE(k["joined"].b);
    EXPECT_FALSE(k["host"].str.empty());
    EXPECT_FALSE(k["address"].str.empty());
    pids.insert(k["pid"].num);
  }
  EXPECT_EQ(pids.size(), static_cast<std::size_t>(n)) << "one process per rank";
  ASSERT_EQ(j["pairs"].arr.size(), static_cast<std::size_t>(n * (n - 1) / 2));
  std::set<std::pair<int, int>> seen;
  for (const Json& p : j["pairs"].arr) {
    const int a = static_cast<int>(p["a"].num), b = static_cast<int>(p["b"].num);
    EXPECT_LT(a, b);
    seen.insert({a, b});
    EXPECT_EQ(p["status"].str, "PASS") << p["error"].str;
    EXPECT_GT(p["rtt_us"].num, 0);
    EXPECT_GT(p["latency_us"].num, 0);
    EXPECT_GT(p["bandwidth_gbps"].num, 0);
    if (!path.empty()) {
      EXPECT_EQ(p["path"].str, path);
    }
    for (const char* end : {"endpoint_a", "endpoint_b"}) {
      if (p["path"].str == "tcp") {
        // The address and port each end's listener published.
        EXPECT_EQ(p[end].str.rfind("127.0.0.1:", 0), 0u) << p[end].str;
      } else {
        EXPECT_EQ(p[end].str.rfind("pid ", 0), 0u) << p[end].str;
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(n * (n - 1) / 2));
  for (const char* name : {"latency_us", "bandwidth_gbps", "paths"}) {
    SCOPED_TRACE(name);
    const Json& m = j[name];
    ASSERT_EQ(m.arr.size(), static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(m.arr[r].arr.size(), static_cast<std::size_t>(n));
      for (int c = 0; c < n; ++c) {
        const Json& v = m.arr[r].arr[c];
        if (r == c) {
          EXPECT_EQ(v.kind, Json::Kind::Null);
          continue;
        }
        EXPECT_EQ(v.kind, std::string(name) == "paths" ? Json::Kind::String : Json::Kind::Number);
        // Symmetric: one measurement per pair.
        const Json& w = m.arr[c].arr[r];
        EXPECT_EQ(v.num, w.num);
        EXPECT_EQ(v.str, w.str);
        if (v.kind == Json::Kind::Number) {
          EXPECT_GT(v.num, 0);
        }
      }
    }
  }
  std::set<std::string> names;
  for (const Json& c : j["collectives"].arr) {
    names.insert(c["name"].str);
    EXPECT_EQ(c["status"].str, "PASS") << c["name"].str << ": " << c["error"].str;
    EXPECT_EQ(c["wrong"].num, 0);
    EXPECT_GE(c["time_us"].num, 0);
  }
  EXPECT_EQ(names, (std::set<std::string>{"allreduce", "allgather", "reducescatter", "broadcast",
                                          "reduce", "alltoall", "gather", "scatter", "sendrecv",
                                          "barrier", "allgatherv", "reducescatterv", "alltoallv"}));
  EXPECT_TRUE(j["failures"].arr.empty());
}

struct RunCase {
  int nranks;
  bool tcp;
};
void PrintTo(const RunCase& c, std::ostream* os) {
  *os << c.nranks << " ranks, " << (c.tcp ? "tcp" : "shm");
}

class CheckPasses : public ::testing::TestWithParam<RunCase> {};

TEST_P(CheckPasses, UnderBraidRunWithJson) {
  const auto [n, tcp] = GetParam();
  const std::string json = tempPath("pass_" + std::to_string(n) + (tcp ? "_tcp" : "") + ".json");
  EnvList env;
  if (tcp) env.emplace_back("BRAID_SHM_DISABLE", "1");
  const auto r = checkUnderRun(n, {"--quick", "--timeout", "60", "--json", json}, env);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("[0] summary: PASS"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("launch braid"), std::string::npos) << describe(r);
  for (const char* stage : {"[1/5] store", "[2/5] ranks", "[3/5] pairs", "[4/5] latency",
                            "[5/5] collectives", "latency, us", "bandwidth, GB/s"})
    EXPECT_NE(r.out.find(stage), std::string::npos) << stage << "\n" << describe(r);
  // Every pair is named on its own line, by rank.
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      EXPECT_NE(r.out.find("PASS pair " + std::to_string(a) + "-" + std::to_string(b)),
                std::string::npos)
          << describe(r);
  Json j;
  ASSERT_NO_THROW(j = readJsonFile(json)) << describe(r);
  expectPassingJson(j, n, tcp ? "tcp" : "");
  if (!tcp) {
    for (const Json& p : j["pairs"].arr) EXPECT_EQ(p["path"].str.rfind("shm", 0), 0u);
  }
  std::filesystem::remove(json);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CheckPasses,
                         ::testing::Values(RunCase{2, false}, RunCase{3, false}, RunCase{4, false},
                                           RunCase{2, true}, RunCase{3, true}, RunCase{4, true}),
                         [](const auto& info) {
                           return std::to_string(info.param.nranks) +
                                  (info.param.tcp ? "RanksTcp" : "RanksShm");
                         });

TEST(Check, TorchrunStyleEnvironmentWithoutBraidRun) {
  const int port = unusedPort();
  const std::string json = tempPath("torchrun.json");
  const auto results =
      runRanks({torchrunEnv(0, 3, port), torchrunEnv(1, 3, port), torchrunEnv(2, 3, port)},
               {"--quick", "--timeout", "60", "--json", json}, 240);
  for (const auto& r : results) ASSERT_EQ(r.exitCode(), 0) << describeAll(results);
  EXPECT_NE(results[0].out.find("launch torchrun"), std::string::npos) << describeAll(results);
  EXPECT_NE(results[0].out.find("summary: PASS"), std::string::npos) << describeAll(results);
  EXPECT_NE(results[0].out.find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << "the report names the store" << describeAll(results);
  // Only rank 0 prints the report.
  EXPECT_TRUE(results[1].out.empty()) << describeAll(results);
  Json j;
  ASSERT_NO_THROW(j = readJsonFile(json));
  expectPassingJson(j, 3, "");
  EXPECT_EQ(j["launch"].str, "torchrun");
  std::filesystem::remove(json);
}

/// Open MPI's and Slurm's variables for one rank (they carry no store address: BRAID_STORE).
EnvList mpiStyleEnv(const std::string& convention, int rank, int size, int port) {
  EnvList env = cleanLaunchEnv();
  const bool ompi = convention == "openmpi";
  env.emplace_back(ompi ? "OMPI_COMM_WORLD_RANK" : "SLURM_PROCID", std::to_string(rank));
  env.emplace_back(ompi ? "OMPI_COMM_WORLD_SIZE" : "SLURM_NTASKS", std::to_string(size));
  env.emplace_back(ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "SLURM_LOCALID", std::to_string(rank));
  env.emplace_back("BRAID_STORE", "127.0.0.1:" + std::to_string(port));
  env.emplace_back("BRAID_AUTH_KEY", std::nullopt);
  return env;
}

TEST(Check, OpenMpiAndSlurmStyleEnvironments) {
  for (const std::string convention : {"openmpi", "slurm"}) {
    SCOPED_TRACE(convention);
    const int port = unusedPort();
    const auto results =
        runRanks({mpiStyleEnv(convention, 0, 2, port), mpiStyleEnv(convention, 1, 2, port)},
                 {"--quick", "--timeout", "60"}, 240);
    for (const auto& r : results) ASSERT_EQ(r.exitCode(), 0) << describeAll(results);
    EXPECT_NE(results[0].out.find("launch " + convention), std::string::npos)
        << describeAll(results);
    EXPECT_NE(results[0].out.find("summary: PASS: 2 ranks, 1 pair, 13 collectives"),
              std::string::npos)
        << describeAll(results);
  }
}

TEST(Check, SingleProcessWithoutLauncher) {
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  const auto r = runProcess({toolPath("braid-check"), "--quick"}, opts);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("summary: PASS: 1 rank, 0 pairs, 13 collectives"), std::string::npos)
      << describe(r);
}

// ---------------------------------------------------------------- failures

TEST(Check, UnreachableStoreFailsNamingTheAddressWithinTheTimeout) {
  const int port = unusedPort();
  const std::string json = tempPath("nostore.json");
  // Rank 0 of an external store nobody serves: it prints the report and writes the JSON.
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.env.emplace_back("BRAID_STORE", "127.0.0.1:" + std::to_string(port));
  opts.env.emplace_back("BRAID_STORE_EXTERNAL", "1");
  opts.env.emplace_back("BRAID_RANK", "0");
  opts.env.emplace_back("BRAID_WORLD_SIZE", "2");
  opts.timeout = std::chrono::seconds(60);
  const auto r0 = runProcess({toolPath("braid-check"), "--timeout", "2", "--json", json}, opts);
  EXPECT_FALSE(r0.timedOut) << describe(r0);
  EXPECT_EQ(r0.exitCode(), 3) << describe(r0);
  EXPECT_NE(r0.out.find("FAIL rank 0 cannot reach the store at 127.0.0.1:" + std::to_string(port) +
                        " within 2 s"),
            std::string::npos)
      << describe(r0);
  EXPECT_NE(r0.out.find("summary: FAIL (exit 3)"), std::string::npos) << describe(r0);
  Json j;
  ASSERT_NO_THROW(j = readJsonFile(json));
  EXPECT_FALSE(j["passed"].b);
  EXPECT_EQ(j["exit_code"].num, 3);
  EXPECT_EQ(j["store"].str, "127.0.0.1:" + std::to_string(port));
  ASSERT_FALSE(j["stages"].arr.empty());
  EXPECT_EQ(j["stages"].arr[0]["status"].str, "FAIL");
  EXPECT_EQ(j["stages"].arr[1]["status"].str, "SKIP");
  std::filesystem::remove(json);

  // Rank 1 under torchrun's variables with no rank 0: it says so on stderr.
  const auto results = runRanks({torchrunEnv(1, 2, port)}, {"--timeout", "2"}, 60);
  const ProcessResult& r1 = results[0];
  EXPECT_FALSE(r1.timedOut) << describe(r1);
  EXPECT_EQ(r1.exitCode(), 3) << describe(r1);
  EXPECT_NE(r1.err.find("rank 1: FAIL rank 1 cannot reach the store at 127.0.0.1:" +
                        std::to_string(port)),
            std::string::npos)
      << describe(r1);
  EXPECT_LT(r1.seconds, 40.0) << "bounded by --timeout, not a hang";

  // Without --timeout, BRAID_CONNECT_TIMEOUT bounds it.
  EnvList env = torchrunEnv(1, 2, port);
  env.emplace_back("BRAID_CONNECT_TIMEOUT", "1500");
  const auto byEnv = runRanks({env}, {}, 60);
  EXPECT_EQ(byEnv[0].exitCode(), 3) << describe(byEnv[0]);
  EXPECT_NE(byEnv[0].err.find("cannot reach the store at 127.0.0.1:" + std::to_string(port) +
                              " within 1.5 s"),
            std::string::npos)
      << describe(byEnv[0]);
}

TEST(Check, MissingRankIsNamedWithinTheTimeout) {
  const int port = unusedPort();
  const std::string json = tempPath("missing.json");
  // World of 3, rank 2 never starts.
  const auto results = runRanks({torchrunEnv(0, 3, port), torchrunEnv(1, 3, port)},
                                {"--timeout", "3", "--json", json}, 90);
  for (const auto& r : results) {
    EXPECT_FALSE(r.timedOut) << describeAll(results);
    EXPECT_EQ(r.exitCode(), 4) << describeAll(results);
  }
  EXPECT_NE(results[0].out.find("FAIL rank 2 did not join within 3 s"), std::string::npos)
      << describeAll(results);
  EXPECT_NE(results[0].out.find("summary: FAIL (exit 4)"), std::string::npos)
      << describeAll(results);
  Json j;
  ASSERT_NO_THROW(j = readJsonFile(json));
  EXPECT_FALSE(j["passed"].b);
  EXPECT_TRUE(j["ranks"].arr[0]["joined"].b);
  EXPECT_TRUE(j["ranks"].arr[1]["joined"].b);
  EXPECT_FALSE(j["ranks"].arr[2]["joined"].b);
  std::filesystem::remove(json);
}

TEST(Check, RankWithTheWrongAuthKeyIsNamed) {
  const int port = unusedPort();
  std::vector<EnvList> envs;
  for (int r = 0; r < 3; ++r) {
    EnvList env = torchrunEnv(r, 3, port);
    env.emplace_back("BRAID_AUTH_KEY", r == 2 ? "not-the-job-key" : "the-job-key");
    env.emplace_back("BRAID_DEBUG", "NONE");
    envs.push_back(env);
  }
  const auto results = runRanks(envs, {"--timeout", "4"}, 90);
  for (const auto& r : results) EXPECT_FALSE(r.timedOut) << describeAll(results);
  EXPECT_EQ(results[2].exitCode(), 3) << describeAll(results);
  EXPECT_NE(results[2].err.find("rank 2: FAIL rank 2 cannot reach the store"), std::string::npos)
      << describeAll(results);
  EXPECT_NE(results[2].err.find("Auth"), std::string::npos) << describeAll(results);
  EXPECT_EQ(results[0].exitCode(), 4) << describeAll(results);
  EXPECT_EQ(results[1].exitCode(), 4) << describeAll(results);
  EXPECT_NE(results[0].out.find("FAIL rank 2 did not join"), std::string::npos)
      << describeAll(results);
}

TEST(Check, RankKilledDuringThePairMeasurementsIsNamed) {
  const int port = unusedPort();
  const std::vector<EnvList> envs = {torchrunEnv(0, 3, port), torchrunEnv(1, 3, port),
                                     torchrunEnv(2, 3, port)};
  // Long latency probes keep every rank in stage 4 long enough for the kill to land there.
  std::atomic<pid_t> victim{0};
  std::atomic<bool> killed{false};
  const auto results =
      runRanks(envs, {"--timeout", "10", "--latency-iters", "50000", "--bandwidth-iters", "2"}, 180,
               [&](std::size_t r, ProcessOptions& opts) {
                 if (r == 0) {
                   opts.actionWhen = [](const std::string& out) {
                     return out.find("[4/5]") != std::string::npos;
                   };
                   opts.action = [&](pid_t) {
                     // Rank 2 is in its ping-pong now: kill it.
                     for (int i = 0; i < 200 && victim.load() == 0; ++i)
                       std::this_thread::sleep_for(std::chrono::milliseconds(10));
                     if (victim.load() != 0) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(100));
                       ::kill(-victim.load(), SIGKILL);
                       killed = true;
                     }
                   };
                 }
                 if (r == 2) {
                   opts.actionWhen = [](const std::string&) { return true; };
                   opts.action = [&](pid_t pid) { victim = pid; };
                 }
               });
  ASSERT_TRUE(killed.load()) << describeAll(results);
  EXPECT_FALSE(results[0].timedOut) << describeAll(results);
  EXPECT_FALSE(results[1].timedOut) << describeAll(results);
  EXPECT_NE(results[0].exitCode(), 0) << describeAll(results);
  EXPECT_NE(results[1].exitCode(), 0) << describeAll(results);
  EXPECT_NE(results[0].out.find("summary: FAIL"), std::string::npos) << describeAll(results);
  // The report names rank 2: as a peer lost in a ping-pong, or as a rank that did not report.
  EXPECT_NE(results[0].out.find("rank 2 did not report"), std::string::npos)
      << describeAll(results);
}

TEST(Check, FailingCollectiveIsNamed) {
  // The two ranks run different allreduce algorithms (a misconfigured job): the allreduce fails
  // on both (Mismatch where the sizes disagree, PeerLost on the other side) within the timeout,
  // and the report names it; the collectives after it are not run.
  const int port = unusedPort();
  std::vector<EnvList> envs;
  for (int r = 0; r < 2; ++r) {
    EnvList env = torchrunEnv(r, 2, port);
    env.emplace_back("BRAID_SHM_DISABLE", "1");
    env.emplace_back("BRAID_ALGO", r == 0 ? "allreduce:recursive_doubling" : "allreduce:ring");
    envs.push_back(env);
  }
  const std::string json = tempPath("collfail.json");
  const auto results = runRanks(
      envs, {"--quick", "--timeout", "10", "--collective-size", "64K", "--json", json}, 120);
  for (const auto& r : results) {
    EXPECT_FALSE(r.timedOut) << describeAll(results);
    EXPECT_EQ(r.exitCode(), 1) << describeAll(results);
  }
  const std::string& out = results[0].out;
  EXPECT_NE(out.find("PASS 1 of 1 pair"), std::string::npos) << describeAll(results);
  EXPECT_NE(out.find("  FAIL allreduce"), std::string::npos) << describeAll(results);
  EXPECT_NE(out.find("  - collective allreduce: rank "), std::string::npos) << describeAll(results);
  EXPECT_NE(out.find("Mismatch"), std::string::npos) << describeAll(results);
  EXPECT_NE(out.find("SKIP allgather"), std::string::npos) << describeAll(results);
  EXPECT_NE(out.find("summary: FAIL (exit 1): 1 problem"), std::string::npos)
      << describeAll(results);
  Json j;
  ASSERT_NO_THROW(j = readJsonFile(json));
  EXPECT_FALSE(j["passed"].b);
  ASSERT_EQ(j["collectives"].arr.size(), 13u);
  EXPECT_EQ(j["collectives"].arr[0]["name"].str, "allreduce");
  EXPECT_EQ(j["collectives"].arr[0]["status"].str, "FAIL");
  EXPECT_EQ(j["collectives"].arr[1]["status"].str, "SKIP");
  ASSERT_EQ(j["failures"].arr.size(), 1u);
  EXPECT_EQ(j["failures"].arr[0].str.rfind("collective allreduce: rank ", 0), 0u);
  std::filesystem::remove(json);
}

TEST(Check, UsageErrorsAndHelp) {
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  auto r = runProcess({toolPath("braid-check"), "--help"}, opts);
  EXPECT_EQ(r.exitCode(), 0);
  EXPECT_NE(r.out.find("usage: braid-check"), std::string::npos);
  r = runProcess({toolPath("braid-check"), "--nosuchoption"}, opts);
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  EXPECT_NE(r.err.find("unknown option '--nosuchoption'"), std::string::npos) << describe(r);
  r = runProcess({toolPath("braid-check"), "--bandwidth-size", "1Q"}, opts);
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  EXPECT_NE(r.err.find("--bandwidth-size"), std::string::npos) << describe(r);
  r = runProcess({toolPath("braid-check"), "--timeout", "-1"}, opts);
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
}

// ---------------------------------------------------------------- the schedule

TEST(CheckSchedule, EveryPairOnceAndEveryRankAtMostOncePerRound) {
  for (int n = 1; n <= 17; ++n) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::set<std::pair<int, int>> pairs;
    const int rounds = check::tournamentRounds(n);
    EXPECT_LE(rounds, n) << "O(N) rounds";
    for (int round = 0; round < rounds; ++round) {
      for (int r = 0; r < n; ++r) {
        const int p = check::tournamentPartner(n, round, r);
        if (p < 0) continue;
        ASSERT_NE(p, r);
        ASSERT_LT(p, n);
        ASSERT_EQ(check::tournamentPartner(n, round, p), r) << "partners agree";
        if (r < p) {
          EXPECT_TRUE(pairs.insert({r, p}).second) << r << "-" << p << " twice";
        }
      }
    }
    EXPECT_EQ(pairs.size(), static_cast<std::size_t>(n * (n - 1) / 2));
  }
}

TEST(CheckSchedule, OutlierRule) {
  EXPECT_EQ(check::median({}), 0);
  EXPECT_EQ(check::median({3, 1, 2}), 2);
  EXPECT_EQ(check::median({4, 1, 2, 3}), 2.5);
  EXPECT_FALSE(check::isLatencyOutlier(30, 10));
  EXPECT_TRUE(check::isLatencyOutlier(30.1, 10));
  EXPECT_FALSE(check::isBandwidthOutlier(1.0, 3.0));
  EXPECT_TRUE(check::isBandwidthOutlier(0.99, 3.0));
  EXPECT_FALSE(check::isLatencyOutlier(5, 0));
}

}  // namespace
}  // namespace braid::tooltest
