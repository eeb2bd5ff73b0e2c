// The vCPU placement of the moment: an 8-byte one-way latency between two processes pinned to
// the first two CPUs this process may use, ping-ponging a flag in shared memory, both spinning
// (the method of ../shared/anchors/pingpong, spin mode, without its pipe and TCP modes, so that
// it takes milliseconds and can run before every measurement). On this VM the two vCPUs move
// between a near placement (shared cache, ~0.05 us one-way) and a far one (~0.2 us) every few
// seconds to minutes; bench/compare_shm.sh labels each of its runs with the probes around it.
//
// Usage: placement-probe [ROUND_TRIPS=20000] [REPS=5]
// Prints one line: "<median one-way us> <fastest one-way us>". Exit 1 when fewer than 2 CPUs are
// allowed (nothing to probe).
//
// placement-probe --page-faults: the cost of a page fault on fresh anonymous memory instead (5
// times: map 32 MiB, write one byte per 4 KiB page, unmap); prints the median in us per page.
// Libraries that allocate temporary buffers per call (Open MPI's large collectives) pay it on
// every call; on a VM it can be 10x what it is on bare metal.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string_view>
#include <vector>

namespace {

bool pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return ::sched_setaffinity(0, sizeof s, &s) == 0;
}

double pageFaultMicros() {
  constexpr std::size_t kBytes = std::size_t{32} << 20;
  constexpr std::size_t kPage = 4096;
  std::vector<double> perPage;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    void* m = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    auto* p = static_cast<volatile unsigned char*>(m);
    for (std::size_t i = 0; i < kBytes; i += kPage) p[i] = 1;
    const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
    ::munmap(m, kBytes);
    perPage.push_back(dt.count() / static_cast<double>(kBytes / kPage));
  }
  std::sort(perPage.begin(), perPage.end());
  return perPage[perPage.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--page-faults") {
    const double us = pageFaultMicros();
    if (us < 0) return 1;
    std::printf("%.2f\n", us);
    return 0;
  }
  const long trips = argc > 1 ? std::atol(argv[1]) : 20000;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  if (trips <= 0 || reps <= 0) {
    std::fprintf(
        stderr,
        "usage: placement-probe [ROUND_TRIPS>0] [REPS>0]  |  placement-probe --page-faults\n");
    return 2;
  }
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) {
    std::fprintf(stderr, "placement-probe: fewer than 2 CPUs allowed\n");
    return 1;
  }
  int cpus[2];
  for (int c = 0, k = 0; k < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[k++] = c;
  void* mem = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  auto* flag = new (mem) std::atomic<long>(0);
  const pid_t child = ::fork();
  if (child < 0) return 1;
  const bool isChild = child == 0;
  pin(cpus[isChild ? 1 : 0]);
  std::vector<double> oneWay;
  for (int r = 0; r < reps; ++r) {
    const long base = 2 * trips * r;
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < trips; ++i) {
      const long ping = base + 2 * i + 1;
      if (isChild) {
        while (flag->load(std::memory_order_acquire) != ping) {
        }
        flag->store(ping + 1, std::memory_order_release);
      } else {
        flag->store(ping, std::memory_order_release);
        while (flag->load(std::memory_order_acquire) != ping + 1) {
        }
      }
    }
    const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
    oneWay.push_back(dt.count() / (2.0 * static_cast<double>(trips)));
  }
  if (isChild) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::sort(oneWay.begin(), oneWay.end());
  std::printf("%.3f %.3f\n", oneWay[oneWay.size() / 2], oneWay.front());
  return 0;
}
