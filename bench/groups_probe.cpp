// One rank of the "many communicators per process" measurement (docs/benchmarks.md,
// "Communicators per process: the liveness hub"): under braid-run (TCP store served by the
// launcher), creates the world communicator, then GROUPS sub-communicators with split (kept
// alive, as torch keeps its groups), timing each from a barrier of the world to the child's
// first barrier. Rank 0 prints one JSON line: the median and the last split time (max over
// ranks), and the file descriptors this rank holds before and after (max over ranks).
// Usage: braid-run -n N -- groups-probe [GROUPS=20]
#include <dirent.h>

#include <algorithm>
#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace {

int openFds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n - 3;  // ".", ".." and the directory's own descriptor
}

}  // namespace

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  const int groups = argc > 1 ? std::atoi(argv[1]) : 20;
  try {
    auto world = braid::Comm::fromEnv();
    world->barrier();
    const double before = openFds();
    std::vector<std::unique_ptr<braid::Comm>> kept;
    std::vector<double> ms(static_cast<std::size_t>(groups));
    for (int g = 0; g < groups; ++g) {
      world->barrier();
      const auto t0 = Clock::now();
      auto child = world->split((world->rank() + g) % 2, world->rank());
      child->barrier();
      ms[static_cast<std::size_t>(g)] =
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      kept.push_back(std::move(child));
    }
    world->allreduce(ms.data(), ms.data(), ms.size(), braid::DataType::Float64,
                     braid::ReduceOp::Max);
    double fds[2] = {before, static_cast<double>(openFds())};
    world->allreduce(fds, fds, 2, braid::DataType::Float64, braid::ReduceOp::Max);
    const double last = ms.back();
    std::sort(ms.begin(), ms.end());
    if (world->rank() == 0)
      std::printf(
          "{\"nranks\":%d,\"groups\":%d,\"split_median_ms\":%.3f,\"split_last_ms\":%.3f,"
          "\"fds_before\":%.0f,\"fds_after\":%.0f}\n",
          world->size(), groups, ms[ms.size() / 2], last, fds[0], fds[1]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "groups_probe: %s\n", e.what());
    return 1;
  }
}
