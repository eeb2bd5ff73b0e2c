// Hardening (issue 25) with ranks as forked processes joined through a TCP store this test
// serves: ranks started with different world sizes fail at once, every one of them, with a
// Mismatch naming both sizes (case 5); and a bounded soak that repeats the hostile-client cases
// (forged Hellos during creation, garbage, huge length prefixes, silent and half-open
// connections, partial and complete large store frames) against a running job, which must
// stay correct while the store's memory stays within its bound.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/handshake.hpp"
#include "harness/store_process.hpp"
#include "store/memory_store.hpp"
#include "store/store_protocol.hpp"
#include "transport/tcp/tcp_bootstrap.hpp"

namespace braid {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::uint8_t>;

struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of the pipe the child reports through
  std::string report;
  bool exited = false;
  int status = 0;
  Clock::duration took{};
};

// Forks one process per entry of `sizes`: rank r joins a job of sizes[r] ranks through the store
// at `port` and runs body; it reports "OK" or "<ErrorCode>|<what()>" through a pipe.
std::vector<Child> forkRanks(const std::vector<int>& sizes, std::uint16_t port,
                             const Options& options, const std::function<void(Comm&)>& body) {
  std::vector<Child> children(sizes.size());
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    int fds[2];
    if (::pipe(fds) != 0) ADD_FAILURE() << "pipe: " << std::strerror(errno);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      std::string out;
      try {
        LaunchInfo li;
        li.rank = static_cast<int>(r);
        li.size = sizes[r];
        li.localRank = static_cast<int>(r);
        li.storePort = port;
        li.storeExternal = true;
        auto comm = Comm::create(li, options);
        body(*comm);
        out = "OK";
      } catch (const Error& e) {
        out = std::string(toString(e.code())) + "|" + e.what();
      } catch (const std::exception& e) {
        out = std::string("exception|") + e.what();
      }
      [[maybe_unused]] const ssize_t n = ::write(fds[1], out.data(), out.size());
      ::_exit(0);
    }
    ::close(fds[1]);
    children[r].pid = pid;
    children[r].fd = fds[0];
  }
  return children;
}

// Collects every child's report, killing those still running at the deadline.
void collect(std::vector<Child>& children, std::chrono::seconds deadline) {
  const auto start = Clock::now();
  const auto until = start + deadline;
  for (Child& c : children) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      pollfd p{c.fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        ::kill(c.pid, SIGKILL);
        c.report += "<killed at the deadline>";
        break;
      }
      char buf[4096];
      const ssize_t n = ::read(c.fd, buf, sizeof buf);
      if (n <= 0) break;
      c.report.append(buf, static_cast<std::size_t>(n));
    }
    c.took = Clock::now() - start;
    ::close(c.fd);
    ::waitpid(c.pid, &c.status, 0);
  }
}

// Issue 25 (5): before, ranks started with world sizes 2 and 3 both waited out the connect
// timeout ("waiting for rank 1 to open the shared-memory segment" / "waiting for ranks 2 to
// publish their host"). Now every rank fails at once with Mismatch naming both sizes; also the
// ranks that agree with rank 0 when rank 0 found another rank that does not.
TEST(WorldSizeMismatch, EveryRankFailsAtOnceNamingBothSizes) {
  const std::vector<std::vector<int>> cases = {
      {2, 3}, {3, 2}, {2, 3, 3}, {4, 4, 5, 5, 5}, {3, 3, 4, 4}};
  Options o;
  o.connectTimeout = 60000ms;  // a rank that waited it out would show in `took`
  o.logLevel = 0;
  for (const auto& sizes : cases) {
    SCOPED_TRACE(::testing::PrintToString(sizes));
    test::StoreProcess server;  // no store thread in this process while it forks
    ASSERT_NE(server.port(), 0);
    auto children = forkRanks(sizes, server.port(), o, [](Comm& c) { c.barrier(); });
    collect(children, 50s);
    for (std::size_t r = 0; r < children.size(); ++r) {
      const Child& c = children[r];
      EXPECT_EQ(c.report.rfind("Mismatch|", 0), 0u) << "rank " << r << ": " << c.report;
      // Both sizes named: the job has two of them.
      EXPECT_NE(c.report.find("world size"), std::string::npos) << c.report;
      for (int s : {sizes.front(), sizes.back()})
        EXPECT_NE(c.report.find(std::to_string(s)), std::string::npos) << c.report;
      EXPECT_LT(c.took, 30s) << "rank " << r << " waited for the connect timeout: " << c.report;
      std::printf("sizes %s rank %zu: %s\n", ::testing::PrintToString(sizes).c_str(), r,
                  c.report.c_str());
    }
  }
}

// The ranks agree: the check costs nothing visible, every rank joins.
TEST(WorldSizeMismatch, AgreeingRanksJoin) {
  Options o;
  o.connectTimeout = 30000ms;
  o.logLevel = 0;
  test::StoreProcess server;  // no store thread in this process while it forks
  ASSERT_NE(server.port(), 0);
  auto children = forkRanks({3, 3, 3}, server.port(), o, [](Comm& c) {
    int v = c.rank() + 1, sum = 0;
    c.allreduce(&v, &sum, 1, DataType::Int32, ReduceOp::Sum);
    if (sum != 6) throw Error(ErrorCode::Internal, "wrong sum " + std::to_string(sum));
  });
  collect(children, 60s);
  for (const Child& c : children) EXPECT_EQ(c.report, "OK");
}

// ---------------------------------------------------------------- authentication warning

// Runs `fn` in a forked child whose stderr goes to a pipe; returns what it wrote.
std::string stderrOfChild(const std::function<void()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child failed: %s\n", e.what());
    }
    std::fflush(stderr);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Without a key, a job of more than one rank warns once per process at creation, naming how to
// set a key; with one (or alone) it does not.
TEST(AuthWarning, OncePerProcessWithoutAKeyAndNeverWithOne) {
  for (const bool keyed : {false, true}) {
    const std::string log = stderrOfChild([keyed] {
      Options o;
      o.connectTimeout = 20000ms;
      if (keyed) o.security.authKey = "job-key";
      auto store = std::make_shared<MemoryStore>();
      for (int comms = 0; comms < 2; ++comms) {
        std::vector<std::thread> ranks;
        for (int r = 0; r < 2; ++r)
          ranks.emplace_back([&, r] { Comm::create(store, r, 2, o)->barrier(); });
        for (auto& t : ranks) t.join();
      }
      Comm::create(std::make_shared<MemoryStore>(), 0, 1, Options());
    });
    SCOPED_TRACE(keyed ? "with a key" : "without a key");
    EXPECT_EQ(log.find("child failed"), std::string::npos) << log;
    EXPECT_EQ(count(log, "no BRAID_AUTH_KEY"), keyed ? 0u : 1u) << log;
    if (!keyed) {
      EXPECT_NE(log.find("[braid WARN"), std::string::npos) << log;
      EXPECT_NE(log.find("accept any peer that can reach their ports"), std::string::npos) << log;
      EXPECT_NE(log.find("BRAID_AUTH_KEY_FILE"), std::string::npos) << log;
    }
  }
}

// ---------------------------------------------------------------- hostile soak

// The hostile clients connect from 127.0.0.2, another host to the store's per-host bound than
// the ranks' 127.0.0.1: a stranger on the ranks' own host shares their bound (docs/security.md).
int connectTo(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(0x7f000002u);
  ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void sendAll(int fd, const Bytes& b, std::size_t n) {
  std::size_t at = 0;
  while (at < std::min(n, b.size())) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 200) <= 0) return;  // the peer stopped reading: enough
    const ssize_t k =
        ::send(fd, b.data() + at, std::min(n, b.size()) - at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k <= 0) {
      if (errno == EAGAIN) continue;
      return;
    }
    at += static_cast<std::size_t>(k);
  }
}

std::size_t peakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  return 0;
}

// One round of every hostile case against the store and the ranks' listen ports.
void hostileRound(std::uint16_t storePort, const std::vector<std::uint16_t>& rankPorts, int round,
                  std::vector<int>& held) {
  namespace proto = store_protocol;
  std::vector<std::uint16_t> ports = rankPorts;
  ports.push_back(storePort);
  for (std::uint16_t port : ports) {
    // Random-looking garbage, a huge length prefix, a silent connection, a half-open one.
    if (int fd = connectTo(port); fd >= 0) {
      Bytes junk(512);
      for (std::size_t i = 0; i < junk.size(); ++i)
        junk[i] = static_cast<std::uint8_t>((i * 131 + static_cast<std::size_t>(round)) ^ 0xa5);
      sendAll(fd, junk, junk.size());
      ::close(fd);
    }
    if (int fd = connectTo(port); fd >= 0) {
      sendAll(fd, Bytes{0xff, 0xff, 0xff, 0x7f, 1, 2, 3}, 7);
      ::close(fd);
    }
    if (int fd = connectTo(port); fd >= 0) held.push_back(fd);  // silent until the end
    if (int fd = connectTo(port); fd >= 0) {
      ::shutdown(fd, SHUT_WR);
      held.push_back(fd);
    }
  }
  // Forged Hellos (no key): claims of another world size and of the listener's own rank, which
  // no listener accepts. (A Hello claiming a rank the listener does wait for, with the right
  // size, would be taken: without a key nothing tells it from the real rank; docs/security.md.
  // With lazy connections every peer not yet connected is such a rank.) rankPorts[r] is rank
  // r's listener.
  for (std::size_t owner = 0; owner < rankPorts.size(); ++owner) {
    const std::uint16_t port = rankPorts[owner];
    for (auto [rank, size] :
         {std::pair{1, 99}, std::pair{static_cast<int>(owner), 3}, std::pair{2, 1 << 20}}) {
      if (int fd = connectTo(port); fd >= 0) {
        Bytes hello;
        security::Initiator("", security::Service::Transport,
                            transport::tcp::encodeRankContext(rank, size))
            .appendHello(hello);
        sendAll(fd, hello, hello.size());
        ::close(fd);
      }
    }
  }
  // The store: partial 6 MiB frames (held open) and complete 6 MiB SETs under new keys.
  proto::Request req;
  req.type = proto::RequestType::Set;
  req.value.assign(6u << 20, 0x33);
  for (int i = 0; i < 3; ++i) {
    req.keys = {"hostile/" + std::to_string(round) + "/" + std::to_string(i)};
    Bytes frame;
    proto::appendRequest(req, frame);
    if (int fd = connectTo(storePort); fd >= 0) {
      sendAll(fd, frame, frame.size() / 2);
      held.push_back(fd);
    }
    if (int fd = connectTo(storePort); fd >= 0) {
      sendAll(fd, frame, frame.size());
      ::close(fd);
    }
  }
  // Keep the held connections bounded: the oldest go.
  while (held.size() > 64) {
    ::close(held.front());
    held.erase(held.begin());
  }
}

// A 3-rank job (no key: the exposed case) runs verified allreduces for BRAID_HOSTILE_SOAK_SECONDS
// (default 4) while a thread of this process repeats the hostile cases against its store (served
// here) and its ranks' listen ports, starting before the ranks create their communicator. The
// job must finish correct, and this process's peak memory must stay within the store's bound
// plus slack (without the bound it grew by more than the hostile bytes: 3 x 6 MiB per round).
TEST(HostileSoak, RunningJobStaysCorrectAndTheStoreBounded) {
  double seconds = 4;
  if (const char* s = std::getenv("BRAID_HOSTILE_SOAK_SECONDS")) seconds = std::atof(s);
  SecurityOptions security;
  security.storeMaxBytes = 64u << 20;
  security.storeMaxPeerBytes = 32u << 20;
  security.handshakeTimeout = 500ms;
  security.logRejections = false;
  TcpStoreServer server("127.0.0.1", 0, security);
  const std::size_t rssBefore = peakRssBytes();
  Options o;
  o.connectTimeout = 30000ms;
  o.execTimeout = 30000ms;
  o.logLevel = 0;
  o.shmDisable = true;     // every pair over TCP: every rank has a listener to attack
  o.storeCleanup = false;  // the hostile thread reads the listen ports from the host table
  o.security.handshakeTimeout = 500ms;
  o.security.logRejections = false;
  const auto body = [seconds](Comm& c) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    std::vector<std::int64_t> v(1031);
    // Every rank runs the same number of iterations: rank 0's clock decides.
    const auto more = [&] {
      std::int32_t go = Clock::now() < until ? 1 : 0;
      c.broadcast(&go, 1, DataType::Int32, 0);
      return go == 1;
    };
    for (int iter = 0; more(); ++iter) {
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<std::int64_t>(i) * (c.rank() + 1) + iter;
      c.allreduce(v.data(), v.data(), v.size(), DataType::Int64, ReduceOp::Sum);
      for (std::size_t i = 0; i < v.size(); ++i)
        if (v[i] != static_cast<std::int64_t>(i) * 6 + 3 * iter)
          throw Error(ErrorCode::Internal, "iteration " + std::to_string(iter) + ": element " +
                                               std::to_string(i) + " is " + std::to_string(v[i]));
    }
    c.barrier();
  };
  std::atomic<bool> stop{false};
  int rounds = 0;
  std::vector<std::uint16_t> rankPorts;
  // Forked before the hostile thread starts (a child of a threaded process has only the thread
  // that forked); the ranks take longer to create their communicator than the thread to start.
  auto children = forkRanks({3, 3, 3}, server.port(), o, body);
  std::thread hostile([&] {
    TcpStore reader("127.0.0.1", server.port(), 10000ms);
    std::vector<int> held;
    while (!stop.load()) {
      // The ranks' listen ports, once the host table of communicator "0" of this store is
      // gathered (PrefixStore "braid/0/" joins its prefix and a key with a "/"): every
      // "127.0.0.1:PORT" in it is a rank's data listener, in rank order.
      const std::string key = "braid/0//host/all";
      if (rankPorts.empty() && reader.check({key})) {
        const std::string table = reader.getString(key, 1s);
        const std::string loop = "127.0.0.1:";
        for (std::size_t at = table.find(loop); at != std::string::npos;
             at = table.find(loop, at + 1))
          rankPorts.push_back(
              static_cast<std::uint16_t>(std::stoi(table.substr(at + loop.size(), 5))));
      }
      hostileRound(server.port(), rankPorts, rounds++, held);
    }
    for (int fd : held) ::close(fd);
  });
  collect(children, std::chrono::seconds(static_cast<int>(seconds) + 60));
  stop.store(true);
  hostile.join();
  for (std::size_t r = 0; r < children.size(); ++r)
    EXPECT_EQ(children[r].report, "OK") << "rank " << r;
  EXPECT_GT(rounds, 1);
  EXPECT_EQ(rankPorts.size(), 3u) << "the ranks' listen ports were not found in the store";
  const std::size_t grown = peakRssBytes() - rssBefore;
  std::printf("hostile soak: %d rounds (each %d MiB of store frames), peak memory grew %zu KiB\n",
              rounds, 27, grown >> 10);
  // Under ASan freed blocks wait in its quarantine (256 MiB by default) before they are reused,
  // so memory the store gave back still shows in the peak (340 MiB there); a store that kept its
  // frames would hold 27 MiB a round, gigabytes over this run.
#if defined(__SANITIZE_ADDRESS__)
  constexpr std::size_t kQuarantine = std::size_t{256} << 20;
#else
  constexpr std::size_t kQuarantine = 0;
#endif
  EXPECT_LT(grown, (64u << 20) + (64u << 20) + kQuarantine)
      << "the store held " << grown << " bytes for " << rounds << " hostile rounds";
}

}  // namespace
}  // namespace braid
