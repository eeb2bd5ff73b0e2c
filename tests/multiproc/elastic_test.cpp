// Elastic communicators (docs/reliability.md): revoke, shrink, grow and join, with ranks as
// processes over a TCP store served by a process of its own (so that any rank may die), and
// with ranks as threads over a MemoryStore.
//
// Elastic.KillRandomRanksShrinkAndGrow: 5 ranks run a seeded random stream of operations
// (harness/random_ops: every collective, v-variants, send/recv, async mixes, every result
// checked against independently computed values); the test SIGKILLs one or two random ranks at
// a random moment; every survivor must fail (PeerLost or Timeout), shrink, get the same member
// set (the survivors in their old order), finish 15 more checked operations on the shrunk
// communicator, grow back to 5 with replacement processes that call Comm::join, and finish 15
// more on the full one. No hang, no process left, nothing new in /dev/shm. Seeded: the seed is
// printed, BRAID_ELASTIC_SEED=<seed> replays it, BRAID_ELASTIC_ROUNDS=<n> runs n rounds
// (default 100, the bounded form CI runs; the long form runs 1000, docs/testing.md).
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/random_ops.hpp"
#include "harness/ranks.hpp"
#include "harness/store_process.hpp"
#include "store/memory_store.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Reads one line (up to '\n') from fd by `until`; empty on timeout or EOF.
std::string readLine(int fd, Clock::time_point until) {
  std::string line;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) != 1) return {};
    char c = 0;
    if (::read(fd, &c, 1) != 1) return {};
    if (c == '\n') return line;
    line += c;
  }
}

// A forked process running fn(pipe write end); its exit code is fn's (1 on an exception).
struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end
  int status = -1;
};

Child spawn(const std::function<int(int)>& fn) {
  int p[2];
  Child c;
  if (::pipe(p) != 0) return c;
  std::fflush(stdout);
  std::fflush(stderr);
  c.pid = ::fork();
  if (c.pid == 0) {
    ::close(p[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int failuresBefore =
        ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
    int code = 1;
    try {
      code = fn(p[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "elastic child: %s\n", e.what());
      writeAll(p[1], std::string("X ") + e.what() + "\n");
    }
    if (::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count() >
        failuresBefore)
      code = 2;
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(code);
  }
  ::close(p[1]);
  c.fd = p[0];
  return c;
}

// Waits for every child by `until`; kills and reports those still running.
void reapAll(std::vector<Child*> kids, Clock::time_point until) {
  int remaining = static_cast<int>(kids.size());
  while (remaining > 0 && Clock::now() < until) {
    remaining = 0;
    for (Child* k : kids) {
      if (k->status != -1) continue;
      int st = 0;
      if (::waitpid(k->pid, &st, WNOHANG) == k->pid)
        k->status = st;
      else
        ++remaining;
    }
    if (remaining > 0) std::this_thread::sleep_for(5ms);
  }
  for (Child* k : kids)
    if (k->status == -1) {
      ::kill(k->pid, SIGKILL);
      ::waitpid(k->pid, nullptr, 0);
      ADD_FAILURE() << "pid " << k->pid << " was still running at the deadline (hang)";
    }
}

bool exitedZero(const Child& c) {
  return c.status != -1 && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
}

Options elasticOptions(bool tcp) {
  Options o = testOptions();
  o.execTimeout = 10s;
  o.connectTimeout = 10s;
  o.shmDisable = tcp;
  o.logLevel = std::getenv("ELASTIC_TEST_LOG") ? 2 : 0;
  return o;
}

std::string errorLine(const Error& e) {
  std::string s = e.what();
  for (char& ch : s)
    if (ch == '\n') ch = ' ';
  return s;
}

// ---------------------------------------------------------------- kill, shrink, grow

struct Round {
  int n = 5;
  std::vector<int> victims;
  std::chrono::milliseconds delay{0};
  bool tcp = false;
  std::uint64_t opsSeed = 0;
};

constexpr int kOpsAfter = 15;

// Runs `kOpsAfter` operations of the stream on c, from the index rank 0 of c says.
std::uint64_t continueOps(Comm& c, const RandomOps& ops, std::uint64_t next) {
  c.broadcast(&next, 1, DataType::Uint64, 0);
  for (int j = 0; j < kOpsAfter; ++j) ops.run(c, next + static_cast<std::uint64_t>(j));
  return next + kOpsAfter;
}

// A rank of the round: "R" when running; after the failure "S <code> <shrunk size> <rank in
// it> <ms from failure to shrunk>", then "G <size>" when grown back and done.
int survivorMain(const Round& rd, int rank, std::uint16_t port, int fd) {
  const Options o = elasticOptions(rd.tcp);
  auto store = std::make_shared<TcpStore>("127.0.0.1", port, o.connectTimeout);
  auto comm = Comm::create(store, rank, rd.n, o);
  comm->barrier();
  writeAll(fd, "R\n");
  const RandomOps ops(rd.opsSeed, 2000);
  const auto giveUp = Clock::now() + 60s;
  std::uint64_t i = 0;
  int code = -1;
  try {
    for (; Clock::now() < giveUp; ++i) ops.run(*comm, i);
    writeAll(fd, "N\n");
    return 1;
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
    if (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Timeout) {
      writeAll(fd, "X unexpected error " + errorLine(e) + "\n");
      return 1;
    }
  }
  const auto failedAt = Clock::now();
  auto small = comm->shrink();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - failedAt).count();
  comm.reset();
  writeAll(fd, "S " + std::to_string(code) + " " + std::to_string(small->size()) + " " +
                   std::to_string(small->rank()) + " " + std::to_string(ms) + "\n");
  // Resume the stream where the furthest rank got to.
  std::uint64_t next = i + 1;
  small->allreduce(&next, &next, 1, DataType::Uint64, ReduceOp::Max);
  next = continueOps(*small, ops, next);
  auto full = small->grow(rd.n - small->size());
  small.reset();
  continueOps(*full, ops, next);
  full->barrier();
  writeAll(fd, "G " + std::to_string(full->size()) + " " + std::to_string(full->rank()) + "\n");
  return 0;
}

int joinerMain(const Round& rd, std::uint16_t port, int fd) {
  const Options o = elasticOptions(rd.tcp);
  auto store = std::make_shared<TcpStore>("127.0.0.1", port, o.connectTimeout);
  auto full = Comm::join(store, o, 60s);
  const RandomOps ops(rd.opsSeed, 2000);
  continueOps(*full, ops, 0);
  full->barrier();
  writeAll(fd, "G " + std::to_string(full->size()) + " " + std::to_string(full->rank()) + "\n");
  return 0;
}

void runRound(const Round& rd, int index, std::uint64_t seed, std::vector<double>* shrinkMs) {
  std::string victims;
  for (int v : rd.victims) victims += " " + std::to_string(v);
  std::printf("[ elastic  ] seed %llu round %d: %d ranks (%s), kill%s after %lld ms\n",
              static_cast<unsigned long long>(seed), index, rd.n, rd.tcp ? "tcp" : "shm",
              victims.c_str(), static_cast<long long>(rd.delay.count()));
  std::fflush(stdout);
  SCOPED_TRACE("elastic seed " + std::to_string(seed) + " round " + std::to_string(index) +
               " (replay: BRAID_ELASTIC_SEED=" + std::to_string(seed) + ")");
  const auto shmBefore = braidShmEntries();
  {
    StoreProcess store;
    ASSERT_NE(store.port(), 0);
    const std::uint16_t port = store.port();
    std::vector<Child> ranks;
    for (int r = 0; r < rd.n; ++r)
      ranks.push_back(spawn([&, r](int fd) { return survivorMain(rd, r, port, fd); }));
    const auto readyBy = Clock::now() + 60s;
    for (int r = 0; r < rd.n; ++r)
      EXPECT_EQ(readLine(ranks[r].fd, readyBy), "R") << "rank " << r << " did not start";
    std::this_thread::sleep_for(rd.delay);
    for (int v : rd.victims) ::kill(ranks[v].pid, SIGKILL);
    std::vector<Child> joiners;
    for (std::size_t j = 0; j < rd.victims.size(); ++j)
      joiners.push_back(spawn([&](int fd) { return joinerMain(rd, port, fd); }));

    std::vector<Child*> all;
    for (auto& c : ranks) all.push_back(&c);
    for (auto& c : joiners) all.push_back(&c);
    reapAll(all, Clock::now() + 90s);

    const int survivors = rd.n - static_cast<int>(rd.victims.size());
    std::vector<int> newRankOf;  // by old rank, -1 for victims
    std::vector<int> fullRanks;
    for (int r = 0; r < rd.n; ++r) {
      const std::string out = readAll(ranks[r].fd);
      ::close(ranks[r].fd);
      const bool victim = std::find(rd.victims.begin(), rd.victims.end(), r) != rd.victims.end();
      if (victim) {
        EXPECT_TRUE(WIFSIGNALED(ranks[r].status)) << "victim rank " << r << ": " << out;
        newRankOf.push_back(-1);
        continue;
      }
      EXPECT_TRUE(exitedZero(ranks[r]))
          << "survivor rank " << r << " status " << ranks[r].status << ": " << out;
      std::istringstream in(out);
      std::string kind;
      int code = -1, size = -1, newRank = -1, fullSize = -1, fullRank = -1;
      double ms = -1;
      in >> kind >> code >> size >> newRank >> ms;
      if (kind != "S") {
        ADD_FAILURE() << "survivor rank " << r << " did not shrink: " << out;
        newRankOf.push_back(-2);
        continue;
      }
      EXPECT_EQ(size, survivors) << "rank " << r;
      newRankOf.push_back(newRank);
      if (shrinkMs != nullptr) shrinkMs->push_back(ms);
      in >> kind >> fullSize >> fullRank;
      EXPECT_EQ(kind, "G") << "rank " << r << ": " << out;
      EXPECT_EQ(fullSize, rd.n) << "rank " << r;
      EXPECT_EQ(fullRank, newRank) << "rank " << r << " keeps its rank when grown";
      fullRanks.push_back(fullRank);
    }
    // Renumbered in order: the survivors' new ranks are 0.. in their old order.
    int expect = 0;
    for (int r = 0; r < rd.n; ++r)
      if (newRankOf[r] >= 0) {
        EXPECT_EQ(newRankOf[r], expect++) << r;
      }
    for (auto& j : joiners) {
      const std::string out = readAll(j.fd);
      ::close(j.fd);
      EXPECT_TRUE(exitedZero(j)) << "joiner status " << j.status << ": " << out;
      std::istringstream in(out);
      std::string kind;
      int fullSize = -1, fullRank = -1;
      in >> kind >> fullSize >> fullRank;
      EXPECT_EQ(kind, "G") << "joiner: " << out;
      EXPECT_EQ(fullSize, rd.n);
      fullRanks.push_back(fullRank);
    }
    std::sort(fullRanks.begin(), fullRanks.end());
    std::vector<int> every(static_cast<std::size_t>(rd.n));
    std::iota(every.begin(), every.end(), 0);
    EXPECT_EQ(fullRanks, every) << "the grown communicator's ranks";
  }
  EXPECT_EQ(childrenOfThisProcess(), std::vector<int>{}) << "processes left behind";
  EXPECT_EQ(braidShmEntries(), shmBefore) << "/dev/shm entries left behind";
}

TEST(Elastic, KillRandomRanksShrinkAndGrow) {
  const std::uint64_t seed = seedFromEnv("BRAID_ELASTIC_SEED");
  const char* roundsEnv = std::getenv("BRAID_ELASTIC_ROUNDS");
  const int rounds = roundsEnv != nullptr ? std::atoi(roundsEnv) : 100;
  std::printf("[ elastic  ] seed %llu, %d rounds (replay: BRAID_ELASTIC_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), rounds, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<double> ms;
  for (int i = 0; i < rounds && !HasFailure(); ++i) {
    Round rd;
    rd.n = 5;
    rd.tcp = rng() % 2 == 0;
    rd.delay = std::chrono::milliseconds(rng() % 400);
    rd.opsSeed = rng();
    const int kills = i % 2 == 0 ? 1 : 2;  // one rank, then two
    while (static_cast<int>(rd.victims.size()) < kills) {
      const int v = static_cast<int>(rng() % 5);
      if (std::find(rd.victims.begin(), rd.victims.end(), v) == rd.victims.end())
        rd.victims.push_back(v);
    }
    runRound(rd, i, seed, &ms);
  }
  if (!ms.empty()) {
    std::sort(ms.begin(), ms.end());
    std::printf("[ elastic  ] failure to shrunk communicator: median %.1f ms, max %.1f ms (%zu)\n",
                ms[ms.size() / 2], ms.back(), ms.size());
  }
}

// ---------------------------------------------------------------- revoke

// Rank 3 is killed while rank 0 waits in a recv from rank 1, which sleeps in its own code (no
// operation running, nothing to notice the loss by): without the revoke rank 0 would wait out
// its 20 s timeout. Rank 3's death revokes the communicator (its liveness connection's ONCLOSE
// key; rank 2, in a recv from rank 3, revokes it too when it sees the loss): rank 0's recv fails
// at once, and rank 1's next operation fails at once, naming the revoker.
TEST(Elastic, RevokeFailsAPendingOperationOnEveryRank) {
  const auto shmBefore = braidShmEntries();
  {
    StoreProcess store;
    ASSERT_NE(store.port(), 0);
    const std::uint16_t port = store.port();
    std::vector<Child> ranks;
    for (int r = 0; r < 4; ++r)
      ranks.push_back(spawn([&, r](int fd) {
        Options o = elasticOptions(true);
        o.execTimeout = 20s;
        auto st = std::make_shared<TcpStore>("127.0.0.1", port, o.connectTimeout);
        auto comm = Comm::create(st, r, 4, o);
        comm->barrier();
        writeAll(fd, "R\n");
        const auto t0 = Clock::now();
        try {
          if (r == 0) {
            int x = 0;
            comm->recv(&x, 1, DataType::Int32, 1);
          } else if (r == 1) {
            std::this_thread::sleep_for(3s);
            comm->barrier();
          } else if (r == 2) {
            int x = 0;
            comm->recv(&x, 1, DataType::Int32, 3);
          } else {
            std::this_thread::sleep_for(60s);
          }
          writeAll(fd, "N\n");
          return 1;
        } catch (const Error& e) {
          const double s = std::chrono::duration<double>(Clock::now() - t0).count();
          writeAll(fd, "E " + std::to_string(static_cast<int>(e.code())) + " " + std::to_string(s) +
                           " " + errorLine(e) + "\n");
        }
        return 0;
      }));
    const auto readyBy = Clock::now() + 60s;
    for (int r = 0; r < 4; ++r) EXPECT_EQ(readLine(ranks[r].fd, readyBy), "R");
    std::this_thread::sleep_for(300ms);
    ::kill(ranks[3].pid, SIGKILL);
    std::vector<Child*> all;
    for (auto& c : ranks) all.push_back(&c);
    reapAll(all, Clock::now() + 60s);
    for (int r = 0; r < 3; ++r) {
      const std::string out = readAll(ranks[r].fd);
      ::close(ranks[r].fd);
      EXPECT_TRUE(exitedZero(ranks[r])) << "rank " << r << ": " << out;
      std::istringstream in(out);
      std::string kind;
      int code = -1;
      double s = -1;
      in >> kind >> code >> s;
      std::printf("[ elastic  ] rank %d: %s\n", r, out.c_str());
      EXPECT_EQ(kind, "E") << out;
      EXPECT_EQ(code, static_cast<int>(ErrorCode::PeerLost)) << out;
      // A hang guard, not a speed threshold: the 20 s timeout would be the alternative.
      EXPECT_LT(s, 15.0) << "rank " << r << " waited for its timeout: " << out;
      // Rank 1 was in no operation: its next one fails as revoked. (Rank 0 fails fast either
      // way: through its own revoke watcher, or through rank 1 aborting its transport when its
      // watcher fired, whichever comes first.)
      if (r == 1) {
        EXPECT_NE(out.find("was revoked by rank"), std::string::npos) << out;
      }
    }
    ::close(ranks[3].fd);
  }
  EXPECT_EQ(childrenOfThisProcess(), std::vector<int>{});
  EXPECT_EQ(braidShmEntries(), shmBefore);
}

// Every communicator of a process shares its liveness connection (core/liveness.cpp): rank 2,
// in a communicator, a split of it and a second communicator, is killed before anything ran.
// The server sets "revoked" in all three namespaces (the text names rank 2's process), and the
// survivors' next operation on each fails with PeerLost.
TEST(Elastic, AKilledProcessRevokesEveryCommunicatorItWasIn) {
  {
    StoreProcess store;
    ASSERT_NE(store.port(), 0);
    const std::uint16_t port = store.port();
    std::vector<Child> ranks;
    for (int r = 0; r < 3; ++r)
      ranks.push_back(spawn([&, r](int fd) {
        Options o = elasticOptions(true);
        o.execTimeout = 20s;
        auto st = std::make_shared<TcpStore>("127.0.0.1", port, o.connectTimeout);
        auto a = Comm::create(st, r, 3, o);
        auto b = a->split(0, r);
        auto c = Comm::create(st, r, 3, o);
        writeAll(fd, "R\n");
        if (r == 2) {
          std::this_thread::sleep_for(60s);
          return 1;
        }
        std::string out;
        for (Comm* comm : {a.get(), b.get(), c.get()}) {
          PrefixStore ns(st, "braid/" + comm->id() + "/");
          const auto v = ns.get("revoked", 30s);
          out += "K " + std::string(v.begin(), v.end()) + "\n";
        }
        // Both survivors read the keys before either runs an operation: a failing operation
        // publishes its own revoke, which replaces the text.
        st->setString("test/read/" + std::to_string(r), "1");
        st->wait({"test/read/0", "test/read/1"}, 30s);
        for (Comm* comm : {a.get(), b.get(), c.get()}) {
          try {
            comm->barrier();
            out += "N\n";
          } catch (const Error& e) {
            out += "E " + std::to_string(static_cast<int>(e.code())) + " " + errorLine(e) + "\n";
          }
        }
        writeAll(fd, out);
        return 0;
      }));
    const auto readyBy = Clock::now() + 60s;
    for (int r = 0; r < 3; ++r) EXPECT_EQ(readLine(ranks[r].fd, readyBy), "R");
    ::kill(ranks[2].pid, SIGKILL);
    std::vector<Child*> all;
    for (auto& c : ranks) all.push_back(&c);
    reapAll(all, Clock::now() + 60s);
    for (int r = 0; r < 2; ++r) {
      const std::string out = readAll(ranks[r].fd);
      ::close(ranks[r].fd);
      EXPECT_TRUE(exitedZero(ranks[r])) << "rank " << r << ": " << out;
      std::istringstream in(out);
      std::string line;
      int keys = 0, errors = 0;
      while (std::getline(in, line)) {
        if (line.rfind("K ", 0) == 0) {
          ++keys;
          EXPECT_NE(line.find("rank 2 (pid " + std::to_string(ranks[2].pid)), std::string::npos)
              << line;
          EXPECT_NE(line.find("exited or was killed"), std::string::npos) << line;
        } else if (line.rfind("E ", 0) == 0) {
          ++errors;
          EXPECT_EQ(line.rfind("E " + std::to_string(static_cast<int>(ErrorCode::PeerLost)), 0), 0u)
              << line;
        }
      }
      EXPECT_EQ(keys, 3) << "rank " << r << ": " << out;
      EXPECT_EQ(errors, 3) << "rank " << r << ": " << out;
    }
    ::close(ranks[2].fd);
  }
  EXPECT_EQ(childrenOfThisProcess(), std::vector<int>{});
}

// ---------------------------------------------------------------- dying during the shrink

// Rank 4 is killed; every survivor says "S" just before it calls shrink(), and the test kills
// another rank a random 0-30 ms after it said so: rank 0 (the first decider) or a random other.
// The remaining ranks must agree on one member set, in order, and work on it.
TEST(Elastic, RankDiesDuringTheShrink) {
  const std::uint64_t seed = seedFromEnv("BRAID_ELASTIC_SEED");
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 6 && !HasFailure(); ++round) {
    const int second = round % 2 == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
    const auto delay = std::chrono::milliseconds(rng() % 30);
    std::printf("[ elastic  ] seed %llu round %d: kill 4, then %d %lld ms into its shrink\n",
                static_cast<unsigned long long>(seed), round, second,
                static_cast<long long>(delay.count()));
    std::fflush(stdout);
    StoreProcess store;
    ASSERT_NE(store.port(), 0);
    const std::uint16_t port = store.port();
    std::vector<Child> ranks;
    for (int r = 0; r < 5; ++r)
      ranks.push_back(spawn([&, r](int fd) {
        // Short bounds: a rank killed after it was made a member holds up the creation of the
        // round's communicator until the connect timeout.
        Options o = elasticOptions(round % 4 >= 2);
        o.connectTimeout = 3s;
        o.execTimeout = 5s;
        auto st = std::make_shared<TcpStore>("127.0.0.1", port, o.connectTimeout);
        auto comm = Comm::create(st, r, 5, o);
        comm->barrier();
        writeAll(fd, "R\n");
        try {
          for (;;) comm->barrier();
        } catch (const Error&) {
        }
        writeAll(fd, "S\n");
        // The shrink survives a rank lost in it: it either leaves it out, or its communicator
        // (or an operation on it, when the rank dies just after the shrink) fails and a second
        // shrink does.
        Comm* target = comm.get();
        std::unique_ptr<Comm> small;
        for (int attempt = 0;; ++attempt) {
          try {
            auto next = target->shrink();
            small = std::move(next);
            target = small.get();
            std::int32_t one = 1, sum = 0;
            small->allreduce(&one, &sum, 1, DataType::Int32, ReduceOp::Sum);
            if (sum != small->size()) throw Error(ErrorCode::Internal, "wrong sum");
            std::vector<std::int32_t> mine{r}, all(static_cast<std::size_t>(small->size()));
            small->allgather(mine.data(), all.data(), 1, DataType::Int32);
            small->barrier();
            std::string list;
            for (int x : all) list += " " + std::to_string(x);
            writeAll(fd, "M " + std::to_string(small->rank()) + list + "\n");
            break;
          } catch (const Error& e) {
            if ((e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Timeout) || attempt >= 3)
              throw;
          }
        }
        return 0;
      }));
    const auto readyBy = Clock::now() + 60s;
    for (int r = 0; r < 5; ++r) EXPECT_EQ(readLine(ranks[r].fd, readyBy), "R");
    ::kill(ranks[4].pid, SIGKILL);
    EXPECT_EQ(readLine(ranks[second].fd, Clock::now() + 30s), "S");
    std::this_thread::sleep_for(delay);
    ::kill(ranks[second].pid, SIGKILL);
    std::vector<Child*> all;
    for (auto& c : ranks) all.push_back(&c);
    reapAll(all, Clock::now() + 90s);
    std::vector<std::string> lists;
    std::vector<int> alive;
    for (int r = 0; r < 5; ++r) {
      std::string out = readAll(ranks[r].fd);
      ::close(ranks[r].fd);
      if (r == 4 || r == second) continue;
      alive.push_back(r);
      EXPECT_TRUE(exitedZero(ranks[r])) << "rank " << r << ": " << out;
      const auto at = out.find("M ");
      if (at == std::string::npos) {
        ADD_FAILURE() << "rank " << r << ": " << out;
        continue;
      }
      std::istringstream in(out.substr(at + 2));
      int newRank = -1;
      in >> newRank;
      std::string rest;
      std::getline(in, rest);
      lists.push_back(rest);
    }
    // One list on every survivor: the survivors in order, and the second victim only where it
    // was killed after the shrink had completed.
    for (const auto& l : lists) EXPECT_EQ(l, lists.front()) << "every survivor, one member list";
    std::string withVictim, without;
    for (int r = 0; r < 4; ++r) {
      if (r != second) without += " " + std::to_string(r);
      withVictim += " " + std::to_string(r);
    }
    if (!lists.empty()) {
      EXPECT_TRUE(lists.front() == without || lists.front() == withVictim) << lists.front();
    }
  }
  EXPECT_EQ(childrenOfThisProcess(), std::vector<int>{});
}

// ---------------------------------------------------------------- a slow rank

// Rank 3 is killed; rank 1 takes `slowFor` in its own code before it calls shrink(). With a
// 10 s bound it is waited for and kept; with a 1 s bound it is left out (it learns so), and the
// others go on without it.
void slowRankCase(std::chrono::milliseconds bound, std::chrono::milliseconds slowFor, bool kept) {
  StoreProcess store;
  ASSERT_NE(store.port(), 0);
  const std::uint16_t port = store.port();
  std::vector<Child> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(spawn([&, r](int fd) {
      Options o = elasticOptions(false);
      auto st = std::make_shared<TcpStore>("127.0.0.1", port, o.connectTimeout);
      auto comm = Comm::create(st, r, 4, o);
      comm->barrier();
      writeAll(fd, "R\n");
      try {
        for (;;) comm->barrier();
      } catch (const Error&) {
      }
      if (r == 1) std::this_thread::sleep_for(slowFor);
      comm->setOpTimeout(bound);
      try {
        auto small = comm->shrink();
        std::int32_t one = 1, sum = 0;
        small->allreduce(&one, &sum, 1, DataType::Int32, ReduceOp::Sum);
        writeAll(fd, "S " + std::to_string(small->size()) + " " + std::to_string(sum) + "\n");
      } catch (const Error& e) {
        writeAll(fd, "E " + std::to_string(static_cast<int>(e.code())) + " " + errorLine(e) + "\n");
      }
      return 0;
    }));
  const auto readyBy = Clock::now() + 60s;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(readLine(ranks[r].fd, readyBy), "R");
  ::kill(ranks[3].pid, SIGKILL);
  std::vector<Child*> all;
  for (auto& c : ranks) all.push_back(&c);
  reapAll(all, Clock::now() + 60s);
  for (int r = 0; r < 3; ++r) {
    const std::string out = readAll(ranks[r].fd);
    ::close(ranks[r].fd);
    std::printf("[ elastic  ] rank %d: %s", r, out.c_str());
    EXPECT_TRUE(exitedZero(ranks[r])) << out;
    if (r == 1 && !kept) {
      EXPECT_EQ(out.rfind("E " + std::to_string(static_cast<int>(ErrorCode::PeerLost)), 0), 0u)
          << out;
      EXPECT_NE(out.find("left out"), std::string::npos) << out;
    } else {
      const int size = kept ? 3 : 2;
      EXPECT_EQ(out, "S " + std::to_string(size) + " " + std::to_string(size) + "\n");
    }
  }
  ::close(ranks[3].fd);
}

TEST(Elastic, SlowRankIsWaitedForUntilTheTimeout) {
  slowRankCase(10s, 2s, true);
}

TEST(Elastic, RankSlowerThanTheTimeoutIsLeftOut) {
  slowRankCase(1s, 4s, false);
}

// ---------------------------------------------------------------- threads

// Ranks as threads over a MemoryStore: ranks that destroy the communicator (a departure the
// store records) are left out at once; the others shrink, and grow back with joiners.
TEST(ElasticThreads, ShrinkAfterDeparturesThenGrowBack) {
  for (int n : {2, 3, 5, 7}) {
    auto store = std::make_shared<MemoryStore>();
    Options o = testOptions();
    o.execTimeout = 20s;
    std::vector<std::string> errors(static_cast<std::size_t>(n + 2));
    std::vector<std::thread> threads;
    const std::vector<int> leaving = n == 2 ? std::vector<int>{1} : std::vector<int>{0, n - 2};
    const int left = n - static_cast<int>(leaving.size());
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          auto comm = Comm::create(store, r, n, o);
          comm->barrier();
          if (std::find(leaving.begin(), leaving.end(), r) != leaving.end()) return;
          auto small = comm->shrink();
          if (small->size() != left)
            throw std::runtime_error("size " + std::to_string(small->size()));
          std::vector<std::int32_t> mine{r}, all(static_cast<std::size_t>(left));
          small->allgather(mine.data(), all.data(), 1, DataType::Int32);
          std::vector<std::int32_t> expect;
          for (int q = 0; q < n; ++q)
            if (std::find(leaving.begin(), leaving.end(), q) == leaving.end()) expect.push_back(q);
          if (all != expect) throw std::runtime_error("members differ");
          auto full = small->grow(static_cast<int>(leaving.size()));
          if (full->size() != n || full->rank() != small->rank())
            throw std::runtime_error("grown rank/size");
          std::int64_t x = full->rank() + 1, sum = 0;
          full->allreduce(&x, &sum, 1, DataType::Int64, ReduceOp::Sum);
          if (sum != static_cast<std::int64_t>(n) * (n + 1) / 2)
            throw std::runtime_error("sum " + std::to_string(sum));
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (std::size_t j = 0; j < leaving.size(); ++j)
      threads.emplace_back([&, j] {
        try {
          auto full = Comm::join(store, o, 30s);
          std::int64_t x = full->rank() + 1, sum = 0;
          full->allreduce(&x, &sum, 1, DataType::Int64, ReduceOp::Sum);
          if (sum != static_cast<std::int64_t>(n) * (n + 1) / 2)
            throw std::runtime_error("joiner sum " + std::to_string(sum));
          if (full->rank() < left) throw std::runtime_error("joiner rank");
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(n) + j] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < errors.size(); ++i)
      EXPECT_EQ(errors[i], "") << "n " << n << " thread " << i;
  }
}

TEST(ElasticThreads, GrowAndShrinkRejectBadInput) {
  auto store = std::make_shared<MemoryStore>();
  runThreads(2, testOptions(), [](Comm& c) {
    try {
      c.grow(0);
      ADD_FAILURE() << "grow(0) did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("'count'"), std::string::npos) << e.what();
    }
    c.barrier();
  });
}

// ---------------------------------------------------------------- measurement

// docs/reliability.md: how long 16 ranks take from the failure's detection (each rank's error)
// to a working shrunk communicator, after one is SIGKILLed. Printed; no threshold.
TEST(Elastic, MeasureShrinkOf16Ranks) {
  const int n = 16;
  for (bool tcp : {false, true}) {
    StoreProcess store;
    ASSERT_NE(store.port(), 0);
    const std::uint16_t port = store.port();
    std::vector<Child> ranks;
    for (int r = 0; r < n; ++r)
      ranks.push_back(spawn([&, r](int fd) {
        Options o = elasticOptions(tcp);
        o.connectTimeout = 60s;
        o.execTimeout = 30s;
        auto st = std::make_shared<TcpStore>("127.0.0.1", port, o.connectTimeout);
        auto comm = Comm::create(st, r, n, o);
        comm->barrier();
        writeAll(fd, "R\n");
        try {
          for (;;) comm->barrier();
        } catch (const Error&) {
        }
        const auto t0 = Clock::now();
        auto small = comm->shrink();
        small->barrier();
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        writeAll(fd, "S " + std::to_string(small->size()) + " " + std::to_string(ms) + "\n");
        return 0;
      }));
    const auto readyBy = Clock::now() + 120s;
    for (int r = 0; r < n; ++r) EXPECT_EQ(readLine(ranks[r].fd, readyBy), "R");
    ::kill(ranks[7].pid, SIGKILL);
    std::vector<Child*> all;
    for (auto& c : ranks) all.push_back(&c);
    reapAll(all, Clock::now() + 120s);
    std::vector<double> ms;
    for (int r = 0; r < n; ++r) {
      const std::string out = readAll(ranks[r].fd);
      ::close(ranks[r].fd);
      if (r == 7) continue;
      EXPECT_TRUE(exitedZero(ranks[r])) << out;
      std::istringstream in(out);
      std::string kind;
      int size = 0;
      double t = -1;
      in >> kind >> size >> t;
      EXPECT_EQ(size, n - 1) << out;
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    if (!ms.empty())
      std::printf(
          "[ elastic  ] 16 ranks (%s), one killed: error to shrunk and barrier done: "
          "median %.0f ms, max %.0f ms\n",
          tcp ? "tcp" : "shm", ms[ms.size() / 2], ms.back());
  }
}

}  // namespace
}  // namespace braid::test
