// The write prefetch of the low-latency line exchange (shm_segment.hpp): linePost claims the
// next exchange's lines with PREFETCHW where the CPU has it. Whether it has it must match what
// the kernel reports (/proc/cpuinfo's "3dnowprefetch" flag on x86), and a prefetch must leave
// memory as it was.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "transport/shm/shm_segment.hpp"

namespace braid::transport::shm {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// Whether the first "flags" line of /proc/cpuinfo lists `flag` (1) or not (0); -1 without one.
int cpuinfoHasFlag(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w)
      if (w == flag) return 1;
    return 0;
  }
  return -1;
}

TEST(ShmPrefetch, WritePrefetchWhereTheKernelSaysTheCpuHasIt) {
  const int listed = cpuinfoHasFlag("3dnowprefetch");
  if (listed < 0) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  EXPECT_EQ(hasPrefetchForWrite(), listed == 1);
}
#endif

TEST(ShmPrefetch, PrefetchLeavesMemoryAsItWas) {
  std::vector<std::uint8_t> lines(16 * kCacheLine);
  for (std::size_t i = 0; i < lines.size(); ++i) lines[i] = static_cast<std::uint8_t>(i * 7 + 1);
  if (hasPrefetchForWrite())
    for (std::size_t o = 0; o < lines.size(); o += kCacheLine) prefetchForWrite(lines.data() + o);
  for (std::size_t i = 0; i < lines.size(); ++i)
    ASSERT_EQ(lines[i], static_cast<std::uint8_t>(i * 7 + 1)) << i;
}

}  // namespace
}  // namespace braid::transport::shm
