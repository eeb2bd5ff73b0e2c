// The machine profile (src/common/tune_cache.hpp, src/kernels/copy_profile.hpp,
// src/core/machine_profile.hpp): the file written and read back, another machine's file and a
// corrupt one measured over, BRAID_LLC_SIZE winning, concurrent writers, and the copy and
// shared-memory chunk decisions as functions of made-up timings. Every test uses a file of its own
// under a temporary directory, never the user's ~/.cache/braid.
#include "common/tune_cache.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <braid/options.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/machine.hpp"
#include "common/step_rule.hpp"
#include "core/machine_profile.hpp"
#include "kernels/copy_profile.hpp"
#include "kernels/reduce.hpp"
#include "transport/shm/shm_single_copy.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;
using machine::TuneCache;
using machine::TuneEntry;
using machine::TuneKey;

constexpr std::size_t kKiB = 1024, kMiB = 1024 * 1024;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "braid-tune-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void spit(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

const TuneKey kKeyA{"Test CPU A @ 2.0GHz", "avx2", 8, ""};
const TuneKey kKeyB{"Test CPU B", "avx512", 8, ""};

TEST(TuneCache, WriteThenReadBack) {
  TempDir dir;
  const std::string path = dir.file("sub/dir/machine.tune");  // directories are created
  EXPECT_EQ(machine::readTuneCache(path, kKeyA).state, TuneCache::State::Missing);
  ASSERT_EQ(
      machine::writeTuneCache(path, kKeyA,
                              {{"a", {4096, "2026-01-02T03:04:05Z", "first detail"}},
                               {"never_one", {machine::kTuneNever, "2026-01-02T03:04:05Z", ""}}}),
      "");
  // A second write adds an entry and replaces one, keeping the rest.
  ASSERT_EQ(machine::writeTuneCache(path, kKeyA,
                                    {{"a", {8192, "2026-02-03T04:05:06Z", "second\ndetail"}},
                                     {"b", {std::uint64_t{3} << 40, "2026-02-03T04:05:06Z", "x"}}}),
            "");
  const TuneCache c = machine::readTuneCache(path, kKeyA);
  ASSERT_EQ(c.state, TuneCache::State::Loaded) << c.problem;
  EXPECT_EQ(c.key, kKeyA);
  ASSERT_EQ(c.entries.size(), 3u);
  EXPECT_EQ(c.find("a")->value, 8192u);
  EXPECT_EQ(c.find("a")->date, "2026-02-03T04:05:06Z");
  EXPECT_EQ(c.find("a")->detail, "second detail");  // one line
  EXPECT_EQ(c.find("never_one")->value, machine::kTuneNever);
  EXPECT_EQ(c.find("b")->value, std::uint64_t{3} << 40);
  EXPECT_EQ(c.find("missing"), nullptr);
  // No temporary files left next to it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  EXPECT_EQ(machine::readTuneCache("", kKeyA).state, TuneCache::State::Off);
}

TEST(TuneCache, AnotherMachinesFileIsNotUsedAndIsReplaced) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  ASSERT_EQ(machine::writeTuneCache(path, kKeyA, {{"a", {4096, "2026-01-02T03:04:05Z", ""}}}), "");
  for (TuneKey other : {kKeyB, TuneKey{kKeyA.cpuModel, "avx512", 8, ""},
                        TuneKey{kKeyA.cpuModel, kKeyA.isa, 16, ""}}) {
    const TuneCache c = machine::readTuneCache(path, other);
    EXPECT_EQ(c.state, TuneCache::State::OtherMachine);
    EXPECT_TRUE(c.entries.empty());
    EXPECT_NE(c.problem.find("Test CPU A @ 2.0GHz"), std::string::npos) << c.problem;
  }
  // Writing for B starts afresh: A's entry does not carry over.
  ASSERT_EQ(machine::writeTuneCache(path, kKeyB, {{"b", {1, "2026-01-02T03:04:05Z", ""}}}), "");
  const TuneCache c = machine::readTuneCache(path, kKeyB);
  ASSERT_EQ(c.state, TuneCache::State::Loaded);
  EXPECT_EQ(c.entries.size(), 1u);
  EXPECT_EQ(machine::readTuneCache(path, kKeyA).state, TuneCache::State::OtherMachine);
}

// Two CPUs a virtual machine names alike ("AMD EPYC": Zen 1, Zen 4 and Zen 5 guests) differ in
// their identity; a file written before the identity was kept (no cpuid line) is another
// machine's for a CPU that shows one.
TEST(TuneCache, SameNameOtherCpuIsAnotherMachine) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  const TuneKey zen4{"AMD EPYC", "avx512bf16", 2, "AuthenticAMD family 25 model 17 stepping 0"};
  const TuneKey zen5{"AMD EPYC", "avx512bf16", 2, "AuthenticAMD family 26 model 2 stepping 1"};
  ASSERT_EQ(machine::writeTuneCache(path, zen4, {{"a", {1, "2026-01-02T03:04:05Z", ""}}}), "");
  EXPECT_EQ(machine::readTuneCache(path, zen4).state, TuneCache::State::Loaded);
  const TuneCache other = machine::readTuneCache(path, zen5);
  EXPECT_EQ(other.state, TuneCache::State::OtherMachine);
  EXPECT_NE(other.problem.find("measured on 'AMD EPYC' (AuthenticAMD family 25 model 17 stepping "
                               "0), avx512bf16, 2 CPUs, this machine is 'AMD EPYC' (AuthenticAMD "
                               "family 26 model 2 stepping 1)"),
            std::string::npos)
      << other.problem;
  spit(path,
       "braid-tune-cache 1\ncpu AMD EPYC\nisa avx512bf16\ncpus 2\n"
       "entry a 1 2026-01-02T03:04:05Z\n");
  EXPECT_EQ(machine::readTuneCache(path, zen5).state, TuneCache::State::OtherMachine);
  EXPECT_EQ(machine::readTuneCache(path, TuneKey{"AMD EPYC", "avx512bf16", 2, ""}).state,
            TuneCache::State::Loaded);
}

TEST(TuneCache, CorruptFilesAreReportedWithTheLine) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  const std::string head = "braid-tune-cache 1\ncpu X\nisa avx2\ncpus 8\n";
  const TuneKey x{"X", "avx2", 8, ""};
  struct Case {
    std::string text, problem;
  };
  const Case cases[] = {
      {"", "empty file"},
      {"garbage\n", "line 1: expected 'braid-tune-cache 1'"},
      {"braid-tune-cache 2\n", "line 1: expected"},
      {"braid-tune-cache 1\ncpu X\n", "no cpu, isa or cpus line"},
      {head + "entry a 12x 2026-01-02T03:04:05Z d\n", "line 5: bad entry"},
      {head + "entry a 12 yesterday d\n", "line 5: bad entry"},
      {head + "entry a\n", "line 5: bad entry"},
      {head + "entry a 99999999999999999999 2026-01-02T03:04:05Z\n", "line 5: bad entry"},
      {head + "colour blue\n", "line 5: unknown item 'colour'"},
      {"braid-tune-cache 1\ncpu X\nisa avx2\ncpus many\n", "line 4: bad CPU count"},
      {std::string("braid-tune-cache 1\0\0\0", 21), "line 1: expected"},
  };
  for (const Case& c : cases) {
    spit(path, c.text);
    const TuneCache r = machine::readTuneCache(path, x);
    EXPECT_EQ(r.state, TuneCache::State::Corrupt) << c.text;
    EXPECT_NE(r.problem.find(c.problem), std::string::npos) << c.text << " -> " << r.problem;
    EXPECT_TRUE(r.entries.empty());
  }
  // Comments and blank lines are fine; a valid file after all.
  spit(path, "# note\n\n" + head + "entry a 12 2026-01-02T03:04:05Z some words here\n");
  const TuneCache ok = machine::readTuneCache(path, x);
  ASSERT_EQ(ok.state, TuneCache::State::Loaded) << ok.problem;
  EXPECT_EQ(ok.find("a")->detail, "some words here");
  // A corrupt file is replaced whole by the next write.
  spit(path, "garbage\n");
  ASSERT_EQ(machine::writeTuneCache(path, x, {{"b", {5, "2026-01-02T03:04:05Z", ""}}}), "");
  EXPECT_EQ(machine::readTuneCache(path, x).state, TuneCache::State::Loaded);
}

TEST(TuneCache, MachineKeyAndPath) {
  TempDir dir;
  const std::string cpuinfo = dir.file("cpuinfo");
  spit(cpuinfo,
       "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 106\nmodel "
       "name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz  \nstepping\t: 6\nflags\t\t: fpu\n\n"
       "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
       "model name\t: Intel(R) Xeon(R)\n");
  TuneKey k = machine::thisMachine("avx512", cpuinfo);
  EXPECT_EQ(k.cpuModel, "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz");
  EXPECT_EQ(k.cpuId, "GenuineIntel family 6 model 106 stepping 6");  // the first CPU's
  EXPECT_EQ(k.isa, "avx512");
  EXPECT_GE(k.cpus, 1);
  spit(cpuinfo,
       "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
       "CPU variant\t: 0x1\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\nprocessor\t: 1\n");  // arm64
  EXPECT_EQ(machine::thisMachine("scalar", cpuinfo).cpuModel, "0xd0c");
  EXPECT_EQ(machine::thisMachine("scalar", cpuinfo).cpuId,
            "implementer 0x41 variant 0x1 part 0xd0c revision 1");
  EXPECT_EQ(machine::thisMachine("scalar", dir.file("none")).cpuModel, "unknown");
  EXPECT_EQ(machine::thisMachine("scalar", dir.file("none")).cpuId, "");

  EXPECT_EQ(machine::tuneCachePath("off"), "");
  EXPECT_EQ(machine::tuneCachePath("/x/y.tune"), "/x/y.tune");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string savedXdg = xdg ? xdg : "";
  const char* home = std::getenv("HOME");
  const std::string savedHome = home ? home : "";
  ::setenv("XDG_CACHE_HOME", "/cachehome", 1);
  EXPECT_EQ(machine::tuneCachePath(""), "/cachehome/braid/machine.tune");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(machine::tuneCachePath(""), "/home/someone/.cache/braid/machine.tune");
  ::unsetenv("HOME");
  EXPECT_EQ(machine::tuneCachePath(""), "");
  if (xdg) ::setenv("XDG_CACHE_HOME", savedXdg.c_str(), 1);
  if (home) ::setenv("HOME", savedHome.c_str(), 1);
}

// Processes writing the file at once (ranks of one host finishing their measurements together):
// a reader never sees a torn or partial file, and the last writer's file is whole.
TEST(TuneCache, ConcurrentWritersNeverLeaveATornFile) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  constexpr int kWriters = 4, kWrites = 40;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int bad = 0;
      for (int i = 0; i < kWrites; ++i) {
        const std::string detail(200 + 37 * w, static_cast<char>('a' + w));
        if (!machine::writeTuneCache(
                 path, kKeyA,
                 {{"w" + std::to_string(w),
                   {static_cast<std::uint64_t>(i), "2026-01-02T03:04:05Z", detail}}})
                 .empty())
          ++bad;
        const auto st = machine::readTuneCache(path, kKeyA).state;
        if (st != TuneCache::State::Loaded) ++bad;
      }
      ::_exit(bad == 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(machine::readTuneCache(path, kKeyA).state, TuneCache::State::Loaded);
}

kernels::CopyTiming at(std::size_t bytes, double cachedGBps, double streamedGBps) {
  return {bytes, 1.0 / cachedGBps, 1.0 / streamedGBps};
}

// The decision from made-up timings (independent of this machine).
TEST(CopyProfile, DecisionFollowsTheTimings) {
  // Cached copies fast until 1 MiB, then streaming wins: threshold 1 MiB, cache 2 MiB.
  std::vector<kernels::CopyTiming> t;
  for (std::size_t b : kernels::kCopyProbeSizes)
    t.push_back(b < kMiB ? at(b, 30, 15) : at(b, 6, 9));
  kernels::CopyDecision d = kernels::decideCopies(t, 32 * kMiB, 16 * kMiB);
  EXPECT_TRUE(d.measured);
  EXPECT_EQ(d.streamingBytes, kMiB);
  EXPECT_EQ(d.cacheBytes, 2 * kMiB);
  EXPECT_NE(d.why.find("streaming stores win from 1M"), std::string::npos) << d.why;
  EXPECT_NE(d.why.find("64K 30.0/15.0"), std::string::npos) << d.why;
  // The OS reports less cache than that implies: the cache is capped, the threshold stays.
  d = kernels::decideCopies(t, kMiB, 16 * kMiB);
  EXPECT_EQ(d.streamingBytes, kMiB);
  EXPECT_EQ(d.cacheBytes, kMiB);
  EXPECT_NE(d.why.find("capped"), std::string::npos) << d.why;
  // One size out of line (a round lost to another process) does not move the step.
  t[1] = at(t[1].bytes, 10, 20);  // streaming "won" at 128K once
  d = kernels::decideCopies(t, 0, 16 * kMiB);
  EXPECT_EQ(d.streamingBytes, kMiB);
  // Streaming never wins: twice the largest size measured, or the fallback if larger.
  for (auto& x : t) x = at(x.bytes, 20, 10);
  d = kernels::decideCopies(t, 0, kMiB);
  EXPECT_EQ(d.streamingBytes, 2 * t.back().bytes);
  EXPECT_NE(d.why.find("streaming stores lost up to"), std::string::npos) << d.why;
  d = kernels::decideCopies(t, 0, 64 * kMiB);
  EXPECT_EQ(d.streamingBytes, 64 * kMiB);
  // Streaming wins at the largest size alone: one size decides nothing.
  t.back() = at(t.back().bytes, 5, 10);
  EXPECT_EQ(kernels::decideCopies(t, 0, kMiB).streamingBytes, 2 * t.back().bytes);
  // Streaming wins everywhere: from the smallest size.
  for (auto& x : t) x = at(x.bytes, 5, 10);
  EXPECT_EQ(kernels::decideCopies(t, 0, kMiB).streamingBytes, t.front().bytes);
  // Implausible figures: the fallback, not measured.
  for (double bad : {0.0, -1.0, 1e-6, 1e9}) {
    auto u = t;
    u[3].cachedNsPerByte = bad;
    d = kernels::decideCopies(u, 8 * kMiB, 4 * kMiB);
    EXPECT_FALSE(d.measured) << bad;
    EXPECT_EQ(d.streamingBytes, 4 * kMiB);
    EXPECT_NE(d.why.find("implausible"), std::string::npos);
  }
  EXPECT_FALSE(kernels::decideCopies({}, 0, 4 * kMiB).measured);
}

// The measurement itself: figures for every size, positive (no claim about their values).
TEST(CopyProfile, MeasurementCoversEverySize) {
  double ms = -1;
  const auto t = kernels::measureCopies(&ms);
  ASSERT_EQ(t.size(), std::size(kernels::kCopyProbeSizes));
  for (std::size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t[i].bytes, kernels::kCopyProbeSizes[i]);
    EXPECT_GT(t[i].cachedNsPerByte, 0);
    EXPECT_GT(t[i].streamedNsPerByte, 0);
  }
  EXPECT_GT(ms, 0);
}

// The kernels' precedence: BRAID_LLC_SIZE (setLastLevelCacheBytes) over the measured threshold
// over the OS's report.
TEST(CopyProfile, KernelsTakeTheMeasuredThresholdBelowTheOverride) {
  const std::size_t os = machine::lastLevelCache().bytes / 2;
  kernels::setLastLevelCacheBytes(0);
  kernels::setMeasuredStreamingThreshold(0);
  EXPECT_EQ(kernels::streamingThresholdBytes(), os);
  kernels::setMeasuredStreamingThreshold(384 * kKiB);
  EXPECT_EQ(kernels::streamingThresholdBytes(), 384 * kKiB);
  kernels::setLastLevelCacheBytes(2 * kMiB);
  EXPECT_EQ(kernels::streamingThresholdBytes(), kMiB);
  kernels::setLastLevelCacheBytes(0);
  EXPECT_EQ(kernels::streamingThresholdBytes(), 384 * kKiB);
  kernels::setMeasuredStreamingThreshold(0);
  EXPECT_EQ(kernels::streamingThresholdBytes(), os);
  // Back to what the test main applied (BRAID_LLC_SIZE, when set).
  kernels::setLastLevelCacheBytes(Options::fromEnv().llcBytes);
}

Options withCache(const std::string& path) {
  Options o;
  o.tuneCache = path;
  o.tuneMaxBusyPercent = 100;  // kept however busy the machine running the tests is
  return o;
}

std::string sourceOf(const core::MachineProfile& p, const std::string& name) {
  for (const auto& d : p.decisions)
    if (d.name == name) return d.source;
  return "(no decision " + name + ")";
}

// Measured once, then read back; the file's values are the ones used.
TEST(MachineProfile, MeasuredOnceThenCached) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  const core::MachineProfile first = core::resolveMachineProfile(withCache(path));
  EXPECT_TRUE(first.warnings.empty());
  EXPECT_EQ(sourceOf(first, "streaming threshold").rfind("measured now in ", 0), 0u)
      << sourceOf(first, "streaming threshold");
  EXPECT_NE(sourceOf(first, "streaming threshold").find("kept in " + path), std::string::npos);
  EXPECT_GT(first.streamingBytes, 0u);
  const TuneCache c = machine::readTuneCache(path, core::machineKey());
  ASSERT_EQ(c.state, TuneCache::State::Loaded) << c.problem;
  ASSERT_NE(c.find("streaming_threshold"), nullptr);
  EXPECT_EQ(c.find("streaming_threshold")->value, first.streamingBytes);

  // Values planted in the file are what the next process uses.
  ASSERT_EQ(machine::writeTuneCache(
                path, core::machineKey(),
                {{"streaming_threshold", {384 * kKiB, "2026-01-02T03:04:05Z", "planted"}},
                 {"effective_cache", {768 * kKiB, "2026-01-02T03:04:05Z", "planted"}}}),
            "");
  const core::MachineProfile second = core::resolveMachineProfile(withCache(path));
  EXPECT_EQ(second.streamingBytes, 384 * kKiB);
  EXPECT_EQ(second.cacheBytes, 768 * kKiB);
  EXPECT_EQ(sourceOf(second, "streaming threshold"),
            "cached in " + path + " (measured 2026-01-02T03:04:05Z)");
}

// Ranks of one host started together with no profile: one measures (under the file's lock),
// the others wait and read what it wrote.
TEST(MachineProfile, ProcessesStartedTogetherMeasureOnce) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  constexpr int kProcesses = 4;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const core::MachineProfile p = core::resolveMachineProfile(withCache(path));
      const std::string source = sourceOf(p, "streaming threshold");
      ::_exit(source.rfind("measured now in ", 0) == 0 ? 10
              : source.rfind("cached in ", 0) == 0     ? 11
                                                       : 12);
    }
    pids.push_back(pid);
  }
  int measured = 0, cached = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    measured += WEXITSTATUS(status) == 10;
    cached += WEXITSTATUS(status) == 11;
  }
  EXPECT_EQ(measured, 1);
  EXPECT_EQ(cached, kProcesses - 1);
}

TEST(MachineProfile, AnotherCpuModelIsMeasuredAgain) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  TuneKey other = core::machineKey();
  other.cpuModel += " (another one)";
  ASSERT_EQ(machine::writeTuneCache(
                path, other,
                {{"streaming_threshold", {384 * kKiB, "2026-01-02T03:04:05Z", "planted"}},
                 {"effective_cache", {768 * kKiB, "2026-01-02T03:04:05Z", "planted"}}}),
            "");
  const core::MachineProfile p = core::resolveMachineProfile(withCache(path));
  const std::string source = sourceOf(p, "streaming threshold");
  EXPECT_EQ(source.rfind("measured now in ", 0), 0u) << source;
  EXPECT_NE(source.find("another machine's"), std::string::npos) << source;
  EXPECT_TRUE(p.warnings.empty());
  // The file now describes this machine.
  EXPECT_EQ(machine::readTuneCache(path, core::machineKey()).state, TuneCache::State::Loaded);
  EXPECT_EQ(machine::readTuneCache(path, other).state, TuneCache::State::OtherMachine);
}

TEST(MachineProfile, CorruptFileIsMeasuredAgainWithAWarning) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  spit(path, "braid-tune-cache 1\ncpu ???\x01\x02 truncated");
  const core::MachineProfile p = core::resolveMachineProfile(withCache(path));
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("BRAID_TUNE_CACHE " + path + " is corrupt"), std::string::npos)
      << p.warnings[0];
  EXPECT_EQ(sourceOf(p, "streaming threshold").rfind("measured now in ", 0), 0u);
  EXPECT_EQ(machine::readTuneCache(path, core::machineKey()).state, TuneCache::State::Loaded);
}

TEST(MachineProfile, OverridesWinAndOffKeepsNothing) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  Options o = withCache(path);
  o.llcBytes = 6 * kMiB;  // BRAID_LLC_SIZE
  const core::MachineProfile p = core::resolveMachineProfile(o);
  EXPECT_EQ(p.streamingBytes, 0u);  // the kernels keep BRAID_LLC_SIZE's half
  EXPECT_EQ(sourceOf(p, "streaming threshold"), "BRAID_LLC_SIZE=6 MiB");
  EXPECT_FALSE(fs::exists(path));  // nothing measured, nothing written
  // A file that cannot be written: a warning when BRAID_TUNE_CACHE names it, none for the
  // default location (a read-only home costs a measurement per process, nothing else).
  const core::MachineProfile named = core::resolveMachineProfile(withCache("/proc/braid/m.tune"));
  ASSERT_EQ(named.warnings.size(), 1u);
  EXPECT_NE(named.warnings[0].find("BRAID_TUNE_CACHE /proc/braid/m.tune: cannot create"),
            std::string::npos)
      << named.warnings[0];
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string savedXdg = xdg ? xdg : "";
  ::setenv("XDG_CACHE_HOME", "/proc/braid-none", 1);
  Options defaultFile;
  defaultFile.tuneMaxBusyPercent = 100;  // the write fails, however busy the machine is
  const core::MachineProfile unnamed = core::resolveMachineProfile(defaultFile);
  EXPECT_TRUE(unnamed.warnings.empty());
  EXPECT_NE(sourceOf(unnamed, "streaming threshold")
                .find("not kept: cannot create /proc/braid-none/braid/machine.tune.tmp."),
            std::string::npos)
      << sourceOf(unnamed, "streaming threshold");
  if (xdg)
    ::setenv("XDG_CACHE_HOME", savedXdg.c_str(), 1);
  else
    ::unsetenv("XDG_CACHE_HOME");
  const core::MachineProfile off = core::resolveMachineProfile(withCache("off"));
  EXPECT_NE(sourceOf(off, "streaming threshold").find("not kept (BRAID_TUNE_CACHE=off)"),
            std::string::npos)
      << sourceOf(off, "streaming threshold");
}

// Copies timed while the thread shared its CPU with a spinning thread measured the load: the
// figures serve this process and are not kept (BRAID_TUNE_MAX_BUSY, 20 % by default), so the
// next process measures again. The measuring thread runs at nice 19 beside the spinner (nice
// 0): the scheduler gives it about 1.5 % of the CPU, so it cannot finish the probe within one
// time slice, as a thread of equal weight may.
TEST(MachineProfile, MeasuredOnABusyCpuIsNotKept) {
  const std::vector<int> cpus = machine::allowedCpus();
  ASSERT_FALSE(cpus.empty());
  TempDir dir;
  const std::string path = dir.file("m.tune");
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus.front(), &one);
  std::atomic<bool> stop{false};
  std::thread hog([&] {
    ::sched_setaffinity(0, sizeof one, &one);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  core::MachineProfile p;
  std::thread measurer([&] {
    ::sched_setaffinity(0, sizeof one, &one);
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
    Options o;
    o.tuneCache = path;
    p = core::resolveMachineProfile(o);
  });
  measurer.join();
  stop = true;
  hog.join();
  const std::string source = sourceOf(p, "streaming threshold");
  // Either the figures were plausible and are not kept, or (a slow build such as TSan's, at
  // 1.5 % of a CPU) they were implausible and the OS's report applies: both name the busy CPU.
  if (source.rfind("default: ", 0) == 0) {
    EXPECT_NE(source.find(" gave implausible figures; the machine was busy (this thread was off "
                          "its CPU for "),
              std::string::npos)
        << source;
  } else {
    EXPECT_EQ(source.rfind("measured now in ", 0), 0u) << source;
    EXPECT_NE(source.find(", not kept: the machine was busy (this thread was off its CPU for "),
              std::string::npos)
        << source;
  }
  EXPECT_NE(p.streamingBytes, 0u);  // used all the same
  EXPECT_FALSE(fs::exists(path));
}

// The step rule of every measured threshold (common/step_rule.hpp): the candidate from size k on
// scores -1 per win and +1 per loss over the sizes >= k; the lowest score wins, the larger k on
// ties, and only a lead of two sizes counts.
TEST(StepRule, TheStepMostSizesAgreeWithLeadingByTwo) {
  const std::size_t none = 5;
  EXPECT_EQ(stepMostSizesAgreeWith({false, false, false, false, false}), none);
  EXPECT_EQ(stepMostSizesAgreeWith({true, true, true, true, true}), 0u);
  EXPECT_EQ(stepMostSizesAgreeWith({false, false, false, true, true}), 3u);
  // The largest size alone (a disturbed round, or a real win with nothing to confirm it): none.
  EXPECT_EQ(stepMostSizesAgreeWith({false, false, false, false, true}), none);
  EXPECT_EQ(stepMostSizesAgreeWith({true}), 1u);
  EXPECT_EQ(stepMostSizesAgreeWith({}), 0u);
  // One loss among wins does not move the step: from 0, -1 -1 +1 -1 -1 = -3 beats from 3's -2.
  EXPECT_EQ(stepMostSizesAgreeWith({true, true, false, true, true}), 0u);
  // Ties keep the larger step: from 0 and from 2 both score -3.
  EXPECT_EQ(stepMostSizesAgreeWith({true, false, true, true, true}), 2u);
  // A lone win below the losses is no step either.
  EXPECT_EQ(stepMostSizesAgreeWith({true, false, false, false, false}), none);
}

// The shared-memory chunk from the probe's staged timings (shm_single_copy.hpp): the smallest
// size from 64 KiB on within 10 % of the fastest per byte; sizes below 64 KiB never count; none
// when the staging half held no such size.
TEST(ShmChunkRule, SmallestWithinTenPercentOfTheFastestPerByte) {
  using transport::shm::chunkFromStaged;
  // ns at 4K, 16K, 64K, 256K, 1M.
  const std::uint64_t falling[] = {300, 900, 12000, 29000, 56000};  // per byte: 1M fastest
  EXPECT_EQ(chunkFromStaged(falling, 5).bytes, kMiB);
  const std::uint64_t flat[] = {100, 400, 6500, 26000, 104000};  // 64K as fast as any
  EXPECT_EQ(chunkFromStaged(flat, 5).bytes, 64 * kKiB);
  const std::uint64_t within[] = {100, 400, 9000, 26000, 99000};  // 1M 5 % faster than 256K
  EXPECT_EQ(chunkFromStaged(within, 5).bytes, 256 * kKiB);
  const std::uint64_t rising[] = {10, 40, 6000, 30000, 200000};  // 64K fastest
  EXPECT_EQ(chunkFromStaged(rising, 5).bytes, 64 * kKiB);
  // A tiny 4K time never decides: only 64K on count.
  const std::uint64_t tinyFast[] = {1, 1, 13000, 26000, 52000};
  EXPECT_EQ(chunkFromStaged(tinyFast, 5).bytes, kMiB);
  // A staging half of 128 KiB measured 4K-64K: 64K; of 32 KiB: nothing to choose.
  EXPECT_EQ(chunkFromStaged(falling, 3).bytes, 64 * kKiB);
  const transport::shm::ChunkChoice none = chunkFromStaged(falling, 2);
  EXPECT_EQ(none.bytes, 0u);
  EXPECT_NE(chunkFromStaged(falling, 5).why.find("ps per byte: 64K 183.11, 256K 110.63, 1M 53.41"),
            std::string::npos)
      << chunkFromStaged(falling, 5).why;
}

// The direct collectives' streaming threshold from the group's timings (shm_streaming.hpp): the
// step that most sizes agree with; lost everywhere: twice the largest size; a missing figure
// decides nothing (the process's threshold then applies).
TEST(ShmStreamingRule, TheStepMostSizesAgreeWith) {
  using transport::shm::streamingFromTimings;
  const std::size_t sizes[] = {4 * kMiB, 8 * kMiB, 16 * kMiB, 32 * kMiB, 64 * kMiB};
  // us cached / streamed (in ns): streaming wins from 32M.
  const std::uint64_t cached[] = {35000, 66000, 151000, 800000, 1644000};
  const std::uint64_t streamed[] = {94000, 188000, 375000, 750000, 824000};
  const transport::shm::StreamingChoice c = streamingFromTimings(sizes, cached, streamed, 5);
  EXPECT_EQ(c.bytes, 32 * kMiB);
  EXPECT_NE(c.why.find("streaming stores win from 32M of outputs (all ranks' outputs together; "
                       "us cached/streamed: 4M 35/94, 8M 66/188, 16M 151/375, 32M 800/750, "
                       "64M 1644/824)"),
            std::string::npos)
      << c.why;
  // Streaming never wins: twice the largest size measured.
  const std::uint64_t slow[] = {94000, 188000, 375000, 1500000, 3000000};
  const transport::shm::StreamingChoice lost = streamingFromTimings(sizes, cached, slow, 5);
  EXPECT_EQ(lost.bytes, 128 * kMiB);
  EXPECT_NE(lost.why.find("streaming stores lost up to 64M of outputs"), std::string::npos)
      << lost.why;
  // Streaming wins at the largest size alone: that decides nothing (lost, 128M).
  const std::uint64_t lastOnly[] = {94000, 188000, 375000, 1500000, 824000};
  EXPECT_EQ(streamingFromTimings(sizes, cached, lastOnly, 5).bytes, 128 * kMiB);
  // Streaming wins everywhere: from the first size.
  const std::uint64_t fast[] = {1000, 2000, 4000, 8000, 16000};
  EXPECT_EQ(streamingFromTimings(sizes, cached, fast, 5).bytes, 4 * kMiB);
  // One disturbed size (16M streamed slow) among sizes where streaming wins does not move the
  // step past it: from 4M on scores -1 -1 +1 -1 -1 = -3, from 32M on only -2.
  const std::uint64_t disturbed[] = {1000, 2000, 900000, 8000, 16000};
  EXPECT_EQ(streamingFromTimings(sizes, cached, disturbed, 5).bytes, 4 * kMiB);
  // A tie keeps the larger step (streams less): 8M disturbed, from 4M and from 16M both -3.
  const std::uint64_t tie[] = {1000, 900000, 4000, 8000, 16000};
  EXPECT_EQ(streamingFromTimings(sizes, cached, tie, 5).bytes, 16 * kMiB);
  // A missing figure: no decision.
  const std::uint64_t missing[] = {1000, 0, 4000, 8000, 16000};
  EXPECT_EQ(streamingFromTimings(sizes, cached, missing, 5).bytes, 0u);
  EXPECT_EQ(streamingFromTimings(sizes, cached, streamed, 0).bytes, 0u);
  // The sizes reach past the cache: twice the OS's report, within [8 MiB, 128 MiB].
  EXPECT_EQ(transport::shm::streamingProbeLimit(32 * kMiB), 64 * kMiB);
  EXPECT_EQ(transport::shm::streamingProbeLimit(kMiB), 8 * kMiB);
  EXPECT_EQ(transport::shm::streamingProbeLimit(512 * kMiB), 128 * kMiB);
}

// braid-info --tune's text, in process: every decision with its source.
TEST(MachineProfile, ReportNamesEverySource) {
  TempDir dir;
  const std::string path = dir.file("m.tune");
  Options o = withCache(path);
  std::string r = core::tuneReport(o);
  EXPECT_NE(r.find("profile file: " + path), std::string::npos) << r;
  EXPECT_NE(r.find("streaming threshold: "), std::string::npos) << r;
  EXPECT_NE(r.find("from: measured now in "), std::string::npos) << r;
  EXPECT_NE(r.find("chunk size (message algorithms): 256 KiB"), std::string::npos) << r;
  EXPECT_NE(r.find("shm single-copy threshold (one host): at creation"), std::string::npos) << r;
  EXPECT_NE(r.find("shm chunk (direct collectives, one host): at creation"), std::string::npos)
      << r;
  EXPECT_NE(r.find("shm streaming stores (direct collectives' outputs together): at creation"),
            std::string::npos)
      << r;
  ASSERT_EQ(machine::writeTuneCache(
                path, core::machineKey(),
                {{"shm_single_copy.2ranks", {64 * kKiB, "2026-01-02T03:04:05Z", "planted"}},
                 {"shm_chunk.2ranks", {kMiB, "2026-01-02T03:04:06Z", "planted chunk"}},
                 {"shm_streaming.2ranks", {64 * kMiB, "2026-01-02T03:04:07Z", "planted"}}}),
            "");
  r = core::tuneReport(o);
  EXPECT_NE(r.find("from: cached in " + path + " (measured "), std::string::npos) << r;
  EXPECT_NE(r.find("shm single-copy threshold (one host), 2ranks: 64 KiB\n    from: cached in " +
                   path + " (measured 2026-01-02T03:04:05Z)"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("shm chunk (direct collectives, one host), 2ranks: 1 MiB\n    from: cached in " +
                   path + " (measured 2026-01-02T03:04:06Z)\n    why:  planted chunk"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("shm streaming stores (direct collectives' outputs together), 2ranks: 64 MiB\n"
                   "    from: cached in " +
                   path + " (measured 2026-01-02T03:04:07Z)"),
            std::string::npos)
      << r;
  o.llcBytes = 48 * kMiB;
  EXPECT_NE(core::tuneReport(o).find("shm streaming stores (direct collectives' outputs together): "
                                     "24 MiB\n    from: BRAID_LLC_SIZE (half of it)"),
            std::string::npos);
  o.llcBytes = 0;
  o.shmCmaThresholdBytes = 4096;
  o.chunkBytes = kMiB;
  r = core::tuneReport(o);
  EXPECT_NE(r.find("4 KiB\n    from: BRAID_SHM_CMA_THRESHOLD"), std::string::npos) << r;
  EXPECT_NE(r.find("chunk size (message algorithms): 1 MiB\n    from: BRAID_CHUNK_SIZE"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("shm chunk (direct collectives, one host): 1 MiB\n    from: BRAID_CHUNK_SIZE"),
            std::string::npos)
      << r;
  o.shmChunkBytes = 128 * kKiB;
  r = core::tuneReport(o);
  EXPECT_NE(
      r.find("shm chunk (direct collectives, one host): 128 KiB\n    from: BRAID_SHM_CHUNK_SIZE"),
      std::string::npos)
      << r;
  o.shmCmaDisable = true;
  EXPECT_NE(core::tuneReport(o).find("never\n    from: BRAID_SHM_CMA_DISABLE"), std::string::npos);
}

}  // namespace
}  // namespace braid
