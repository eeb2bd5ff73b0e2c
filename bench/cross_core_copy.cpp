// How fast one process copies a block out of shared memory that another process, on the other
// CPU, has just written: the read side of every staged (two-copy) shared-memory collective. The
// same block is copied three ways, interleaved: glibc's memcpy (which picks its own strategy by
// size: on AMD CPUs `rep movsb` up to the L2 size), `rep movsb` itself, and a plain loop of
// 16-byte loads and stores (kernels::copyCached, the copy profile's loop). docs/benchmarks.md,
// "Copying what another CPU just wrote".
//
// Usage: cross-core-copy [ROUNDS=7] [SIZE...]   (default sizes 16K 64K 128K 256K 512K 1M 2M)
// The two processes are pinned to the first two CPUs this process may use. Per round, size and
// method: 30 blocks, each written anew by the writer (memcpy from its own buffer, which it fills
// first, into alternating halves), then copied out by the reader, which times its copy only and
// checks a few of the bytes; the round keeps the median, the table the median of the rounds.
// Exit 77 when fewer than 2 CPUs are allowed (nothing to measure).
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "kernels/copy.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBlocks = 30;
constexpr int kMethods = 3;
const char* const kMethodNames[kMethods] = {"memcpy", "rep movsb", "16-byte loop"};

bool pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return ::sched_setaffinity(0, sizeof s, &s) == 0;
}

void repMovsb(void* dst, const void* src, std::size_t n) {
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

void copyWith(int method, void* dst, const void* src, std::size_t n) {
  if (method == 0)
    std::memcpy(dst, src, n);
  else if (method == 1)
    repMovsb(dst, src, n);
  else
    braid::kernels::copyCached(dst, src, n);
}

// Both sides count the barriers they passed; each waits until the other has passed as many.
struct alignas(64) Shared {
  alignas(64) std::atomic<long> passed[2];
};

std::size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  const std::string unit(end);
  if (unit == "K" || unit == "k") v *= 1024;
  if (unit == "M" || unit == "m") v *= 1024 * 1024;
  return static_cast<std::size_t>(v);
}

std::string sizeText(std::size_t b) {
  return b >= (1 << 20) ? std::to_string(b >> 20) + "M" : std::to_string(b >> 10) + "K";
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  std::vector<std::size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::max<std::size_t>(64, parseSize(argv[i])));
  if (sizes.empty())
    for (std::size_t s = 16 << 10; s <= (2 << 20); s *= 2)
      if (s != (32 << 10)) sizes.push_back(s);
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());

  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 1;
  int cpus[2], found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
  if (found < 2) {
    std::fprintf(stderr, "cross-core-copy: needs 2 CPUs\n");
    return 77;
  }
  void* m = ::mmap(nullptr, sizeof(Shared) + 2 * largest + 4096, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 1;
  auto* sh = new (m) Shared{};
  auto* halves = static_cast<unsigned char*>(m) + 4096;  // two blocks of `largest`
  // The reader's results travel back through a pipe: per size, method and round, the median.
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  const pid_t child = ::fork();
  if (child < 0) return 1;
  const int me = child == 0 ? 1 : 0;  // 0 writes, 1 reads
  pin(cpus[me]);
  long gen = 0;
  auto barrier = [&] {
    ++gen;
    sh->passed[me].store(gen, std::memory_order_release);
    while (sh->passed[1 - me].load(std::memory_order_acquire) < gen) {
    }
  };
  std::vector<unsigned char> mine(largest, 0);  // the writer's source, the reader's destination
  std::vector<double> results;                  // reader: [round][size][method]
  int step = 0;
  for (int r = 0; r <= rounds; ++r)  // round 0 warms up
    for (std::size_t s : sizes)
      for (int method = 0; method < kMethods; ++method) {
        std::vector<double> us;
        for (int b = 0; b < kBlocks; ++b) {
          unsigned char* block = halves + (step & 1) * largest;
          const auto value = static_cast<unsigned char>(step++ % 251 + 1);  // new every block
          if (me == 0) {  // as a staged collective writes: memcpy from its own buffer
            std::memset(mine.data(), value, s);
            std::memcpy(block, mine.data(), s);
          }
          barrier();
          if (me == 1) {
            const auto t0 = Clock::now();
            copyWith(method, mine.data(), block, s);
            us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
            if (mine[0] != value || mine[s / 2] != value || mine[s - 1] != value) {
              std::fprintf(stderr, "cross-core-copy: %s copied wrong bytes\n",
                           kMethodNames[method]);
              // Let the writer out of its barrier: it then finds no results in the pipe.
              sh->passed[1].store(LONG_MAX, std::memory_order_release);
              _exit(2);
            }
          }
          barrier();
        }
        if (me == 1 && r > 0) {
          std::nth_element(us.begin(), us.begin() + kBlocks / 2, us.end());
          results.push_back(us[kBlocks / 2]);
        }
      }
  if (me == 1) {
    const ssize_t bytes = static_cast<ssize_t>(results.size() * sizeof(double));
    const bool sent = ::write(fds[1], results.data(), results.size() * sizeof(double)) == bytes;
    _exit(sent ? 0 : 1);
  }
  results.resize(static_cast<std::size_t>(rounds) * sizes.size() * kMethods);
  std::size_t got = 0;
  const std::size_t want = results.size() * sizeof(double);
  while (got < want) {
    const ssize_t n = ::read(fds[0], reinterpret_cast<char*>(results.data()) + got, want - got);
    if (n <= 0) return 1;
    got += static_cast<std::size_t>(n);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::printf(
      "# copy out of a block the other CPU just wrote: CPUs %d (writer) and %d (reader); "
      "us, median of %d rounds (GB/s)\n",
      cpus[0], cpus[1], rounds);
  std::printf("| size | %s | %s | %s |\n|---:|---:|---:|---:|\n", kMethodNames[0], kMethodNames[1],
              kMethodNames[2]);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::printf("| %s |", sizeText(sizes[i]).c_str());
    for (int method = 0; method < kMethods; ++method) {
      std::vector<double> v;
      for (int r = 0; r < rounds; ++r)
        v.push_back(results[(static_cast<std::size_t>(r) * sizes.size() + i) * kMethods +
                            static_cast<std::size_t>(method)]);
      std::nth_element(v.begin(), v.begin() + rounds / 2, v.end());
      const double us = v[static_cast<std::size_t>(rounds / 2)];
      std::printf(" %.2f (%.1f) |", us, static_cast<double>(sizes[i]) / us / 1e3);
    }
    std::printf("\n");
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
