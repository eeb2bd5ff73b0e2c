// Ping-pong between 2 processes on one host over braid's TCP transport and over its UCX
// transport (docs/ucx.md), interleaved size by size, medians of `reps` round trips per size:
// one-way latency and bandwidth (bytes / half a round trip). The transports are created
// directly (the communicator cannot choose UCX yet), so this measures the transports alone.
// Usage: ucx_transport_bench [reps] [spin_us] (UCX_TLS and the other UCX variables as usual; no UCX
// in the build: TCP only).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "transport/tcp/tcp_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

using namespace braid;
using namespace braid::transport;

namespace {

// Median round-trip seconds of `reps` ping-pongs of `bytes` (rank 0 pings).
double pingPong(Transport& t, std::size_t bytes, int reps, std::vector<std::uint8_t>& buf) {
  std::vector<double> rtts;
  const int peer = 1 - t.rank();
  const auto bound = [] { return Clock::now() + std::chrono::seconds(60); };
  for (int i = -2; i < reps; ++i) {  // two warm-up round trips
    Request s, r;
    const auto start = Clock::now();
    if (t.rank() == 0) {
      t.postSend(peer, buf.data(), bytes, 1, s);
      t.postRecv(peer, buf.data(), bytes, 1, r);
      t.wait(s, bound());
      t.wait(r, bound());
    } else {
      t.postRecv(peer, buf.data(), bytes, 1, r);
      t.wait(r, bound());
      t.postSend(peer, buf.data(), bytes, 1, s);
      t.wait(s, bound());
    }
    if (i >= 0) rtts.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::nth_element(rtts.begin(), rtts.begin() + rtts.size() / 2, rtts.end());
  return rtts[rtts.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  // Both transports' busy-poll before sleeping (BRAID_SPIN_US's default: 50).
  const auto spin = std::chrono::microseconds(argc > 2 ? std::atoi(argv[2]) : 50);
  const bool ucx = ucxAvailable();
  TcpStoreServer server("127.0.0.1", 0);
  const std::uint16_t port = server.port();
  std::fflush(stdout);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] != 0) continue;
    TcpStore store("127.0.0.1", port, std::chrono::seconds(20));
    TcpOptions tcpOptions;
    tcpOptions.spin = spin;
    auto tcp = createTcpTransport(store, rank, 2, tcpOptions);
    std::unique_ptr<Transport> u;
    UcxOptions ucxOptions;
    ucxOptions.spin = spin;
    if (ucx) u = createUcxTransport(store, rank, 2, ucxOptions);
    std::vector<std::uint8_t> buf(64 << 20, 1);
    if (rank == 0)
      std::printf("%10s %14s %14s %14s %14s\n", "bytes", "tcp us", "tcp MB/s", "ucx us",
                  "ucx MB/s");
    for (std::size_t bytes = 8; bytes <= (64u << 20); bytes *= 4) {
      const int n = bytes >= (4u << 20) ? std::max(5, reps / 5) : reps;
      const double a = pingPong(*tcp, bytes, n, buf);
      const double b = u ? pingPong(*u, bytes, n, buf) : 0;
      if (rank == 0)
        std::printf("%10zu %14.1f %14.0f %14.1f %14.0f\n", bytes, a / 2 * 1e6,
                    bytes / (a / 2) / 1e6, b / 2 * 1e6, b > 0 ? bytes / (b / 2) / 1e6 : 0.0);
      std::fflush(stdout);
    }
    _exit(0);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}
