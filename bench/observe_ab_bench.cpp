// A/B of straggler stamps and metrics in one run (docs/benchmarks.md, "Cost of straggler
// attribution and metrics"): N forked ranks (one CPU each where there are enough) create four
// communicators over one store: "off" (the defaults), "off2" (the defaults again: the A/A
// control, whose ratio to "off" is what two identical communicators differ by), "stamps"
// (BRAID_STRAGGLER=1: precise stamps on every collective) and "metrics" (BRAID_METRICS_FILE, so
// precise stamps on every 64th collective, per-operation counters, the metrics thread), then
// time blocks of back-to-back blocking allreduces on each in turn (the order rotating every
// round), so that a machine whose load changes affects the four alike. Per size: the median
// over rounds of each setting's per-op time (max over ranks), and the median of the per-round
// ratios to "off".
//
// Usage: [BRAID_AB_ORDER=0123] build/bin/observe_ab_bench [RANKS=2] [ROUNDS=41] [SIZES=8,1048576]
// (BRAID_AB_ORDER: the creation order of off, off2, stamps, metrics, as their indices;
// BRAID_AB_ITERS: operations per block up to 4 KiB, default 20000; BRAID_AB_METRICS_SAMPLE: the
// metrics communicator's Options::stragglerSample, default 0 = the library's default sample)
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace braid;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int runRank(int rank, int n, int port, int rounds, const std::vector<std::size_t>& sizes,
            const int (&order)[4]) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus >= n) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank, &set);
    ::sched_setaffinity(0, sizeof set, &set);
  }
  auto store = std::make_shared<TcpStore>("127.0.0.1", static_cast<std::uint16_t>(port),
                                          std::chrono::seconds(60));
  Options off = Options::fromEnv();  // BRAID_SHM_DISABLE=1 etc. apply to all four
  Options off2 = off;
  Options stamps = off;
  stamps.stragglerSample = 1;
  Options metrics = off;
  metrics.metricsFile = "/tmp/braid-observe-ab.%r.prom";
  metrics.metricsInterval = std::chrono::seconds(1);
  // BRAID_AB_METRICS_SAMPLE: the metrics communicator's stamp sample (default: the library's).
  if (const char* m = std::getenv("BRAID_AB_METRICS_SAMPLE"))
    metrics.stragglerSample = static_cast<unsigned>(std::max(0, std::atoi(m)));
  const char* names[] = {"off", "off2", "stamps", "metrics"};
  constexpr int kSettings = 4;
  const Options* settings[] = {&off, &off2, &stamps, &metrics};
  // Created in the order `order` gives (BRAID_AB_ORDER, e.g. "3012": metrics first), so that a
  // difference that follows the creation position rather than the setting shows itself.
  std::vector<std::unique_ptr<Comm>> comms(kSettings);
  for (int j = 0; j < kSettings; ++j) {
    const int w = order[j];
    comms[w] = Comm::create(std::make_shared<PrefixStore>(store, std::string(names[w]) + "/"), rank,
                            n, *settings[w]);
  }
  std::vector<char> send(sizes.back()), recv(sizes.back());
  for (std::size_t bytes : sizes) {
    const std::size_t count = bytes / 4;
    // BRAID_AB_ITERS: operations per block at sizes up to 4 KiB (shorter blocks put the four
    // settings of a round closer together in time; more rounds make up for the noisier blocks).
    const char* small = std::getenv("BRAID_AB_ITERS");
    const int iters = bytes <= 4096 ? (small != nullptr ? std::max(1, std::atoi(small)) : 20000)
                                    : std::max<int>(20, static_cast<int>((64u << 20) / bytes));
    std::vector<std::vector<double>> t(kSettings);
    std::vector<std::vector<double>> ratio(kSettings);
    for (int w = 0; w < kSettings; ++w)
      for (int i = 0; i < iters / 10 + 1; ++i)
        comms[w]->allreduce(send.data(), recv.data(), count, DataType::Float32, ReduceOp::Sum);
    for (int r = 0; r < rounds; ++r) {
      double per[kSettings];
      for (int j = 0; j < kSettings; ++j) {
        const int w = (j + r) % kSettings;
        Comm& c = *comms[w];
        c.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i)
          c.allreduce(send.data(), recv.data(), count, DataType::Float32, ReduceOp::Sum);
        double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
        c.allreduce(&s, &s, 1, DataType::Float64, ReduceOp::Max);
        per[w] = s;
      }
      for (int w = 0; w < kSettings; ++w) {
        t[w].push_back(per[w]);
        ratio[w].push_back(per[w] / per[0]);
      }
    }
    if (rank == 0) {
      std::printf("| %zu | %s | %d x %d |", bytes,
                  comms[0]->selectedAlgorithm(Collective::Allreduce, bytes).c_str(), rounds, iters);
      for (int w = 0; w < kSettings; ++w)
        std::printf(" %.3f (%.3f) |", median(t[w]) * 1e6,
                    *std::min_element(t[w].begin(), t[w].end()) * 1e6);
      std::printf(" %.3f | %.3f | %.3f |\n", median(ratio[1]), median(ratio[2]), median(ratio[3]));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 41;
  std::vector<std::size_t> sizes;
  std::string list = argc > 3 ? argv[3] : "8,1048576";
  for (std::size_t p = 0; p < list.size();) {
    const std::size_t c = list.find(',', p);
    sizes.push_back(std::stoull(list.substr(p, c - p)));
    if (c == std::string::npos) break;
    p = c + 1;
  }
  std::sort(sizes.begin(), sizes.end());
  int order[4] = {0, 1, 2, 3};
  if (const char* o = std::getenv("BRAID_AB_ORDER")) {
    std::string s = o;
    std::string sorted = s;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != "0123") {
      std::fprintf(stderr, "BRAID_AB_ORDER must be a permutation of 0123 (got %s)\n", o);
      return 2;
    }
    for (int j = 0; j < 4; ++j) order[j] = s[j] - '0';
  }
  TcpStoreServer server("127.0.0.1", 0);
  std::printf(
      "| size (B) | algorithm | rounds x iters | off: median (min) us | off2: median (min) us | "
      "stamps: median (min) us | metrics: median (min) us | off2/off | stamps/off | metrics/off "
      "|\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        ::_exit(runRank(r, n, server.port(), rounds, sizes, order));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        ::_exit(1);
      }
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}
