// Creation time of Comm::split with shared connections and without (docs/benchmarks.md,
// "Creating sub-communicators"): RANKS ranks as threads of this process over TCP (shared memory
// off; with MODE shm, over shared memory instead), meeting through an in-process store, create
// two world communicators, one with BRAID_SHARE_CONNECTIONS on and one off, then split each in
// turn (the order alternating every round) into two halves and time each split (max over ranks,
// from a barrier of the parent to the child's first barrier). Prints per setting the median time
// and the sockets (shm: segments) the splits made, and the median of the per-round ratios
// off/on.
//
// Usage: build/bin/split_bench [RANKS=8] [ROUNDS=21] [MODE=tcp|shm]
#include <algorithm>
#include <atomic>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "store/memory_store.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

using namespace braid;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 8;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 21;
  const bool shm = argc > 3 && std::string(argv[3]) == "shm";
  // What a split makes that sharing saves: sockets over TCP, segments over shared memory.
  const auto made = [shm] {
    return shm ? transport::shmSegmentsMade() : transport::tcpSocketsOpened();
  };
  auto store = std::make_shared<MemoryStore>();
  // Per round and setting: each rank's split time (ms).
  std::vector<std::vector<double>> ms[2];
  for (auto& m : ms) m.assign(static_cast<std::size_t>(rounds), std::vector<double>(ranks, 0.0));
  std::atomic<std::size_t> sockets[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Options o = Options::fromEnv();
      o.shmDisable = !shm;
      std::unique_ptr<Comm> world[2];
      for (int s = 0; s < 2; ++s) {
        o.shareConnections = s == 1;
        world[s] = Comm::create(store, r, ranks, o);
      }
      for (int round = 0; round < rounds; ++round)
        for (int k = 0; k < 2; ++k) {
          const int s = (round + k) % 2;
          Comm& c = *world[s];
          c.barrier();
          const std::size_t before = made();
          c.barrier();
          const auto t0 = std::chrono::steady_clock::now();
          auto sub = c.split(r % 2, r);
          sub->barrier();
          const auto t1 = std::chrono::steady_clock::now();
          ms[s][static_cast<std::size_t>(round)][static_cast<std::size_t>(r)] =
              std::chrono::duration<double, std::milli>(t1 - t0).count();
          c.barrier();
          if (r == 0) sockets[s] += made() - before;
          c.barrier();
        }
    });
  for (auto& t : threads) t.join();
  std::vector<double> per[2], ratios;
  for (int round = 0; round < rounds; ++round) {
    double m[2];
    for (int s = 0; s < 2; ++s) {
      const auto& v = ms[s][static_cast<std::size_t>(round)];
      m[s] = *std::max_element(v.begin(), v.end());
      per[s].push_back(m[s]);
    }
    ratios.push_back(m[0] / m[1]);
  }
  const char* what = shm ? "segments" : "sockets";
  std::printf("ranks %d, rounds %d (split into 2 halves, %s)\n", ranks, rounds,
              shm ? "shared memory" : "TCP, shared memory off");
  std::printf("own %-8s (BRAID_SHARE_CONNECTIONS=0): median %.2f ms, %zu %s per split\n", what,
              median(per[0]), sockets[0].load() / static_cast<std::size_t>(rounds), what);
  std::printf("shared %-8s (BRAID_SHARE_CONNECTIONS=1): median %.2f ms, %zu %s per split\n", what,
              median(per[1]), sockets[1].load() / static_cast<std::size_t>(rounds), what);
  std::printf("median per-round ratio own/shared: %.2f\n", median(ratios));
  return 0;
}
