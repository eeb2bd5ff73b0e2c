// What a user sees when ranks disagree or one does not show up: Mismatch messages that name
// both calls (on both ranks involved, never a hang), Timeout messages that name the ranks that
// have not reached the operation (threads and processes), per-call timeouts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Options diagOptions() {
  Options o = testOptions();
  o.diagStall = 200ms;
  o.diagGrace = 1500ms;
  o.flightSignal = false;
  o.logLevel = 0;  // the failure dumps of these tests would only clutter the log
  return o;
}

struct Caught {
  std::optional<ErrorCode> code;
  std::string message;
};

template <class F>
Caught capture(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.detail()};
  }
  return {};
}

TEST(MismatchDiagnosis, BothRanksNameBothCallsExactly) {
  for (bool tcp : {false, true})
    for (const char* algo : {"", "ring", "recursive_doubling"}) {
      SCOPED_TRACE(std::string(tcp ? "tcp" : "shm") + " BRAID_ALGO=" + algo);
      Options o = diagOptions();
      o.shmDisable = tcp;
      o.algo = std::string(algo).empty() ? "" : std::string("allreduce:") + algo;
      std::vector<Caught> got(2);
      runThreads(2, o, [&](Comm& c) {
        std::vector<float> buf(1024, 1.0f), out(2048);
        for (int i = 0; i < 3; ++i)
          c.allreduce(buf.data(), buf.data(), 8, DataType::Float32, ReduceOp::Sum);
        got[static_cast<std::size_t>(c.rank())] = capture([&] {
          if (c.rank() == 0)
            c.allreduce(buf.data(), buf.data(), 1024, DataType::Float32, ReduceOp::Sum);
          else
            c.allgather(buf.data(), out.data(), 1024, DataType::Float32);
        });
      });
      EXPECT_EQ(got[0].code, ErrorCode::Mismatch) << got[0].message;
      EXPECT_EQ(got[1].code, ErrorCode::Mismatch) << got[1].message;
      EXPECT_EQ(got[0].message,
                "rank 1 called allgather(fp32, count=1024) where rank 0 called allreduce(fp32, "
                "count=1024) at op #3 of communicator 0");
      EXPECT_EQ(got[1].message,
                "rank 0 called allreduce(fp32, count=1024) where rank 1 called allgather(fp32, "
                "count=1024) at op #3 of communicator 0");
    }
}

TEST(MismatchDiagnosis, CountsMustAgree) {
  for (bool tcp : {false, true}) {
    SCOPED_TRACE(tcp ? "tcp" : "shm");
    Options o = diagOptions();
    o.shmDisable = tcp;
    std::vector<Caught> got(2);
    runThreads(2, o, [&](Comm& c) {
      std::vector<float> buf(1024, 1.0f);
      got[static_cast<std::size_t>(c.rank())] = capture([&] {
        c.allreduce(buf.data(), buf.data(), c.rank() == 0 ? 1024 : 1000, DataType::Float32,
                    ReduceOp::Sum);
      });
    });
    EXPECT_EQ(got[0].code, ErrorCode::Mismatch) << got[0].message;
    EXPECT_EQ(got[1].code, ErrorCode::Mismatch) << got[1].message;
    EXPECT_EQ(got[0].message,
              "rank 1 called allreduce(fp32, count=1000) where rank 0 called allreduce(fp32, "
              "count=1024) at op #0 of communicator 0");
    EXPECT_EQ(got[1].message,
              "rank 0 called allreduce(fp32, count=1024) where rank 1 called allreduce(fp32, "
              "count=1000) at op #0 of communicator 0");
  }
}

TEST(MismatchDiagnosis, EveryRankFailsAndTheInvolvedOnesNameTheOddRank) {
  for (int n : {3, 4, 5}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<Caught> got(static_cast<std::size_t>(n));
    const auto t0 = Clock::now();
    runThreads(n, diagOptions(), [&](Comm& c) {
      std::vector<float> buf(64, 1.0f), out(64 * static_cast<std::size_t>(n));
      c.barrier();
      got[static_cast<std::size_t>(c.rank())] = capture([&] {
        if (c.rank() == 2)
          c.allgather(buf.data(), out.data(), 64, DataType::Float32);
        else
          c.allreduce(buf.data(), buf.data(), 64, DataType::Float32, ReduceOp::Sum);
      });
    });
    EXPECT_LT(Clock::now() - t0, 25s);
    int mismatches = 0;
    for (int r = 0; r < n; ++r) {
      const Caught& g = got[static_cast<std::size_t>(r)];
      ASSERT_TRUE(g.code) << "rank " << r << " did not fail";
      if (*g.code == ErrorCode::Mismatch) {
        ++mismatches;
        EXPECT_NE(g.message.find("at op #1 of communicator 0"), std::string::npos) << g.message;
        const bool odd =
            g.message.find("rank 2 called allgather(fp32, count=64)") != std::string::npos ||
            g.message.find("where rank 2 called allgather(fp32, count=64)") != std::string::npos;
        EXPECT_TRUE(odd) << "rank " << r << ": " << g.message;
      } else {
        EXPECT_EQ(*g.code, ErrorCode::PeerLost) << "rank " << r << ": " << g.message;
      }
    }
    EXPECT_GE(mismatches, 2) << "both ranks of a mismatched pair say Mismatch";
  }
}

TEST(MismatchDiagnosis, NoMessageToCompareStillFailsLongBeforeTheTimeout) {
  // Rank 0 waits in the shared-memory barrier of a direct allreduce; rank 1 waits for a ring
  // message of allgatherv. No message ever meets a receive, so no tag can be compared: the
  // monitors find the two ranks stalled at op #1 in different calls through the store.
  Options o = diagOptions();
  o.execTimeout = 60s;
  std::vector<Caught> got(2);
  const auto t0 = Clock::now();
  runThreads(2, o, [&](Comm& c) {
    // 2 KiB: above shm_ll's line (SharedMemoryGroup::kLineBytes), so shm_direct's barrier.
    std::vector<float> buf(512, 1.0f), out(1024);
    const std::vector<std::size_t> counts = {512, 512};
    c.barrier();
    got[static_cast<std::size_t>(c.rank())] = capture([&] {
      if (c.rank() == 0)
        c.allreduce(buf.data(), buf.data(), 512, DataType::Float32, ReduceOp::Sum);
      else
        c.allgatherv(buf.data(), out.data(), counts, {}, DataType::Float32);
    });
  });
  EXPECT_LT(Clock::now() - t0, 30s) << "diagnosed, not timed out";
  for (int r = 0; r < 2; ++r) {
    const Caught& g = got[static_cast<std::size_t>(r)];
    EXPECT_EQ(g.code, ErrorCode::Mismatch) << "rank " << r << ": " << g.message;
    const std::string ar = "allreduce(fp32, count=512)";
    const std::string ag = "allgatherv(fp32, total count=1024, counts hash=";
    if (r == 0) {
      EXPECT_EQ(g.message.rfind("rank 1 called " + ag, 0), 0u) << g.message;
      EXPECT_NE(g.message.find(") where rank 0 called " + ar + " at op #1 of communicator 0"),
                std::string::npos)
          << g.message;
    } else {
      EXPECT_EQ(g.message.rfind("rank 0 called " + ar + " where rank 1 called " + ag, 0), 0u)
          << g.message;
      EXPECT_NE(g.message.find(") at op #1 of communicator 0"), std::string::npos) << g.message;
    }
  }
}

TEST(MismatchDiagnosis, LegitimatelyDifferentPerRankCountsNeverMismatch) {
  std::mt19937 rng(7);
  for (int n : {1, 2, 3, 5}) {
    std::vector<std::size_t> counts(static_cast<std::size_t>(n));
    for (auto& x : counts) x = rng() % 40;
    counts[0] = 0;
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    runThreads(n, diagOptions(), [&](Comm& c) {
      const std::size_t me = counts[static_cast<std::size_t>(c.rank())];
      std::vector<float> mine(me + 1, static_cast<float>(c.rank())), all(total + 1);
      c.allgatherv(mine.data(), all.data(), counts, {}, DataType::Float32);
      std::size_t off = 0;
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i)
          ASSERT_EQ(all[off++], static_cast<float>(r));
      // alltoallv: rank r sends (r + j) % 3 elements to rank j; every rank's counts differ.
      std::vector<std::size_t> sc(static_cast<std::size_t>(n)), rc(static_cast<std::size_t>(n));
      for (int j = 0; j < n; ++j) {
        sc[static_cast<std::size_t>(j)] = static_cast<std::size_t>((c.rank() + j) % 3);
        rc[static_cast<std::size_t>(j)] = static_cast<std::size_t>((j + c.rank()) % 3);
      }
      std::vector<float> s(std::accumulate(sc.begin(), sc.end(), std::size_t{0}) + 1, 1.0f);
      std::vector<float> r(std::accumulate(rc.begin(), rc.end(), std::size_t{0}) + 1, 0.0f);
      c.alltoallv(s.data(), sc, {}, r.data(), rc, {}, DataType::Float32);
      for (std::size_t i = 0; i + 1 < r.size(); ++i) ASSERT_EQ(r[i], 1.0f);
    });
  }
}

// ---------------------------------------------------------------- timeouts

TEST(TimeoutDiagnosis, PerCallTimeoutFiresWithTheNamedError) {
  Options o = diagOptions();
  o.execTimeout = 60s;  // the default must not be what fires
  runThreads(2, o, [](Comm& c) {
    std::vector<float> buf(16, 1.0f);
    c.allreduce(buf.data(), buf.data(), 16, DataType::Float32, ReduceOp::Sum);
    if (c.rank() == 1) {
      std::this_thread::sleep_for(5s);  // alive, but never calls the second allreduce
      return;
    }
    EXPECT_FALSE(c.setOpTimeout(std::nullopt));
    const auto t0 = Clock::now();
    Caught g;
    {
      ScopedOpTimeout bound(c, 400ms);
      EXPECT_EQ(c.setOpTimeout(400ms), std::optional<std::chrono::milliseconds>(400ms));
      g = capture(
          [&] { c.allreduce(buf.data(), buf.data(), 16, DataType::Float32, ReduceOp::Sum); });
    }
    EXPECT_LT(Clock::now() - t0, 20s);
    // Never early: the deadline adds the coarse clock's tick to the operation's coarse start.
    EXPECT_GE(Clock::now() - t0, 400ms);
    EXPECT_EQ(g.code, ErrorCode::Timeout) << g.message;
    EXPECT_EQ(g.message.rfind("allreduce #1 timed out after 400 ms on rank 0: rank 1 has not "
                              "reached it (rank 1 did not report)",
                              0),
              0u)
        << g.message;
    EXPECT_FALSE(c.setOpTimeout(std::nullopt)) << "the guard restored the default";
  });
}

TEST(TimeoutDiagnosis, BadPerCallTimeoutIsInvalidArgument) {
  runThreads(1, diagOptions(), [](Comm& c) {
    for (auto bad : {0ms, -5ms}) {
      Caught g = capture([&] { c.setOpTimeout(bad); });
      EXPECT_EQ(g.code, ErrorCode::InvalidArgument);
      EXPECT_NE(g.message.find("setOpTimeout on rank 0"), std::string::npos) << g.message;
      EXPECT_NE(g.message.find("'timeout'"), std::string::npos) << g.message;
    }
    c.barrier();
  });
}

// Ranks 0 and 1 finish gather #1 (they only send to its root) and enter allreduce #2; rank 2, the
// gather's root, waits there for rank 3, which is alive but never calls. Rank 0 times out first
// and must say: ranks 2, 3 have not reached allreduce #2, rank 2 is at op #1 gather, rank 3 did
// not report.
void notReachedScenario(Comm& c, std::string& rank0Message, std::optional<ErrorCode>& rank0Code) {
  std::vector<float> buf(4, 1.0f), all(16);
  c.allreduce(buf.data(), buf.data(), 4, DataType::Float32, ReduceOp::Sum);  // op #0
  if (c.rank() == 3) {
    std::this_thread::sleep_for(9s);
    return;
  }
  if (c.rank() == 2) {
    ScopedOpTimeout bound(c, 15s);
    capture([&] { c.gather(buf.data(), all.data(), 4, DataType::Float32, 2); });  // op #1
    return;
  }
  c.gather(buf.data(), nullptr, 4, DataType::Float32, 2);
  ScopedOpTimeout bound(c, c.rank() == 0 ? 2500ms : 15000ms);
  Caught g =
      capture([&] { c.allreduce(buf.data(), buf.data(), 4, DataType::Float32, ReduceOp::Sum); });
  if (c.rank() == 0) {
    rank0Code = g.code;
    rank0Message = g.message;
  } else {
    EXPECT_TRUE(g.code) << "rank 1 must fail once rank 0 gave up";
  }
}

constexpr const char* kNotReached =
    "allreduce #2 timed out after 2500 ms on rank 0: ranks 2, 3 have not reached it (rank 2 is "
    "at op #1 gather; rank 3 did not report)";

// Rank 3 never reports, so rank 0 always waits the whole grace period: a long one costs little
// and gives the other ranks' monitors time to publish even on a loaded machine.
Options notReachedOptions() {
  Options o = diagOptions();
  o.diagGrace = 4000ms;
  return o;
}

TEST(TimeoutDiagnosis, NamesTheRanksThatHaveNotReachedTheOpThreads) {
  std::string message;
  std::optional<ErrorCode> code;
  runThreads(4, notReachedOptions(), [&](Comm& c) { notReachedScenario(c, message, code); });
  EXPECT_EQ(code, ErrorCode::Timeout) << message;
  EXPECT_EQ(message.rfind(kNotReached, 0), 0u) << message;
}

TEST(TimeoutDiagnosis, NamesTheRanksThatHaveNotReachedTheOpOverTcp) {
  std::string message;
  std::optional<ErrorCode> code;
  Options o = notReachedOptions();
  o.shmDisable = true;
  runThreads(4, o, [&](Comm& c) { notReachedScenario(c, message, code); });
  EXPECT_EQ(code, ErrorCode::Timeout) << message;
  EXPECT_EQ(message.rfind(kNotReached, 0), 0u) << message;
}

TEST(TimeoutDiagnosis, NamesTheRanksThatHaveNotReachedTheOpProcesses) {
  // Each rank is a process: rank 0 checks its own message (a failed EXPECT fails its exit code).
  runProcesses(4, notReachedOptions(), [&](Comm& c) {
    std::string message;
    std::optional<ErrorCode> code;
    notReachedScenario(c, message, code);
    if (c.rank() == 0) {
      EXPECT_EQ(code, ErrorCode::Timeout) << message;
      EXPECT_EQ(message.rfind(kNotReached, 0), 0u) << message;
    }
  });
}

TEST(DiagnosisEnv, VariablesParseAndBadValuesAreNamed) {
  const char* names[] = {"BRAID_DIAG_STALL", "BRAID_DIAG_GRACE", "BRAID_TIMELINE",
                         "BRAID_FINGERPRINT", "BRAID_FLIGHT_DIR"};
  ::setenv("BRAID_DIAG_STALL", "250", 1);
  ::setenv("BRAID_DIAG_GRACE", "0", 1);
  ::setenv("BRAID_TIMELINE", "/tmp/t-%r.json", 1);
  ::setenv("BRAID_FINGERPRINT", "0", 1);
  ::setenv("BRAID_FLIGHT_DIR", "/tmp/flight", 1);
  Options o = Options::fromEnv();
  EXPECT_EQ(o.diagStall, 250ms);
  EXPECT_EQ(o.diagGrace, 0ms);
  EXPECT_EQ(o.timeline, "/tmp/t-%r.json");
  EXPECT_FALSE(o.opFingerprint);
  EXPECT_EQ(o.flightDir, "/tmp/flight");
  ::setenv("BRAID_DIAG_STALL", "-1", 1);
  Caught g = capture([] { Options::fromEnv(); });
  EXPECT_EQ(g.code, ErrorCode::InvalidArgument);
  EXPECT_NE(g.message.find("BRAID_DIAG_STALL"), std::string::npos) << g.message;
  ::setenv("BRAID_DIAG_STALL", "soon", 1);
  g = capture([] { Options::fromEnv(); });
  EXPECT_NE(g.message.find("BRAID_DIAG_STALL"), std::string::npos) << g.message;
  for (const char* n : names) ::unsetenv(n);
  const Options d = Options::fromEnv();
  EXPECT_EQ(d.diagStall, 1000ms);
  EXPECT_EQ(d.diagGrace, 2000ms);
  EXPECT_TRUE(d.opFingerprint);
  EXPECT_EQ(d.flightRecorderOps, 128u);
  EXPECT_TRUE(d.flightSignal);
}

}  // namespace
}  // namespace braid::test
