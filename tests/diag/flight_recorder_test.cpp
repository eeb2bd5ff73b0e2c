// The flight recorder: a fixed ring of the last K operations with their state and times, dumped
// as text when an operation fails the communicator and, from a separate thread, on SIGUSR1 (only
// when the application has no handler of its own, and not with BRAID_FLIGHT_SIGNAL=0).
#include "core/flight_recorder.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.hpp"
#include "harness/store_process.hpp"
#include "store/memory_store.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string makeTempDir() {
  char tmpl[] = "/tmp/braid-flight-test-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  if (d == nullptr) throw std::runtime_error("mkdtemp failed");
  return d;
}

std::vector<std::string> filesIn(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
    ::closedir(d);
  }
  return out;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void removeDir(const std::string& dir) {
  for (const auto& f : filesIn(dir)) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

int countOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

core::OpDesc allreduceDesc(std::uint64_t seq, std::uint64_t count) {
  core::OpDesc d;
  d.coll = Collective::Allreduce;
  d.count = count;
  d.seq = seq;
  return d;
}

TEST(FlightRecorder, RenameNamesWhatAHierarchysPhasesRan) {
  core::FlightRecorder rec(4, Clock::now());
  const auto d = allreduceDesc(0, 100);
  const auto s = rec.begin(d, 400, "hierarchical", Clock::now());
  const std::string name = "hierarchical(node: reducescatterv shm_direct; leaders: point-to-point)";
  rec.rename(s, name.c_str());
  rec.finished(s, d, nullptr, Clock::now());
  rec.rename(s + 7, "never");  // not in the ring: nothing happens
  const std::string text = rec.dump("rename");
  EXPECT_NE(text.find(" " + name), std::string::npos) << text;
  EXPECT_EQ(text.find("never"), std::string::npos) << text;
}

TEST(FlightRecorder, KeepsTheLastKOperationsWithStateAndTimes) {
  const auto origin = Clock::now();
  core::FlightRecorder rec(4, origin);
  for (std::uint64_t i = 0; i < 6; ++i) {
    const auto d = allreduceDesc(i, 100 + i);
    const auto s = rec.issued(d, 4 * (100 + i), Clock::now());
    EXPECT_EQ(s, i + 1);
    rec.started(s, d, "ring", Clock::now());
    if (i < 5) rec.finished(s, d, i == 4 ? "braid Timeout: boom" : nullptr, Clock::now());
  }
  const std::string text = rec.dump("unit test");
  EXPECT_NE(text.find("=== braid flight recorder: unit test ==="), std::string::npos) << text;
  EXPECT_NE(text.find("last 4 of 6 operations (capacity 4)"), std::string::npos) << text;
  EXPECT_EQ(text.find("count=100)"), std::string::npos) << "op #0 left the ring";
  EXPECT_EQ(text.find("count=101)"), std::string::npos) << "op #1 left the ring";
  for (int i = 2; i < 6; ++i)
    EXPECT_NE(text.find("op #" + std::to_string(i) + " "), std::string::npos) << text;
  EXPECT_NE(text.find("allreduce(fp32, count=105, op=sum)"), std::string::npos) << text;
  EXPECT_EQ(countOf(text, " done "), 2) << text;
  EXPECT_EQ(countOf(text, " failed "), 1) << text;
  EXPECT_EQ(countOf(text, " running "), 1) << text;
  EXPECT_NE(text.find("error: braid Timeout: boom"), std::string::npos) << text;
  EXPECT_NE(text.find("running for"), std::string::npos) << text;
  EXPECT_NE(text.find(" ring "), std::string::npos) << text;
  const auto pos = rec.position();
  EXPECT_TRUE(pos.any);
  EXPECT_EQ(pos.desc.seq, 5u);
  EXPECT_EQ(pos.state, core::OpState::Running);
  const auto recent = rec.recentCollectives(3);
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent.front().seq, 3u);
  EXPECT_EQ(recent.back().seq, 5u);
}

TEST(FlightRecorder, BeginRecordsIssueAndStartAtOnceAtAnyCapacity) {
  // begin() (a blocking call run inline) mixed with issued()/started() (queued ones); capacity 3
  // takes the modulo path, 4 the mask path, 1 and 0 the edges. Both wrap the same way.
  for (std::size_t cap : {0u, 1u, 3u, 4u}) {
    const auto origin = Clock::now();
    core::FlightRecorder rec(cap, origin);
    for (std::uint64_t i = 0; i < 7; ++i) {
      const auto d = allreduceDesc(i, 200 + i);
      std::uint64_t s = 0;
      if (i % 2 == 0) {
        s = rec.begin(d, 8, "shm_ll", Clock::now());
      } else {
        s = rec.issued(d, 8, Clock::now());
        rec.started(s, d, "ring", Clock::now());
      }
      EXPECT_EQ(s, i + 1) << "capacity " << cap;
      if (i < 6) rec.finished(s, d, nullptr, Clock::now());
    }
    const std::string text = rec.dump("begin");
    const std::size_t kept = std::min<std::size_t>(cap, 7);
    if (cap > 0) {
      EXPECT_NE(text.find("last " + std::to_string(kept) + " of 7 operations (capacity " +
                          std::to_string(cap) + ")"),
                std::string::npos)
          << text;
    }
    for (std::uint64_t i = 0; i < 7; ++i) {
      const bool inRing = cap > 0 && i >= 7 - kept;
      EXPECT_EQ(text.find("count=" + std::to_string(200 + i) + ",") != std::string::npos, inRing)
          << "capacity " << cap << " op " << i << "\n"
          << text;
    }
    if (cap > 0) {
      EXPECT_EQ(countOf(text, " running "), 1) << text;           // op 6 (begin)
      EXPECT_EQ(countOf(text, " done "), int(kept) - 1) << text;  // the others
      EXPECT_NE(text.find("shm_ll"), std::string::npos) << text;
    }
    const auto pos = rec.position();
    EXPECT_TRUE(pos.any) << cap;
    EXPECT_EQ(pos.desc.seq, 6u) << cap;
    EXPECT_EQ(pos.state, core::OpState::Running) << cap;
  }
}

TEST(FlightRecorder, ZeroCapacityKeepsOnlyThePosition) {
  core::FlightRecorder rec(0, Clock::now());
  const auto d = allreduceDesc(0, 1);
  const auto s = rec.issued(d, 4, Clock::now());
  rec.started(s, d, "ring", Clock::now());
  EXPECT_NE(rec.dump("off").find("BRAID_FLIGHT_RECORDER=0"), std::string::npos);
  EXPECT_EQ(rec.position().desc.seq, 0u);
  EXPECT_TRUE(rec.recentCollectives(8).empty());
}

TEST(FlightRecorder, CommunicatorFailureDumpsEveryRankToFlightDir) {
  const std::string dir = makeTempDir();
  Options o = testOptions();
  o.flightDir = dir;
  o.flightSignal = false;
  o.diagStall = 200ms;
  o.diagGrace = 1000ms;
  o.logLevel = 0;
  runThreads(3, o, [](Comm& c) {
    std::vector<float> buf(32, 1.0f);
    for (int i = 0; i < 3; ++i)
      c.allreduce(buf.data(), buf.data(), 32, DataType::Float32, ReduceOp::Sum);
    c.broadcast(buf.data(), 8, DataType::Float32, 1);
    if (c.rank() == 2) {
      std::this_thread::sleep_for(3s);
      return;
    }
    c.setOpTimeout(500ms);
    EXPECT_THROW(c.barrier(), Error);
  });
  const auto files = filesIn(dir);
  ASSERT_EQ(files.size(), 2u) << "ranks 0 and 1 failed; rank 2 never did";
  for (const auto& f : files) {
    const std::string text = readFile(f);
    SCOPED_TRACE(f + ":\n" + text);
    EXPECT_NE(f.find("braid-flight.comm0.rank"), std::string::npos);
    EXPECT_NE(text.find("reason: operation failed: braid"), std::string::npos);
    EXPECT_EQ(countOf(text, "allreduce(fp32, count=32, op=sum)"), 3);
    EXPECT_NE(text.find("op #3    broadcast(fp32, count=8, root=1)"), std::string::npos);
    EXPECT_NE(text.find("op #4    barrier()"), std::string::npos);
    EXPECT_NE(text.find("=== end of flight recorder"), std::string::npos);
  }
  removeDir(dir);
}

TEST(FlightRecorderSignal, Sigusr1DumpsEveryRankProcess) {
  const std::string dir = makeTempDir();
  Options o = testOptions();
  o.flightDir = dir;
  o.logLevel = 0;
  runProcesses(2, o, [&](Comm& c) {
    std::vector<float> buf(16, 1.0f);
    for (int i = 0; i < 5; ++i)
      c.allreduce(buf.data(), buf.data(), 16, DataType::Float32, ReduceOp::Sum);
    c.barrier();
    const std::string mine = dir + "/braid-flight.comm0.rank" + std::to_string(c.rank()) + ".pid" +
                             std::to_string(::getpid()) + ".txt";
    ASSERT_EQ(::kill(::getpid(), SIGUSR1), 0);  // the process survives: braid handles it
    std::string text;
    const auto end = Clock::now() + 20s;
    while (Clock::now() < end && text.find("=== end of flight recorder") == std::string::npos) {
      std::this_thread::sleep_for(20ms);
      text = readFile(mine);
    }
    EXPECT_NE(text.find("reason: SIGUSR1"), std::string::npos) << text;
    EXPECT_NE(text.find("rank " + std::to_string(c.rank()) + " of communicator 0 (size 2)"),
              std::string::npos)
        << text;
    EXPECT_EQ(countOf(text, "allreduce(fp32, count=16, op=sum)"), 5) << text;
    EXPECT_NE(text.find("op #5    barrier()"), std::string::npos) << text;
    EXPECT_EQ(countOf(text, " done "), 6) << text;
    c.barrier();
  });
  removeDir(dir);
}

volatile sig_atomic_t gAppHandlerRan = 0;
void appHandler(int) {
  gAppHandlerRan = 1;
}

bool isDefaultDisposition() {
  struct sigaction sa {};
  ::sigaction(SIGUSR1, nullptr, &sa);
  return (sa.sa_flags & SA_SIGINFO) == 0 && sa.sa_handler == SIG_DFL;
}

TEST(FlightRecorderSignal, HandlerIsInstalledWhileCommunicatorsLiveAndRestoredAfter) {
  EXPECT_EQ(inChild([] {
              if (!isDefaultDisposition()) return 1;
              Options o = testOptions();
              auto a = Comm::create(std::make_shared<MemoryStore>(), 0, 1, o);
              if (isDefaultDisposition()) return 2;
              auto b = Comm::create(std::make_shared<MemoryStore>(), 0, 1, o);
              a.reset();
              if (isDefaultDisposition()) return 3;  // b still lives
              b.reset();
              if (!isDefaultDisposition()) return 4;
              return 0;
            }),
            0);
}

TEST(FlightRecorderSignal, ApplicationHandlerIsKept) {
  const std::string dir = makeTempDir();
  EXPECT_EQ(inChild([&] {
              struct sigaction sa {};
              sa.sa_handler = appHandler;
              sigemptyset(&sa.sa_mask);
              ::sigaction(SIGUSR1, &sa, nullptr);
              Options o = testOptions();
              o.flightDir = dir;
              auto c = Comm::create(std::make_shared<MemoryStore>(), 0, 1, o);
              c->barrier();
              ::raise(SIGUSR1);
              std::this_thread::sleep_for(300ms);
              struct sigaction now {};
              ::sigaction(SIGUSR1, nullptr, &now);
              if (now.sa_handler != appHandler) return 1;
              if (gAppHandlerRan != 1) return 2;
              return filesIn(dir).empty() ? 0 : 3;
            }),
            0);
  removeDir(dir);
}

// Waits until `path` holds a complete SIGUSR1 dump.
bool waitForSignalDump(const std::string& path) {
  const auto end = Clock::now() + 20s;
  while (Clock::now() < end) {
    const std::string text = readFile(path);
    if (text.find("reason: SIGUSR1") != std::string::npos &&
        text.find("=== end of flight recorder") != std::string::npos)
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

TEST(FlightRecorderSignal, ForkedChildDumpsItsOwnAndLeavesTheParentsAlone) {
  const std::string dir = makeTempDir();
  auto fileOf = [&](pid_t pid) {
    return dir + "/braid-flight.comm0.rank0.pid" + std::to_string(pid) + ".txt";
  };
  EXPECT_EQ(inChild([&] {
              Options o = testOptions();
              o.flightDir = dir;
              o.logLevel = 0;
              auto parent = Comm::create(std::make_shared<MemoryStore>(), 0, 1, o);
              parent->barrier();
              // The child inherits the handler and the registry, but not the dump thread.
              const int child = inChild([&] {
                auto c = Comm::create(std::make_shared<MemoryStore>(), 0, 1, o);
                float x = 1.0f;
                c->allreduce(&x, &x, 1, DataType::Float32, ReduceOp::Sum);
                ::raise(SIGUSR1);
                const bool ok = waitForSignalDump(fileOf(::getpid()));
                c.reset();
                return ok ? 0 : 1;
              });
              if (child != 0) return 10 + child;
              if (!filesIn(dir).empty() && filesIn(dir).size() != 1) return 3;
              ::raise(SIGUSR1);  // the parent's own dump thread still runs
              if (!waitForSignalDump(fileOf(::getpid()))) return 2;
              const std::string text = readFile(fileOf(::getpid()));
              return text.find("barrier()") != std::string::npos &&
                             text.find("allreduce") == std::string::npos
                         ? 0
                         : 4;
            }),
            0);
  EXPECT_EQ(filesIn(dir).size(), 2u);
  removeDir(dir);
}

TEST(FlightRecorderSignal, FlightSignalOffInstallsNothing) {
  EXPECT_EQ(inChild([] {
              Options o = testOptions();
              o.flightSignal = false;
              auto c = Comm::create(std::make_shared<MemoryStore>(), 0, 1, o);
              return isDefaultDisposition() ? 0 : 1;
            }),
            0);
  // And from the environment.
  ::setenv("BRAID_FLIGHT_SIGNAL", "0", 1);
  ::setenv("BRAID_FLIGHT_RECORDER", "7", 1);
  const Options o = Options::fromEnv();
  ::unsetenv("BRAID_FLIGHT_SIGNAL");
  ::unsetenv("BRAID_FLIGHT_RECORDER");
  EXPECT_FALSE(o.flightSignal);
  EXPECT_EQ(o.flightRecorderOps, 7u);
  ::setenv("BRAID_FLIGHT_RECORDER", "-1", 1);
  EXPECT_THROW(Options::fromEnv(), Error);
  ::unsetenv("BRAID_FLIGHT_RECORDER");
}

}  // namespace
}  // namespace braid::test
