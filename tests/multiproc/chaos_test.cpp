// Chaos: ranks as processes run a seeded random stream of operations (harness/random_ops: every
// collective, v-variants, send/recv, async mixes, results checked), and the test SIGKILLs one or
// two random ranks at a random moment. Every survivor must fail with Error(PeerLost) within the
// exec timeout plus slack, at least one survivor's error must name a killed rank (the others may
// name a survivor that failed before them: a failed rank closes its transport, and its peers see
// PeerLost naming it, as docs/architecture.md documents), destroying the failed communicator must
// not hang, and afterwards no process is left and nothing new is in /dev/shm.
//
// Seeded: the seed is printed; BRAID_CHAOS_SEED=<seed> replays a run, BRAID_CHAOS_ROUNDS=<n>
// runs n rounds (default 6; the long form, see docs/testing.md, runs hundreds).
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/random_ops.hpp"
#include "harness/ranks.hpp"
#include "harness/store_process.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kExecTimeout = 10s;
// Slack on top of the exec timeout for a loaded machine (2 cores shared by many builds).
constexpr auto kSlack = 15s;

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// The ranks named as peers in an error message: every "rank N (" (how transports describe a
// peer: "rank 3 (127.0.0.1:4100)", "rank 3 (pid 811)").
std::set<int> namedPeers(const std::string& msg) {
  std::set<int> out;
  for (std::size_t at = msg.find("rank "); at != std::string::npos;
       at = msg.find("rank ", at + 1)) {
    std::size_t i = at + 5, j = i;
    while (j < msg.size() && std::isdigit(static_cast<unsigned char>(msg[j])) != 0) ++j;
    if (j > i && j + 1 < msg.size() && msg[j] == ' ' && msg[j + 1] == '(')
      out.insert(std::atoi(msg.substr(i, j - i).c_str()));
  }
  return out;
}

struct Round {
  int n;
  std::vector<int> victims;
  std::chrono::milliseconds delay;
  int variant;  // 0 shared memory, 1 TCP, 2 deterministic on shared memory
  std::uint64_t opsSeed;
};

const char* variantName(int v) {
  static const char* kNames[] = {"shm", "tcp", "deterministic shm", "tcp 2x2 striped streams"};
  return kNames[v];
}

// What a rank reports on its pipe: "R\n" when ready, then "E <code> <ns> <ops> <message>\n" when
// an operation failed, or "N <ops>\n" when it ran out of time without an error.
int rankMain(const Round& rd, int rank, std::uint16_t port, int fd) {
  // Failures recorded before the fork belong to the parent's earlier rounds.
  const int failuresBefore =
      ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
  Options o = testOptions();
  o.execTimeout = kExecTimeout;
  o.shmDisable = rd.variant == 1 || rd.variant == 3;
  o.deterministic = rd.variant == 2;
  if (rd.variant == 3) {  // 4 TCP streams per peer, messages from 1000 bytes striped
    o.socketThreads = 2;
    o.socketsPerThread = 2;
    o.socketStripeMinBytes = 1000;
  }
  auto store = std::make_shared<TcpStore>("127.0.0.1", port, o.connectTimeout);
  auto comm = Comm::create(store, rank, rd.n, o);
  comm->barrier();
  writeAll(fd, "R\n");
  const RandomOps ops(rd.opsSeed, 2000);
  const auto giveUp = Clock::now() + 60s;
  std::uint64_t i = 0;
  std::string report;
  try {
    for (; Clock::now() < giveUp; ++i) ops.run(*comm, i);
    report = "N " + std::to_string(i) + "\n";
  } catch (const Error& e) {
    report = "E " + std::to_string(static_cast<int>(e.code())) + " " + std::to_string(nowNs()) +
             " " + std::to_string(i) + " " + e.what() + "\n";
    for (char& ch : report)
      if (ch == '\n') ch = ' ';
    report.back() = '\n';
  }
  writeAll(fd, report);
  comm.reset();  // destroying a failed communicator must not hang (the parent's deadline)
  store.reset();
  return ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count() >
                 failuresBefore
             ? 2
             : 0;
}

void runRound(const Round& rd, int index, std::uint64_t seed) {
  std::string victims;
  for (int v : rd.victims) victims += " " + std::to_string(v);
  std::printf("[ chaos    ] seed %llu round %d: %d ranks (%s), kill%s after %lld ms\n",
              static_cast<unsigned long long>(seed), index, rd.n, variantName(rd.variant),
              victims.c_str(), static_cast<long long>(rd.delay.count()));
  std::fflush(stdout);
  SCOPED_TRACE("chaos seed " + std::to_string(seed) + " round " + std::to_string(index) +
               " (replay: BRAID_CHAOS_SEED=" + std::to_string(seed) + ")");
  const auto shmBefore = braidShmEntries();
  std::vector<pid_t> pids;
  std::vector<int> fds;
  {
    StoreProcess store;
    ASSERT_NE(store.port(), 0) << "the store process did not start";
    for (int r = 0; r < rd.n; ++r) {
      int p[2];
      ASSERT_EQ(::pipe(p), 0);
      std::fflush(stdout);
      std::fflush(stderr);
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(p[0]);
        int code = 1;
        try {
          code = rankMain(rd, r, store.port(), p[1]);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "chaos rank %d: %s\n", r, e.what());
        }
        std::fflush(stdout);
        std::fflush(stderr);
        ::_exit(code);
      }
      ::close(p[1]);
      pids.push_back(pid);
      fds.push_back(p[0]);
    }
    // Wait until every rank is connected and running its stream.
    const auto readyBy = Clock::now() + 60s;
    for (int r = 0; r < rd.n; ++r) {
      char c[2] = {0, 0};
      pollfd pfd{fds[static_cast<std::size_t>(r)], POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(readyBy - Clock::now()).count();
      const bool ready = ::poll(&pfd, 1, static_cast<int>(std::max<long long>(left, 0))) == 1 &&
                         ::read(fds[static_cast<std::size_t>(r)], c, 2) == 2 && c[0] == 'R';
      EXPECT_TRUE(ready) << "rank " << r << " did not start";
    }
    std::this_thread::sleep_for(rd.delay);
    const std::int64_t killedAt = nowNs();
    for (int v : rd.victims) ::kill(pids[static_cast<std::size_t>(v)], SIGKILL);

    // Reap everyone by the deadline; a rank still running is a hang.
    const auto end = Clock::now() + kExecTimeout + kSlack;
    std::vector<int> status(static_cast<std::size_t>(rd.n), -1);
    int remaining = rd.n;
    while (remaining > 0 && Clock::now() < end) {
      for (int r = 0; r < rd.n; ++r) {
        int st = 0;
        const auto ur = static_cast<std::size_t>(r);
        if (status[ur] == -1 && ::waitpid(pids[ur], &st, WNOHANG) == pids[ur]) {
          status[ur] = st;
          --remaining;
        }
      }
      std::this_thread::sleep_for(5ms);
    }
    bool anyNamesVictim = false;
    for (int r = 0; r < rd.n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      const bool victim = std::find(rd.victims.begin(), rd.victims.end(), r) != rd.victims.end();
      if (status[ur] == -1) {
        ::kill(pids[ur], SIGKILL);
        ::waitpid(pids[ur], nullptr, 0);
        ADD_FAILURE() << "rank " << r << " was still running " << (kExecTimeout + kSlack).count()
                      << " s after the kill (hang)";
      }
      const std::string out = readAll(fds[ur]);
      ::close(fds[ur]);
      if (victim) {
        EXPECT_TRUE(status[ur] == -1 ||
                    (WIFSIGNALED(status[ur]) && WTERMSIG(status[ur]) == SIGKILL))
            << "victim rank " << r << " status " << status[ur];
        continue;
      }
      EXPECT_TRUE(status[ur] != -1 && WIFEXITED(status[ur]) && WEXITSTATUS(status[ur]) == 0)
          << "survivor rank " << r << " status " << status[ur]
          << " (2: a wrong result before the kill)";
      std::istringstream in(out);
      char kind = 0;
      in >> kind;
      if (kind != 'E') {
        ADD_FAILURE() << "survivor rank " << r << " reported no error: '" << out << "'";
        continue;
      }
      int code = -1;
      long long at = 0;
      unsigned long long ops = 0;
      in >> code >> at >> ops;
      std::string msg;
      std::getline(in, msg);
      std::printf("[ chaos    ]   rank %d after %.3f s (op #%llu): %s\n", r,
                  static_cast<double>(at - killedAt) / 1e9, ops, msg.c_str());
      EXPECT_EQ(code, static_cast<int>(ErrorCode::PeerLost)) << "rank " << r << ": " << msg;
      EXPECT_LT(static_cast<double>(at - killedAt) / 1e9,
                std::chrono::duration<double>(kExecTimeout + kSlack).count())
          << "rank " << r << " learned of the loss too late: " << msg;
      const std::set<int> named = namedPeers(msg);
      EXPECT_FALSE(named.empty()) << "rank " << r << "'s error names no peer: " << msg;
      EXPECT_EQ(named.count(r), 0u) << msg;
      for (int v : rd.victims) anyNamesVictim = anyNamesVictim || named.count(v) > 0;
    }
    EXPECT_TRUE(anyNamesVictim) << "no survivor's error names a killed rank";
  }
  std::fflush(stdout);
  EXPECT_EQ(childrenOfThisProcess(), std::vector<int>{}) << "processes left behind";
  EXPECT_EQ(braidShmEntries(), shmBefore) << "/dev/shm entries left behind";
}

TEST(Chaos, KillRandomRanksDuringRandomOperations) {
  const std::uint64_t seed = seedFromEnv("BRAID_CHAOS_SEED");
  const char* roundsEnv = std::getenv("BRAID_CHAOS_ROUNDS");
  const int rounds = roundsEnv != nullptr ? std::atoi(roundsEnv) : 6;
  std::printf("[ chaos    ] seed %llu, %d rounds (replay: BRAID_CHAOS_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), rounds, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < rounds && !HasFatalFailure(); ++i) {
    Round rd;
    rd.n = 3 + static_cast<int>(rng() % 4);  // 3..6 ranks
    rd.variant = static_cast<int>(rng() % 3);
    rd.delay = std::chrono::milliseconds(20 + rng() % 1500);
    rd.opsSeed = rng();
    const int kills = rd.n >= 5 && rng() % 3 == 0 ? 2 : 1;
    while (static_cast<int>(rd.victims.size()) < kills) {
      const int v = static_cast<int>(rng() % static_cast<std::uint64_t>(rd.n));
      if (std::find(rd.victims.begin(), rd.victims.end(), v) == rd.victims.end())
        rd.victims.push_back(v);
    }
    runRound(rd, i, seed);
  }
}

TEST(Chaos, KillRandomRanksOverStripedTcpStreams) {
  // The same, over TCP with 2 x 2 sockets per peer (tcp_streams.hpp): a killed rank's loss is
  // seen on whichever stream a survivor waits on.
  const std::uint64_t seed = seedFromEnv("BRAID_CHAOS_SEED");
  std::printf("[ chaos    ] seed %llu, striped streams (replay: BRAID_CHAOS_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 2 && !HasFatalFailure(); ++i) {
    Round rd;
    rd.n = 3 + static_cast<int>(rng() % 3);  // 3..5 ranks
    rd.variant = 3;
    rd.delay = std::chrono::milliseconds(20 + rng() % 1500);
    rd.opsSeed = rng();
    rd.victims.push_back(static_cast<int>(rng() % static_cast<std::uint64_t>(rd.n)));
    runRound(rd, i, seed);
  }
}

}  // namespace
}  // namespace braid::test
