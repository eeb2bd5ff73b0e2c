// What the operating system reports about the machine, bounded to values braid can act on. The
// reports come from virtual machines and containers as often as from bare metal, and lie there:
// a guest's sysfs may describe a 480 MiB L3, a Firecracker guest has no cache description at
// all, and a container limited to two CPUs by its cgroup still sees every CPU of the host in its
// affinity mask. Every decision braid derives from the machine reads it here, so the bounds are
// written once; tests pass fake roots (a directory tree shaped like /sys or /proc) to exercise
// each kind of report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace braid::machine {

/// Bounds on the last-level cache size braid derives decisions from. Below 4 MiB a reported
/// size is taken to be a partial description (an L2 listed as the highest level); above 64 MiB
/// to be a socket's total or a hypervisor's invention (no core of an x86 server uses more).
inline constexpr std::size_t kMinLlcBytes = std::size_t{4} << 20;
inline constexpr std::size_t kMaxLlcBytes = std::size_t{64} << 20;

struct CacheReading {
  std::size_t reportedBytes = 0;  // what the source said; 0 when no source had a size
  std::size_t bytes = 0;          // reportedBytes bounded to [kMinLlcBytes, kMaxLlcBytes]
  std::string source;             // "sysfs L3", "sysconf L3", "none"
};

/// The last-level cache one core can use: the highest-level cache cpu0's sysfs describes (per
/// CCX on AMD, as lscpu shows), else sysconf's L3 or L2 (cpuid, which may give a whole socket),
/// else nothing (bytes = kMaxLlcBytes). `sysRoot` replaces "/sys" (tests); sysconf is consulted
/// only when sysRoot is "/sys".
CacheReading lastLevelCache(const std::string& sysRoot = "/sys");

/// The CPUs this thread may run on (sched_getaffinity), ascending; empty if the call fails.
std::vector<int> allowedCpus();

/// The CPU time a cgroup grants this process, in CPUs, rounded up: the tightest cpu.max (cgroup
/// v2) or cpu.cfs_quota_us / cpu.cfs_period_us (v1) on the path from the process's cgroup to the
/// root; 0 when none is set. `procSelfCgroup` and `cgroupRoot` replace /proc/self/cgroup and
/// /sys/fs/cgroup (tests).
int cgroupCpuLimit(const std::string& procSelfCgroup = "/proc/self/cgroup",
                   const std::string& cgroupRoot = "/sys/fs/cgroup");

/// CPUs this process can use at once: the affinity mask's size, capped by the cgroup's limit,
/// at least 1.
int usableCpus();

/// What this process may run on, as text to publish to the host's other ranks: its cgroup's CPU
/// limit (0: none) and its affinity mask, e.g. "2 0 1 5".
std::string cpusText();
/// The CPUs the ranks that published `texts` (cpusText() each) can use at once: the union of
/// their affinity masks, capped by the tightest cgroup limit among them; at least 1. Every rank
/// computes it from the same texts, so every rank decides alike. Unreadable entries count as
/// nothing.
int cpusTogether(const std::vector<std::string>& texts);

/// The RDMA devices the kernel registered (the names under <sysRoot>/class/infiniband, which
/// lists InfiniBand and RoCE NICs alike, e.g. "mlx5_0"), sorted; empty when there are none.
std::vector<std::string> rdmaDevices(const std::string& sysRoot = "/sys");

/// How much of a stretch of wall time the calling thread was kept off a CPU (waiting for one
/// while other processes ran, or asleep): a measurement of the machine taken meanwhile measured
/// its load too. A rank of a probe that spins while it waits for its peers stays on its CPU
/// unless something else takes it, or a peer it waits for lost its own for longer than the spin.
class CpuShare {
 public:
  CpuShare();  // starts the stretch
  /// Per mille (0-1000) of the wall time since construction that the thread was not on a CPU.
  std::uint64_t offCpuPermille() const;

 private:
  std::int64_t wallNs_ = 0;
  std::int64_t cpuNs_ = 0;
};

/// "12.3 %" for 123 per mille.
std::string permilleText(std::uint64_t permille);

}  // namespace braid::machine
