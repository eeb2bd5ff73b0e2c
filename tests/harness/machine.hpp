// Tests set the machine properties they exercise instead of inheriting the machine's
// (docs/testing.md, "Machine independence"): a cache size for the streaming threshold, a CPU
// count for oversubscription.
#pragma once

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "kernels/reduce.hpp"

namespace braid::test {

/// While alive, the process's streaming threshold derives from a last-level cache of `bytes`
/// (as BRAID_LLC_SIZE would set it); the previous threshold is restored afterwards.
class ScopedLastLevelCache {
 public:
  explicit ScopedLastLevelCache(std::size_t bytes) : saved_(kernels::streamingThresholdSet()) {
    kernels::setLastLevelCacheBytes(bytes);
  }
  // The override that was set (none: 0, the measured or reported threshold applies again).
  ~ScopedLastLevelCache() { kernels::setLastLevelCacheBytes(saved_ * 2); }
  ScopedLastLevelCache(const ScopedLastLevelCache&) = delete;
  ScopedLastLevelCache& operator=(const ScopedLastLevelCache&) = delete;

 private:
  std::size_t saved_;
};

/// Restricts the calling thread (and the threads and processes it starts afterwards) to its
/// first two allowed CPUs while alive, so that 4 or 8 ranks are oversubscribed on any machine.
/// On a machine with one CPU the ranks share that one.
class TwoCpus {
 public:
  TwoCpus() {
    CPU_ZERO(&saved_);
    if (::sched_getaffinity(0, sizeof saved_, &saved_) != 0) return;
    cpu_set_t two;
    CPU_ZERO(&two);
    int taken = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && taken < 2; ++cpu)
      if (CPU_ISSET(cpu, &saved_)) {
        CPU_SET(cpu, &two);
        ++taken;
      }
    restore_ = ::sched_setaffinity(0, sizeof two, &two) == 0;
  }
  ~TwoCpus() {
    if (restore_) ::sched_setaffinity(0, sizeof saved_, &saved_);
  }
  TwoCpus(const TwoCpus&) = delete;
  TwoCpus& operator=(const TwoCpus&) = delete;

 private:
  cpu_set_t saved_;
  bool restore_ = false;
};

/// Why process_vm_readv (CMA, single copy between processes) cannot run here, or "" when it can:
/// a seccomp policy may refuse the call altogether (reading this process's own memory is
/// otherwise always permitted, whatever Yama's ptrace_scope says). Tests that require single
/// copy skip with this reason.
inline std::string cmaUnavailableReason() {
  char from[8] = "braid";
  char to[8] = {};
  iovec local{to, sizeof to};
  iovec remote{from, sizeof from};
  if (::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == sizeof from &&
      std::memcmp(from, to, sizeof from) == 0)
    return "";
  return std::string("process_vm_readv is not permitted here: ") + std::strerror(errno);
}

}  // namespace braid::test
