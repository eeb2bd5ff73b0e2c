// The TCP data plane over the address that BRAID_SOCKET_IFNAME / BRAID_SOCKET_FAMILY /
// BRAID_PORT_RANGE select: IPv6 end to end on ::1 (store and data), an interface chosen by name,
// listeners inside a port range, and the error of an exhausted range. Ranks are threads, each
// with its own TcpStore connection, shared memory disabled so that every pair uses TCP.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <braid/braid.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.hpp"

namespace braid {
namespace {

using namespace std::chrono_literals;

bool haveIpv6Loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

Options tcpOptions() {
  Options o = test::testOptions();
  o.shmDisable = true;
  return o;
}

struct Result {
  std::vector<std::string> addresses;  // each rank's data listener, as its peers dial it
  std::vector<std::string> errors;     // per rank, empty when it succeeded
};

// Runs `size` ranks as threads against a store served on storeHost; each creates a communicator
// (the first one of the store: id 0, keys under "braid/0/" + "/")
// with `opts` (eagerly connected), checks an allreduce and the path to every peer, and reports
// the next rank's listener address as it dialed or accepted it (describePeer).
Result runRanks(const std::string& storeHost, int size, const Options& opts) {
  TcpStoreServer server(storeHost, 0);
  Result r;
  r.addresses.resize(static_cast<std::size_t>(size));
  r.errors.resize(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto store = std::make_shared<TcpStore>(storeHost, server.port(), 20000ms);
        Options eager = opts;
        eager.lazyConnect = false;  // every peer's address is known once created
        auto comm = Comm::create(store, rank, size, eager);
        for (int p = 0; p < size; ++p)
          if (p != rank && comm->pathTo(p) != "tcp")
            throw Error(ErrorCode::Internal,
                        "path to " + std::to_string(p) + " is " + comm->pathTo(p) + ", not tcp");
        std::vector<float> v(1000);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(rank * 1000 + i);
        comm->allreduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
        for (std::size_t i = 0; i < v.size(); ++i) {
          const float want = static_cast<float>(size * (size - 1) / 2 * 1000 + size * i);
          if (v[i] != want)
            throw Error(ErrorCode::Internal, "allreduce element " + std::to_string(i) + " is " +
                                                 std::to_string(v[i]) + ", expected " +
                                                 std::to_string(want));
        }
        // "rank P (HOST:PORT)"
        const int next = (rank + 1) % size;
        const std::string peer = comm->describePeer(next);
        const std::size_t open = peer.find('('), close = peer.rfind(')');
        if (open == std::string::npos || close == std::string::npos || close < open)
          throw Error(ErrorCode::Internal, "describePeer(" + std::to_string(next) + ") is \"" +
                                               peer + "\", without an address");
        r.addresses[static_cast<std::size_t>(next)] = peer.substr(open + 1, close - open - 1);
        comm->barrier();
      } catch (const std::exception& e) {
        r.errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return r;
}

void expectAllSucceeded(const Result& r) {
  for (std::size_t i = 0; i < r.errors.size(); ++i) EXPECT_EQ(r.errors[i], "") << "rank " << i;
}

std::uint16_t portOf(const std::string& hostPort) {
  return static_cast<std::uint16_t>(std::stoi(hostPort.substr(hostPort.rfind(':') + 1)));
}

TEST(Network, Ipv6LoopbackEndToEnd) {
  if (!haveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) here";
  const Result r = runRanks("::1", 3, tcpOptions());
  expectAllSucceeded(r);
  for (const std::string& a : r.addresses) EXPECT_EQ(a.rfind("[::1]:", 0), 0u) << a;
}

TEST(Network, Ipv6FamilyWithAnIpv4Store) {
  if (!haveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) here";
  Options o = tcpOptions();
  o.socketFamily = 6;
  const Result r = runRanks("127.0.0.1", 3, o);
  expectAllSucceeded(r);
  for (const std::string& a : r.addresses) EXPECT_EQ(a.rfind("[::1]:", 0), 0u) << a;
}

TEST(Network, IfnameSelectsLoopbackByName) {
  Options o = tcpOptions();
  o.socketIfname = "=lo";
  o.socketFamily = 4;
  const Result r = runRanks("127.0.0.1", 2, o);
  expectAllSucceeded(r);
  for (const std::string& a : r.addresses) EXPECT_EQ(a.rfind("127.0.0.1:", 0), 0u) << a;
}

TEST(Network, IfnameMatchingNothingNamesVariableRankAndInterfaces) {
  Options o = tcpOptions();
  o.socketIfname = "nosuchif";
  const Result r = runRanks("127.0.0.1", 2, o);
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    const std::string& e = r.errors[i];
    EXPECT_NE(e.find("BRAID_SOCKET_IFNAME='nosuchif'"), std::string::npos) << e;
    EXPECT_NE(e.find("rank " + std::to_string(i)), std::string::npos) << e;
    EXPECT_NE(e.find("lo (127.0.0.1"), std::string::npos) << e;
  }
}

// A free window of `n` ports on 127.0.0.1: probes a few candidates by binding all of them.
std::uint16_t freeWindow(int n) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int base = 20000 + static_cast<int>((::getpid() * 7919 + attempt * 1237) % 30000);
    bool ok = true;
    for (int p = base; p < base + n && ok; ++p) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(p));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(fd);
    }
    if (ok) return static_cast<std::uint16_t>(base);
  }
  return 0;
}

TEST(Network, ListenersBindInsideThePortRange) {
  const std::uint16_t base = freeWindow(8);
  ASSERT_NE(base, 0) << "no free window of 8 ports found";
  Options o = tcpOptions();
  o.portRangeLow = base;
  o.portRangeHigh = static_cast<std::uint16_t>(base + 7);
  const Result r = runRanks("127.0.0.1", 4, o);
  expectAllSucceeded(r);
  std::vector<std::uint16_t> ports;
  for (const std::string& a : r.addresses) {
    ASSERT_FALSE(a.empty());
    const std::uint16_t p = portOf(a);
    EXPECT_GE(p, o.portRangeLow) << a;
    EXPECT_LE(p, o.portRangeHigh) << a;
    for (std::uint16_t q : ports) EXPECT_NE(p, q) << a;
    ports.push_back(p);
  }
}

TEST(Network, ExhaustedPortRangeIsAnErrorNamingIt) {
  const std::uint16_t base = freeWindow(2);
  ASSERT_NE(base, 0);
  // Occupy both ports of the range.
  std::vector<int> held;
  for (int p = base; p < base + 2; ++p) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(p));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(fd, 1), 0);
    held.push_back(fd);
  }
  Options o = tcpOptions();
  o.portRangeLow = base;
  o.portRangeHigh = static_cast<std::uint16_t>(base + 1);
  o.connectTimeout = 5000ms;
  const Result r = runRanks("127.0.0.1", 2, o);
  const std::string range = std::to_string(base) + "-" + std::to_string(base + 1);
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    const std::string& e = r.errors[i];
    EXPECT_NE(e.find("BRAID_PORT_RANGE=" + range), std::string::npos) << e;
    EXPECT_NE(e.find("rank " + std::to_string(i)), std::string::npos) << e;
    EXPECT_NE(e.find("no free port"), std::string::npos) << e;
  }
  for (int fd : held) ::close(fd);
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

// Rank 0's store after `comms` communicators (each with a split) were created, used and
// destroyed by 4 ranks as threads: the number of keys it holds.
std::size_t keysAfter(int comms, Options o) {
  constexpr int kSize = 4;
  TcpStoreServer server("127.0.0.1", 0);
  std::vector<std::string> errors(kSize);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kSize; ++rank)
    threads.emplace_back([&, rank] {
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 20000ms);
        for (int c = 0; c < comms; ++c) {
          auto comm = Comm::create(store, rank, kSize, o);
          std::int32_t v = rank + 1;
          comm->allreduce(&v, &v, 1, DataType::Int32, ReduceOp::Sum);
          if (v != kSize * (kSize + 1) / 2)
            throw Error(ErrorCode::Internal, "allreduce gave " + std::to_string(v));
          auto sub = comm->split(rank % 2, rank);
          v = 1;
          sub->allreduce(&v, &v, 1, DataType::Int32, ReduceOp::Sum);
          if (v != kSize / 2)
            throw Error(ErrorCode::Internal, "split allreduce gave " + std::to_string(v));
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < kSize; ++r)
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  return server.keyCount();
}

// Every key of a communicator is deleted once every rank destroyed it (the bootstrap's already
// when every rank finished it): what stays is one generation counter per rank of the job
// ("braid/generation/<rank>"), however many communicators came and went, eager or lazy.
TEST(Network, StoreKeysDoNotGrowWithCommunicators) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    Options o = tcpOptions();
    o.lazyConnect = lazy;
    EXPECT_EQ(keysAfter(1, o), 4u);
    EXPECT_EQ(keysAfter(3, o), 4u);
  }
  // Kept on request: then they grow with every communicator (so the count above can fail).
  Options keep = tcpOptions();
  keep.storeCleanup = false;
  const std::size_t one = keysAfter(1, keep);
  EXPECT_GT(one, 4u);
  EXPECT_GT(keysAfter(2, keep), one);
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

// Runs body(rank, comm) on `size` threads, each with a communicator created with `o` over the
// store `server` serves, and expects no rank to fail.
void runOnServer(TcpStoreServer& server, int size, const Options& o,
                 const std::function<void(int, Comm&)>& body) {
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 20000ms);
        auto comm = Comm::create(store, rank, size, o);
        body(rank, *comm);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// Store requests rank 0's server answered while `size` ranks (threads, every pair over TCP,
// eager) created one communicator and ran one allreduce; `table` receives the gathered host
// table ("braid/0//host/all": the bootstrap keys are kept for this).
std::uint64_t creationRequests(int size, std::string* table = nullptr,
                               std::vector<std::string>* described = nullptr) {
  TcpStoreServer server("127.0.0.1", 0);
  Options o = tcpOptions();
  o.lazyConnect = false;
  o.storeCleanup = false;
  if (described != nullptr) described->assign(static_cast<std::size_t>(size), "");
  runOnServer(server, size, o, [&](int rank, Comm& comm) {
    std::int32_t v = 1;
    comm.allreduce(&v, &v, 1, DataType::Int32, ReduceOp::Sum);
    if (v != size) throw Error(ErrorCode::Internal, "allreduce gave " + std::to_string(v));
    if (described != nullptr)
      (*described)[static_cast<std::size_t>(rank)] = comm.describePeer((rank + 1) % size);
    comm.barrier();
  });
  if (table != nullptr) {
    TcpStore reader("127.0.0.1", server.port(), 5000ms);
    *table = reader.getString("braid/0//host/all", 5000ms);
    for (int r = 0; r < size; ++r)
      EXPECT_FALSE(reader.check({"braid/0//tcp/addr/" + std::to_string(r)})) << "rank " << r;
  }
  return server.requestCount();
}

// The TCP listeners' addresses travel in the host table the transport factory gathers (one
// all-gather through rank 0), not under per-rank keys that every rank reads (N(N - 1) reads
// per stream before): every rank's address is in the table, no tcp/ key exists, and the store
// requests of creating a communicator grow linearly with the ranks.
TEST(Network, TcpAddressesTravelInTheHostTable) {
  std::string table;
  std::vector<std::string> described;
  creationRequests(5, &table, &described);
  for (int r = 0; r < 5; ++r) {
    const std::string& d = described[static_cast<std::size_t>(r)];
    const std::size_t open = d.find('('), close = d.rfind(')');
    ASSERT_TRUE(open != std::string::npos && close != std::string::npos) << d;
    const std::string address = d.substr(open + 1, close - open - 1);
    EXPECT_NE(table.find(address), std::string::npos) << address << " not in the table";
  }
  // a + bN requests give large - 2 small = -a; each N^2 term adds 32 per unit (the per-pair
  // address reads were 1.5 N(N - 1): 64 + 18 and 132 + 84, a difference of 52). The counts move
  // by about 10 from run to run (waits that find their key at once or poll for it; more under
  // load): the fewest of three runs each, and a slack of 30, still well below what the per-pair
  // reads added.
  auto fewest = [](int size) {
    std::uint64_t n = creationRequests(size);
    for (int k = 0; k < 2; ++k) n = std::min(n, creationRequests(size));
    return n;
  };
  const std::uint64_t small = fewest(4), large = fewest(8);
  std::printf("store requests: 4 ranks %llu, 8 ranks %llu\n",
              static_cast<unsigned long long>(small), static_cast<unsigned long long>(large));
  EXPECT_LT(large, 2 * small + 30) << "store requests grow faster than the ranks";
}

// Shared memory sets up through the segment itself: the memfd each rank offers travels in the
// host table, and no key of the shared-memory setup exists (the standalone form's, and the
// rounds of the transport's own before: segment, open, final, cpus, probed).
TEST(Network, SharedMemoryMakesNoStoreRequestOfItsOwn) {
  for (int size : {2, 5}) {
    TcpStoreServer server("127.0.0.1", 0);
    Options o = test::testOptions();
    o.storeCleanup = false;
    std::vector<std::string> paths(static_cast<std::size_t>(size));
    runOnServer(server, size, o, [&](int rank, Comm& comm) {
      paths[static_cast<std::size_t>(rank)] = comm.pathTo((rank + 1) % size);
      comm.barrier();
    });
    for (int r = 0; r < size; ++r)
      EXPECT_EQ(paths[static_cast<std::size_t>(r)].rfind("shm", 0), 0u) << "rank " << r;
    TcpStore reader("127.0.0.1", server.port(), 5000ms);
    const std::string table = reader.getString("braid/0//host/all", 5000ms);
    EXPECT_NE(table.find("\nmemfd "), std::string::npos) << table;
    for (const char* key : {"entry/0", "segment", "final", "open/1", "cpus/0", "probed/0"})
      EXPECT_FALSE(reader.check({std::string("braid/0//shm/0/") + key})) << key;
  }
}

}  // namespace
}  // namespace braid
