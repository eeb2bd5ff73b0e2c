// braid-run: environment of the ranks, output prefixes, exit status propagation, stopping the
// other ranks on a failure, signal reporting and forwarding, time limit, usage errors.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tool_process.hpp"

namespace braid::tooltest {
namespace {

ProcessResult braidRun(std::vector<std::string> args, ProcessOptions opts = {}) {
  args.insert(args.begin(), toolPath("braid-run"));
  if (opts.timeout == ProcessOptions{}.timeout) opts.timeout = std::chrono::seconds(60);
  return runProcess(args, opts);
}

/// Processes whose command line contains `marker` (read from /proc; nothing is signalled).
int countProcessesWith(const std::string& marker) {
  int n = 0;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(marker) != std::string::npos) ++n;
  }
  ::closedir(d);
  return n;
}

TEST(BraidRun, PrefixesEveryLineAndSetsTheLaunchEnvironment) {
  const auto r = braidRun({"-n", "3", "--", "sh", "-c",
                           "echo env $BRAID_RANK $BRAID_WORLD_SIZE $BRAID_LOCAL_RANK "
                           "$BRAID_LOCAL_WORLD_SIZE $BRAID_NODE_RANK $RANK $WORLD_SIZE "
                           "$LOCAL_RANK $LOCAL_WORLD_SIZE; echo store $BRAID_STORE "
                           "$MASTER_ADDR $MASTER_PORT; echo to-stderr $BRAID_RANK >&2"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  std::set<std::string> envLines, stores;
  for (const std::string& line : r.outLines()) {
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(\[(\d)\] env (.*))"))) {
      envLines.insert(line);
      continue;
    }
    ASSERT_TRUE(std::regex_match(
        line, m, std::regex(R"(\[(\d)\] store 127\.0\.0\.1:(\d+) 127\.0\.0\.1 (\d+))")))
        << line;
    EXPECT_NE(m[2].str(), m[3].str()) << "braid's store and torch's MASTER_PORT must differ";
    // Below the ephemeral range, where no outgoing connection's local port can take them
    // between braid-run's choice and the stores' bind.
    int low = 0;
    if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "re")) {
      if (std::fscanf(f, "%d", &low) != 1) low = 0;
      std::fclose(f);
    }
    if (low > 12000) {
      EXPECT_LT(std::stoi(m[2].str()), low) << line;
      EXPECT_LT(std::stoi(m[3].str()), low) << line;
    }
    stores.insert(m[2].str());
  }
  EXPECT_EQ(envLines,
            (std::set<std::string>{"[0] env 0 3 0 3 0 0 3 0 3", "[1] env 1 3 1 3 0 1 3 1 3",
                                   "[2] env 2 3 2 3 0 2 3 2 3"}));
  EXPECT_EQ(stores.size(), 1u) << "every rank must get the same store";
  const auto errs = r.errLines();
  EXPECT_EQ(std::set<std::string>(errs.begin(), errs.end()),
            (std::set<std::string>{"[0] to-stderr 0", "[1] to-stderr 1", "[2] to-stderr 2"}));
}

TEST(BraidRun, MultiNodeRanksAndMasterAddress) {
  const auto r = braidRun({"-n", "2", "--nnodes", "3", "--node-rank", "1", "--master",
                           "10.1.2.3:5000", "sh", "-c",
                           "echo $BRAID_RANK $BRAID_WORLD_SIZE $BRAID_LOCAL_RANK "
                           "$BRAID_NODE_RANK $BRAID_STORE $MASTER_ADDR $MASTER_PORT"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  const auto lines = r.outLines();
  EXPECT_EQ(std::set<std::string>(lines.begin(), lines.end()),
            (std::set<std::string>{"[2] 2 6 0 1 10.1.2.3:5000 10.1.2.3 5001",
                                   "[3] 3 6 1 1 10.1.2.3:5000 10.1.2.3 5001"}));
}

TEST(BraidRun, LinesOfDifferentRanksNeverInterleave) {
  const auto r =
      braidRun({"-n", "4", "sh", "-c",
                "i=0; while [ $i -lt 1500 ]; do echo \"rank $BRAID_RANK line $i "
                "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz\"; "
                "i=$((i+1)); done; printf 'last line without newline'"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  const std::regex line(
      R"(\[(\d)\] rank (\d) line (\d+) abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz)");
  std::map<int, int> nextLine;
  int tails = 0;
  for (const std::string& l : r.outLines()) {
    std::smatch m;
    if (l.size() > 4 && l.substr(3) == " last line without newline") {
      ++tails;
      continue;
    }
    ASSERT_TRUE(std::regex_match(l, m, line)) << "garbled line: " << l;
    ASSERT_EQ(m[1].str(), m[2].str()) << l;
    const int rank = std::stoi(m[1].str());
    ASSERT_EQ(std::stoi(m[3].str()), nextLine[rank]++) << "lines of rank " << rank << " reordered";
  }
  EXPECT_EQ(tails, 4);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(nextLine[rank], 1500);
}

TEST(BraidRun, ExitStatusOfAFailingRankIsPropagatedAndNamed) {
  const auto r = braidRun({"-n", "3", "sh", "-c", "if [ $BRAID_RANK = 1 ]; then exit 3; fi"});
  EXPECT_EQ(r.exitCode(), 3) << describe(r);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("exited with status 3"), std::string::npos) << describe(r);
}

// --max-failures K: up to K failed ranks leave the others running, and the job exits 0 when
// they do; one more failure is the job's failure as without the option.
TEST(BraidRun, MaxFailuresKeepsTheOthersRunning) {
  const auto r = braidRun({"--max-failures", "1", "-n", "3", "sh", "-c",
                           "if [ $BRAID_RANK = 1 ]; then kill -9 $$; fi; sleep 1; echo done"});
  EXPECT_EQ(r.exitCode(), 0) << r.err;
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tolerated"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("[0] done"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[2] done"), std::string::npos) << r.out;
  const auto two = braidRun({"--max-failures", "1", "-n", "3", "sh", "-c",
                             "if [ $BRAID_RANK != 0 ]; then exit 5; fi; sleep 30"});
  EXPECT_EQ(two.exitCode(), 5) << two.err;
  EXPECT_LT(two.seconds, 20.0) << "the second failure must stop the job";
  const auto bad = braidRun({"--max-failures", "x", "-n", "2", "true"});
  EXPECT_EQ(bad.exitCode(), 2);
  EXPECT_NE(bad.err.find("--max-failures"), std::string::npos) << bad.err;
}

// The elastic example under braid-run --max-failures 1: a rank (the last one, then rank 0, whose
// death the store survives because braid-run serves it) kills itself mid-training; the others
// shrink, rebalance, finish, and match one process's result.
TEST(BraidRun, MaxFailuresRunsTheElasticExample) {
  for (const char* victim : {"3", "0"}) {
    SCOPED_TRACE(std::string("victim ") + victim);
    const auto r = braidRun({"--max-failures", "1", "-n", "4", "--",
                             toolPath("braid-example-elastic"), "--from-env", victim});
    EXPECT_EQ(r.exitCode(), 0) << r.out << r.err;
    EXPECT_NE(r.out.find("shrunk from 4 to 3 ranks"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("finished on 3 ranks"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("matches"), std::string::npos) << r.out;
  }
}

// braid-perf --elastic under braid-run --max-failures 1: rank 2 is SIGKILLed a moment into the
// sweep (its shell's background job kills the exec'd braid-perf); the others shrink, print the
// new size, finish every size with every element checked, and the job exits 0.
TEST(BraidRun, PerfElasticShrinksAndGoesOn) {
  const std::string perf = toolPath("braid-perf");
  const auto r = braidRun({"--max-failures", "1", "-n", "4", "--", "sh", "-c",
                           "if [ $BRAID_RANK = 2 ]; then (sleep 0.3; kill -9 $$) & fi; exec " +
                               perf + " allreduce --elastic -b 8 -e 64K -f 2 -n 3000 --reps 3"});
  EXPECT_EQ(r.exitCode(), 0) << r.out << r.err;
  EXPECT_NE(r.out.find("# shrunk to 3 ranks"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("65536"), std::string::npos) << "the sweep went on to its end: " << r.out;
  EXPECT_NE(r.out.find("wrong elements: 0 (OK)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("tolerated"), std::string::npos) << r.err;
}

TEST(BraidRun, AllRanksSucceedingExitsZeroQuietly) {
  const auto r = braidRun({"-n", "2", "true"});
  EXPECT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "");
}

TEST(BraidRun, AFailureStopsTheOtherRanksQuickly) {
  const std::string marker = "sleep 47.25" + std::to_string(::getpid());
  const auto r = braidRun({"-n", "3", "sh", "-c",
                           "if [ $BRAID_RANK = 2 ]; then sleep 0.2; exit 4; fi; exec " + marker});
  EXPECT_EQ(r.exitCode(), 4) << describe(r);
  EXPECT_LT(r.seconds, 10.0) << describe(r);
  EXPECT_NE(r.err.find("rank 2"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("stopping the other ranks"), std::string::npos) << describe(r);
  EXPECT_EQ(countProcessesWith(marker), 0) << "sleeping ranks were left running";
}

TEST(BraidRun, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  // Rank 0 fails only once rank 1 ignores SIGTERM (it creates `ready` after the trap).
  const std::string ready = "/tmp/braid_run_test_ready_" + std::to_string(::getpid());
  ::unlink(ready.c_str());
  const auto r = braidRun({"--grace", "0.5", "-n", "2", "sh", "-c",
                           "if [ $BRAID_RANK = 0 ]; then while [ ! -e " + ready +
                               " ]; do sleep 0.02; done; exit 1; fi; trap '' TERM; touch " + ready +
                               "; sleep 30"});
  ::unlink(ready.c_str());
  EXPECT_EQ(r.exitCode(), 1) << describe(r);
  EXPECT_GE(r.seconds, 0.5) << "SIGKILL came before the grace period ended\n" << describe(r);
  EXPECT_LT(r.seconds, 10.0) << describe(r);
}

TEST(BraidRun, DeathBySignalIsReported) {
  const auto r =
      braidRun({"-n", "2", "sh", "-c", "if [ $BRAID_RANK = 1 ]; then kill -9 $$; fi; sleep 30"});
  EXPECT_EQ(r.exitCode(), 128 + 9) << describe(r);
  EXPECT_LT(r.seconds, 10.0) << describe(r);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("killed by signal 9 (SIGKILL)"), std::string::npos) << describe(r);
}

TEST(BraidRun, TimeLimitStopsEverything) {
  const auto r = braidRun({"--timeout", "0.5", "-n", "2", "sleep", "30"});
  EXPECT_EQ(r.exitCode(), 124) << describe(r);
  EXPECT_LT(r.seconds, 10.0) << describe(r);
  EXPECT_NE(r.err.find("time limit"), std::string::npos) << describe(r);
}

TEST(BraidRun, ForwardsSigtermToTheRanks) {
  ProcessOptions opts;
  // Signal only once both ranks have installed their handler.
  opts.actionWhen = [](const std::string& out) {
    return out.find("[0] ready") != std::string::npos && out.find("[1] ready") != std::string::npos;
  };
  opts.action = [](pid_t pid) { ::kill(pid, SIGTERM); };
  const auto r = braidRun(
      {"-n", "2", "sh", "-c", "trap 'echo got-term; exit 0' TERM; echo ready; sleep 30 & wait"},
      opts);
  EXPECT_EQ(r.exitCode(), 128 + SIGTERM) << describe(r);
  EXPECT_LT(r.seconds, 10.0) << describe(r);
  EXPECT_NE(r.out.find("[0] got-term"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("[1] got-term"), std::string::npos) << describe(r);
}

TEST(BraidRun, RankZeroReadsStdin) {
  ProcessOptions opts;
  opts.stdinData = "hello from stdin\n";
  const auto r = braidRun({"-n", "2", "cat"}, opts);
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_EQ(r.out, "[0] hello from stdin\n");
}

TEST(BraidRun, NoPrefixOption) {
  const auto r = braidRun({"--no-prefix", "-n", "1", "echo", "plain"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_EQ(r.out, "plain\n");
}

TEST(BraidRun, ProgramThatCannotRun) {
  const auto r = braidRun({"-n", "2", "/nonexistent/program"});
  EXPECT_EQ(r.exitCode(), 127) << describe(r);
  EXPECT_NE(r.err.find("cannot execute"), std::string::npos) << describe(r);
}

TEST(BraidRun, UsageErrorsAndHelp) {
  auto r = braidRun({"echo", "x"});
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  EXPECT_NE(r.err.find("-n N is required"), std::string::npos) << describe(r);
  r = braidRun({"-n", "0", "echo"});
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  r = braidRun({"-n", "2", "--nnodes", "2", "echo"});
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  EXPECT_NE(r.err.find("--master"), std::string::npos) << describe(r);
  r = braidRun({"-n", "2", "--bogus", "echo"});
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  r = braidRun({"--help"});
  EXPECT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.out.find("usage: braid-run"), std::string::npos);
}

// ---- --bind: ranks bound to a core of their own (checked against /proc and /sys)

/// "0-2,5" -> {0, 1, 2, 5}.
std::set<int> parseCpuList(const std::string& text) {
  std::set<int> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (part.empty()) continue;
    const auto dash = part.find('-');
    const int lo = std::stoi(part.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) out.insert(c);
  }
  return out;
}

std::set<int> ownCpus() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return parseCpuList(line.substr(18));
  return {};
}

/// (package, core id) of a CPU from /sys, or (-1, cpu) when unreadable.
std::pair<int, int> coreOf(int cpu) {
  auto read = [&](const char* file) {
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + file);
    int v = -1;
    return (f >> v) ? v : -1;
  };
  const int package = read("physical_package_id"), core = read("core_id");
  return package < 0 || core < 0 ? std::pair{-1, cpu} : std::pair{package, core};
}

std::size_t ownCores() {
  std::set<std::pair<int, int>> cores;
  for (int c : ownCpus()) cores.insert(coreOf(c));
  return cores.size();
}

/// Each rank's CPU list, by rank, from ranks printing their /proc/self/status line.
std::map<int, std::set<int>> rankCpus(std::vector<std::string> args, int* exitCode = nullptr) {
  args.insert(args.end(), {"--", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"});
  const auto r = braidRun(args);
  if (exitCode != nullptr) *exitCode = r.exitCode();
  std::map<int, std::set<int>> out;
  for (const std::string& line : r.outLines()) {
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(\[(\d+)\] Cpus_allowed_list:\s*(\S+))")))
      out[std::stoi(m[1].str())] = parseCpuList(m[2].str());
  }
  return out;
}

TEST(BraidRun, BindsEachRankToCoresOfItsOwn) {
  const std::set<int> mine = ownCpus();
  ASSERT_FALSE(mine.empty());
  for (const int n : {1, static_cast<int>(std::min<std::size_t>(ownCores(), 4))})
    for (const char* mode : {"auto", "core"}) {
      int rc = -1;
      const auto cpus = rankCpus({"-n", std::to_string(n), "--bind", mode}, &rc);
      ASSERT_EQ(rc, 0) << mode;
      ASSERT_EQ(cpus.size(), static_cast<std::size_t>(n)) << mode;
      // Whole cores, disjoint between ranks, split evenly: cores/n each, cores%n ranks one more.
      const std::size_t all = ownCores(), per = all / n, extra = all % n;
      std::set<std::pair<int, int>> coresSeen;
      std::size_t withExtra = 0;
      for (const auto& [rank, set] : cpus) {
        ASSERT_FALSE(set.empty()) << mode << " rank " << rank;
        std::set<std::pair<int, int>> cores;
        for (int c : set) {
          EXPECT_TRUE(mine.count(c))
              << mode << ": rank " << rank << " got CPU " << c << " outside braid-run's own mask";
          cores.insert(coreOf(c));
        }
        for (const auto& core : cores) {
          EXPECT_TRUE(coresSeen.insert(core).second)
              << mode << ": rank " << rank << " shares a core with another rank";
          for (int c : mine) {  // every CPU of that core that braid-run may use
            if (coreOf(c) == core) {
              EXPECT_TRUE(set.count(c)) << mode << " rank " << rank << " " << c;
            }
          }
        }
        EXPECT_TRUE(cores.size() == per || cores.size() == per + 1)
            << mode << ": rank " << rank << " has " << cores.size() << " cores of " << all;
        if (cores.size() == per + 1) ++withExtra;
      }
      EXPECT_EQ(withExtra, extra) << mode;
    }
}

TEST(BraidRun, LeavesRanksUnboundWhenToldOrWhenTheyDoNotFit) {
  const std::set<int> mine = ownCpus();
  const int tooMany = static_cast<int>(ownCores()) + 1;
  // --bind none; auto with more ranks than cores; auto on a multi-node job (its nodes may be
  // namespaces of one machine): every rank keeps braid-run's own mask.
  const std::vector<std::vector<std::string>> cases = {
      {"-n", "2", "--bind", "none"},
      {"-n", std::to_string(tooMany)},
      {"-n", "1", "--nnodes", "2", "--node-rank", "1", "--master", "127.0.0.1:9"}};
  for (const auto& args : cases) {
    int rc = -1;
    const auto cpus = rankCpus(args, &rc);
    ASSERT_EQ(rc, 0) << args[1];
    ASSERT_FALSE(cpus.empty());
    for (const auto& [rank, set] : cpus) EXPECT_EQ(set, mine) << args[1] << " rank " << rank;
  }
  // --bind core insists: too few cores is a usage error naming both numbers.
  const auto r = braidRun({"-n", std::to_string(tooMany), "--bind", "core", "true"});
  EXPECT_EQ(r.exitCode(), 2) << describe(r);
  EXPECT_NE(r.err.find(std::to_string(tooMany) + " ranks but only"), std::string::npos)
      << describe(r);
  const auto bad = braidRun({"-n", "1", "--bind", "socket", "true"});
  EXPECT_EQ(bad.exitCode(), 2) << describe(bad);
  EXPECT_NE(bad.err.find("--bind: expected auto, core or none, got 'socket'"), std::string::npos)
      << describe(bad);
}

TEST(BraidRun, ReportBindingsSaysWhereEachRankRuns) {
  const auto r = braidRun({"-n", "1", "--report-bindings", "true"});
  ASSERT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(braid-run: rank 0: bound to CPU [0-9,]+)")))
      << describe(r);
  const auto none = braidRun({"-n", "1", "--bind", "none", "--report-bindings", "true"});
  EXPECT_NE(none.err.find("rank 0: --bind none"), std::string::npos) << describe(none);
}

// BRAID_AUTH_KEY_FILE: braid-run generates no key then (the ranks read the file), a job whose
// ranks read a good file runs authenticated without the no-key warning, and a file others can
// read fails every rank naming the variable.
TEST(BraidRun, AuthKeyFileIsReadByTheRanks) {
  char dir[] = "/tmp/braid-run-key-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/key";
  {
    std::ofstream f(file);
    f << "0123456789abcdef0123456789abcdef\n";
  }
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  ProcessOptions opts;
  opts.env = cleanLaunchEnv();
  opts.env.emplace_back("BRAID_AUTH_KEY", std::nullopt);
  opts.env.emplace_back("BRAID_AUTH_KEY_FILE", file);
  opts.timeout = std::chrono::seconds(60);
  auto r = braidRun({"-n", "2", "sh", "-c", "test -z \"$BRAID_AUTH_KEY\""}, opts);
  EXPECT_EQ(r.exitCode(), 0) << "braid-run generated a key although BRAID_AUTH_KEY_FILE is set\n"
                             << describe(r);
  const std::vector<std::string> perf = {"-n",        "2",  toolPath("braid-perf"),
                                         "allreduce", "-b", "8",
                                         "-e",        "1K", "-n",
                                         "1",         "-w", "0",
                                         "--reps",    "1"};
  r = braidRun(perf, opts);
  EXPECT_EQ(r.exitCode(), 0) << describe(r);
  EXPECT_EQ(r.err.find("no BRAID_AUTH_KEY"), std::string::npos) << describe(r);
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  r = braidRun(perf, opts);
  EXPECT_NE(r.exitCode(), 0) << describe(r);
  EXPECT_NE(r.err.find("BRAID_AUTH_KEY_FILE"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("chmod 600"), std::string::npos) << describe(r);
  ::unlink(file.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace braid::tooltest
