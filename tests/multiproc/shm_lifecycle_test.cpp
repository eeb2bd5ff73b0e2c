// The shared-memory transport across real processes (fork): the segment is really shared by
// mapping, nothing is left in /dev/shm whether ranks finish, are destroyed, or are SIGKILLed,
// and survivors of a killed rank get Error(PeerLost) well within their timeout. Also prints an
// 8-byte ping-pong over shm and over TCP between two processes, for comparison.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.hpp"
#include "harness/store_process.hpp"
#include "transport/factory.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Exit codes of a forked rank.
constexpr int kOk = 0;
constexpr int kWrongError = 3;
constexpr int kTooSlow = 4;
constexpr int kNoError = 5;
constexpr int kThrew = 6;

// The ranks forkRanks() started (in a rank: its elder siblings, rank 0 among them).
std::vector<pid_t> gRankPids;

// Named segments in /dev/shm made by this process or by the ranks it forked: a name carries its
// creator's pid ("braid-shm-<pid>-<nonce>"), so segments of tests running in parallel (ctest -j)
// do not count.
std::vector<std::string> braidShmEntries() {
  std::vector<std::string> names;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return names;
  std::vector<pid_t> ours = gRankPids;
  ours.push_back(::getpid());
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    for (pid_t pid : ours)
      if (n.rfind("braid-shm-" + std::to_string(pid) + "-", 0) == 0) names.push_back(n);
  }
  ::closedir(d);
  return names;
}

// True when this process maps the segment created with memfd_create (anonymous, nameless).
bool mapsMemfdSegment() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("memfd:braid-shm") != std::string::npos) return true;
  return false;
}

// Forks n ranks that meet through a TCP store; rank r runs fn(r, port) and exits with its
// result. Returns each rank's wait status; ranks still running at the deadline are killed (and
// fail the test).
std::vector<int> forkRanks(int n, const std::function<int(int, std::uint16_t)>& fn,
                           std::chrono::seconds deadline = 60s) {
  StoreProcess store;
  const std::uint16_t port = store.port();
  EXPECT_NE(port, 0) << "the store process did not start";
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  gRankPids.clear();
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = kThrew;
      try {
        code = fn(r, port);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
    gRankPids.push_back(pid);
  }
  std::vector<int> status(static_cast<std::size_t>(n), -1);
  const auto end = Clock::now() + deadline;
  int remaining = n;
  while (remaining > 0 && Clock::now() < end) {
    for (int r = 0; r < n; ++r) {
      int st = 0;
      if (status[static_cast<std::size_t>(r)] == -1 &&
          ::waitpid(pids[static_cast<std::size_t>(r)], &st, WNOHANG) ==
              pids[static_cast<std::size_t>(r)]) {
        status[static_cast<std::size_t>(r)] = st;
        --remaining;
      }
    }
    std::this_thread::sleep_for(2ms);
  }
  for (int r = 0; r < n; ++r) {
    if (status[static_cast<std::size_t>(r)] != -1) continue;
    ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
    ::waitpid(pids[static_cast<std::size_t>(r)], nullptr, 0);
    ADD_FAILURE() << "rank " << r << " did not finish within " << deadline.count() << " s";
  }
  return status;
}

bool exitedWith(int status, int code) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

std::shared_ptr<TcpStore> storeAt(std::uint16_t port) {
  return std::make_shared<TcpStore>("127.0.0.1", port, std::chrono::milliseconds(20000));
}

TEST(ShmLifecycle, NothingLeftAfterCommunicatorsAreDestroyed) {
  const auto before = braidShmEntries();
  const auto status = forkRanks(4, [&](int rank, std::uint16_t port) {
    auto store = storeAt(port);
    for (int round = 0; round < 3; ++round) {
      auto comm = Comm::create(store, rank, 4, testOptions());
      if (!mapsMemfdSegment()) {
        std::fprintf(stderr, "rank %d: no memfd segment mapped: ranks do not share memory\n", rank);
        return 1;
      }
      if (braidShmEntries() != before) {
        std::fprintf(stderr, "rank %d: a named segment exists while running\n", rank);
        return 1;
      }
      std::vector<float> v(100000, 1.0f);
      comm->allreduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
      for (float x : v)
        if (x != 4.0f) return 1;
      auto half = comm->split(rank % 2, rank);
      half->barrier();
    }
    return mapsMemfdSegment() ? 1 : 0;  // destroyed communicators unmapped their segments
  });
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(exitedWith(status[static_cast<std::size_t>(r)], kOk)) << r;
  EXPECT_EQ(braidShmEntries(), before);
}

// BRAID_SHM_NAMED=1 (Options::shmNamedSegment): the segment is a named POSIX shm object, gone
// from /dev/shm by the time creation returns, and the communicator and its split work.
TEST(ShmLifecycle, NamedSegmentsAreGoneOnceCreated) {
  const auto before = braidShmEntries();
  const auto status = forkRanks(3, [&](int rank, std::uint16_t port) {
    auto store = storeAt(port);
    Options o = testOptions();
    o.shmNamedSegment = true;
    auto comm = Comm::create(store, rank, 3, o);
    if (comm->pathTo((rank + 1) % 3).rfind("shm", 0) != 0 || mapsMemfdSegment() ||
        braidShmEntries() != before) {
      std::fprintf(stderr, "rank %d: path %s, memfd mapped %d\n", rank,
                   comm->pathTo((rank + 1) % 3).c_str(), static_cast<int>(mapsMemfdSegment()));
      return 1;
    }
    std::vector<float> v(100000, 1.0f);
    comm->allreduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
    for (float x : v)
      if (x != 3.0f) return 1;
    auto half = comm->split(rank % 2, rank);
    half->barrier();
    comm->barrier();  // every split is made (rank 1's, of one rank, is made before the other's)
    if (braidShmEntries() == before) return 0;
    for (const std::string& n : braidShmEntries())
      std::fprintf(stderr, "rank %d (pid %d): %s exists\n", rank, static_cast<int>(::getpid()),
                   n.c_str());
    return 1;
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(exitedWith(status[static_cast<std::size_t>(r)], kOk)) << r;
  EXPECT_EQ(braidShmEntries(), before);
}

TEST(ShmLifecycle, KilledRankMidCollectiveGivesSurvivorsPeerLost) {
  const auto before = braidShmEntries();
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  const auto status = forkRanks(kRanks, [&](int rank, std::uint16_t port) {
    auto store = storeAt(port);
    Options o = testOptions();
    o.chunkBytes = 64 << 10;
    o.bufferBytes = 1 << 20;
    o.execTimeout = 20s;
    auto comm = Comm::create(store, rank, kRanks, o);
    if (rank == kVictim) {
      std::thread killer([] {
        std::this_thread::sleep_for(300ms);
        ::raise(SIGKILL);
      });
      killer.detach();
    }
    std::vector<float> v(1 << 20, 1.0f);
    auto lastOk = Clock::now();
    for (int i = 0; i < 100000; ++i) {
      try {
        comm->allreduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Max);
        lastOk = Clock::now();
      } catch (const Error& e) {
        const double s = std::chrono::duration<double>(Clock::now() - lastOk).count();
        std::printf("rank %d after %.3f s: %s\n", rank, s, e.what());
        if (e.code() != ErrorCode::PeerLost) return kWrongError;
        return s < 5.0 ? kOk : kTooSlow;
      }
    }
    return kNoError;
  });
  for (int r = 0; r < kRanks; ++r) {
    const int st = status[static_cast<std::size_t>(r)];
    if (r == kVictim)
      EXPECT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << st;
    else
      EXPECT_TRUE(exitedWith(st, kOk)) << "rank " << r << " status " << st;
  }
  EXPECT_EQ(braidShmEntries(), before);
}

TEST(ShmLifecycle, NamedFallbackLeavesNothingAfterSigkill) {
  // The shm_open fallback: the name is unlinked as soon as every rank has mapped it, so a rank
  // killed afterwards leaves nothing; its peer learns of the death from its pidfd.
  const auto before = braidShmEntries();
  const auto status = forkRanks(3, [&](int rank, std::uint16_t port) {
    auto store = storeAt(port);
    transport::ShmOptions o;
    o.forceNamedSegment = true;
    o.setupTimeout = 20s;
    const std::vector<int> local{0, 1, 2};
    auto t = transport::createShmTransport(*store, rank, 3, local, o);
    if (braidShmEntries() != before) return 1;
    if (rank == 1) {
      std::this_thread::sleep_for(200ms);
      ::raise(SIGKILL);
    }
    if (rank == 2) {  // stays until rank 0 is done
      std::vector<std::uint8_t> buf(1);
      transport::Request req;
      t->postRecv(0, buf.data(), 1, 2, req);
      t->wait(req, transport::Clock::now() + 20s);
      return 0;
    }
    std::vector<std::uint8_t> buf(64);
    transport::Request req;
    t->postRecv(1, buf.data(), buf.size(), 1, req);
    const auto start = Clock::now();
    int code = kNoError;
    try {
      t->wait(req, transport::Clock::now() + 20s);
    } catch (const Error& e) {
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf("rank 0 after %.3f s: %s\n", s, e.what());
      const bool named = std::string(e.what()).find("rank 1 (pid ") != std::string::npos &&
                         std::string(e.what()).find("exited") != std::string::npos;
      code = e.code() != ErrorCode::PeerLost || !named ? kWrongError : s < 2.0 ? kOk : kTooSlow;
    }
    t->postSend(2, buf.data(), 1, 2, req);
    t->wait(req, transport::Clock::now() + 20s);
    return code;
  });
  EXPECT_TRUE(exitedWith(status[0], kOk)) << status[0];
  EXPECT_TRUE(status[1] != -1 && WIFSIGNALED(status[1])) << status[1];
  EXPECT_TRUE(exitedWith(status[2], kOk)) << status[2];
  EXPECT_EQ(braidShmEntries(), before);
}

// Round trips of 8 bytes between two processes over the transport the factory builds.
void pingPong(bool shmDisable) {
  const auto status = forkRanks(2, [&](int rank, std::uint16_t port) {
    auto store = storeAt(port);
    transport::TransportOptions o;
    o.shmDisable = shmDisable;
    o.tcp.connectTimeout = 20s;
    auto t = transport::createTransport(*store, rank, 2, o);
    const int peer = 1 - rank;
    std::uint64_t value = 0;
    transport::Request req;
    constexpr int kBatch = 2000;
    constexpr int kBatches = 10;
    double best = 1e9, total = 0;
    for (int b = 0; b < kBatches; ++b) {
      const auto start = Clock::now();
      for (int i = 0; i < kBatch; ++i) {
        const auto deadline = transport::Clock::now() + 10s;
        if (rank == 0) {
          t->postSend(peer, &value, 8, 1, req);
          t->wait(req, deadline);
          t->postRecv(peer, &value, 8, 1, req);
          t->wait(req, deadline);
        } else {
          t->postRecv(peer, &value, 8, 1, req);
          t->wait(req, deadline);
          t->postSend(peer, &value, 8, 1, req);
          t->wait(req, deadline);
        }
      }
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      best = std::min(best, us / kBatch);
      total += us;
    }
    if (rank == 0)
      std::printf(
          "[ %-8s ] 8-byte ping-pong between 2 processes (path %s): %.2f us round trip "
          "(mean), %.2f us (best batch); one way %.2f us\n",
          shmDisable ? "tcp" : "shm", t->pathTo(1).c_str(), total / (kBatch * kBatches), best,
          total / (kBatch * kBatches) / 2);
    return 0;
  });
  EXPECT_TRUE(exitedWith(status[0], kOk));
  EXPECT_TRUE(exitedWith(status[1], kOk));
}

TEST(ShmLatency, PingPongShmAndTcp) {
  pingPong(false);
  pingPong(true);
}

// 8-byte allreduce through the communicator, world sizes up to 8 processes, printed (on a
// 2-core machine 4 and 8 ranks are oversubscribed).
TEST(ShmLatency, SmallAllreduce) {
  for (int n : {2, 4, 8}) {
    const auto status = forkRanks(n, [&](int rank, std::uint16_t port) {
      auto store = storeAt(port);
      auto comm = Comm::create(store, rank, n, Options{});
      double v[1] = {1.0};
      constexpr int kIters = 2000;
      for (int i = 0; i < 100; ++i) comm->allreduce(v, v, 1, DataType::Float64, ReduceOp::Max);
      const auto start = Clock::now();
      for (int i = 0; i < kIters; ++i) comm->allreduce(v, v, 1, DataType::Float64, ReduceOp::Max);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (rank == 0)
        std::printf("[ shm      ] 8-byte allreduce, %d processes: %.2f us\n", n, us / kIters);
      return v[0] == 1.0 ? 0 : 1;
    });
    for (int r = 0; r < n; ++r) EXPECT_TRUE(exitedWith(status[static_cast<std::size_t>(r)], kOk));
  }
}

}  // namespace
}  // namespace braid::test
