// What braid reads of the machine (src/common/machine.hpp), from fake /sys and /proc trees made
// by the test: the cache descriptions VMs give (a 480 MiB L3, an L2 as the highest level, none,
// garbage), cgroup v1 and v2 CPU limits, and the process-wide override of the cache size the
// streaming threshold derives from. Nothing here depends on the machine the test runs on.
#include "common/machine.hpp"

#include <gtest/gtest.h>

#include <braid/options.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/process_settings.hpp"
#include "kernels/reduce.hpp"

namespace braid::test {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kMiB = std::size_t{1} << 20;

class FakeRoot {
 public:
  FakeRoot() {
    char tmpl[] = "/tmp/braid_machine_XXXXXX";
    root_ = ::mkdtemp(tmpl);
  }
  ~FakeRoot() { fs::remove_all(root_); }
  FakeRoot(const FakeRoot&) = delete;
  FakeRoot& operator=(const FakeRoot&) = delete;

  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  // cpu0's cache/index<i>: level, type, size as sysfs spells them.
  void cache(int i, int level, const std::string& type, const std::string& size) const {
    const std::string d = "devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    write(d + "level", std::to_string(level));
    write(d + "type", type);
    write(d + "size", size);
  }
  const std::string& path() const { return root_; }

 private:
  std::string root_;
};

TEST(Machine, TakesTheHighestLevelCacheSysfsDescribes) {
  FakeRoot sys;
  sys.cache(0, 1, "Data", "32K");
  sys.cache(1, 1, "Instruction", "32K");
  sys.cache(2, 2, "Unified", "1024K");
  sys.cache(3, 3, "Unified", "32768K");
  const machine::CacheReading r = machine::lastLevelCache(sys.path());
  EXPECT_EQ(r.reportedBytes, 32 * kMiB);
  EXPECT_EQ(r.bytes, 32 * kMiB);
  EXPECT_EQ(r.source, "sysfs L3");
}

TEST(Machine, BoundsAnL3OfHundredsOfMegabytesAsAVmReportsIt) {
  FakeRoot sys;  // what an Intel Xeon guest's sysfs said (2 vCPUs)
  sys.cache(0, 1, "Data", "48K");
  sys.cache(2, 2, "Unified", "2048K");
  sys.cache(3, 3, "Unified", "491520K");
  const machine::CacheReading r = machine::lastLevelCache(sys.path());
  EXPECT_EQ(r.reportedBytes, 480 * kMiB);
  EXPECT_EQ(r.bytes, machine::kMaxLlcBytes);
}

TEST(Machine, RaisesAnL2DescribedAsTheLastLevelToTheFloor) {
  FakeRoot sys;
  sys.cache(0, 1, "Data", "32K");
  sys.cache(1, 2, "Unified", "512K");
  const machine::CacheReading r = machine::lastLevelCache(sys.path());
  EXPECT_EQ(r.reportedBytes, 512u << 10);
  EXPECT_EQ(r.bytes, machine::kMinLlcBytes);
  EXPECT_EQ(r.source, "sysfs L2");
}

TEST(Machine, NoOrGarbledDescriptionGivesTheUpperBound) {
  FakeRoot empty;
  machine::CacheReading r = machine::lastLevelCache(empty.path());
  EXPECT_EQ(r.source, "none");
  EXPECT_EQ(r.reportedBytes, 0u);
  EXPECT_EQ(r.bytes, machine::kMaxLlcBytes);
  FakeRoot garbled;
  garbled.cache(0, 3, "Unified", "lots");
  garbled.cache(1, 2, "Unified", "12Q");
  garbled.cache(2, 2, "Unified", "99999999999999999999999K");
  r = machine::lastLevelCache(garbled.path());
  EXPECT_EQ(r.source, "none");
  EXPECT_EQ(r.bytes, machine::kMaxLlcBytes);
}

TEST(Machine, TheRealReadingIsWithinTheBounds) {
  const machine::CacheReading r = machine::lastLevelCache();
  EXPECT_GE(r.bytes, machine::kMinLlcBytes);
  EXPECT_LE(r.bytes, machine::kMaxLlcBytes);
  EXPECT_FALSE(r.source.empty());
}

TEST(Machine, CgroupV2LimitIsTheTightestOnThePath) {
  FakeRoot fake;
  fake.write("proc/self/cgroup", "0::/job/step");
  fake.write("cg/cpu.max", "max 100000");
  fake.write("cg/job/cpu.max", "400000 100000");
  fake.write("cg/job/step/cpu.max", "150000 100000");  // 1.5 CPUs: 2 can run at once
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/proc/self/cgroup", fake.path() + "/cg"), 2);
  fake.write("cg/job/cpu.max", "100000 100000");
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/proc/self/cgroup", fake.path() + "/cg"), 1);
  fake.write("cg/job/cpu.max", "max 100000");
  fake.write("cg/job/step/cpu.max", "max 100000");
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/proc/self/cgroup", fake.path() + "/cg"), 0);
}

TEST(Machine, CgroupV2InsideAContainerReadsTheRoot) {
  FakeRoot fake;  // a cgroup namespace shows the container's own cgroup as "/"
  fake.write("proc/self/cgroup", "0::/");
  fake.write("cg/cpu.max", "200000 100000");
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/proc/self/cgroup", fake.path() + "/cg"), 2);
}

TEST(Machine, CgroupV1QuotaAndPeriod) {
  FakeRoot fake;
  fake.write("proc/self/cgroup", "12:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n");
  fake.write("cg/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "300000");
  fake.write("cg/cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000");
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/proc/self/cgroup", fake.path() + "/cg"), 3);
  fake.write("cg/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "-1");
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/proc/self/cgroup", fake.path() + "/cg"), 0);
}

TEST(Machine, MissingCgroupFilesMeanNoLimit) {
  FakeRoot fake;
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/nothing", fake.path() + "/cg"), 0);
  fake.write("proc/self/cgroup", "0::/a");
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/proc/self/cgroup", fake.path() + "/cg"), 0);
  fake.write("cg/a/cpu.max", "garbage");
  EXPECT_EQ(machine::cgroupCpuLimit(fake.path() + "/proc/self/cgroup", fake.path() + "/cg"), 0);
}

TEST(Machine, UsableCpusAreAtLeastOneAndAtMostTheAffinityMask) {
  const int n = machine::usableCpus();
  EXPECT_GE(n, 1);
  const std::size_t affinity = machine::allowedCpus().size();
  if (affinity > 0) {
    EXPECT_LE(static_cast<std::size_t>(n), affinity);
  }
}

// The host's ranks together: the union of their masks, capped by the tightest cgroup limit.
TEST(Machine, CpusTogetherAreTheUnionOfTheMasksUnderTheTightestLimit) {
  EXPECT_EQ(machine::cpusTogether({"0 0", "0 1"}), 2);              // two ranks bound apart
  EXPECT_EQ(machine::cpusTogether({"0 0 1", "0 0 1"}), 2);          // both may use both
  EXPECT_EQ(machine::cpusTogether({"0 0", "0 0", "0 0"}), 1);       // three on one CPU
  EXPECT_EQ(machine::cpusTogether({"0 0 1 2 3", "2 0 1 2 3"}), 2);  // a cgroup limit of 2
  EXPECT_EQ(machine::cpusTogether({"3 0 1 2 3", "0 4"}), 3);        // the tightest limit counts
  EXPECT_EQ(machine::cpusTogether({}), 1);                          // nothing readable: at least 1
  EXPECT_EQ(machine::cpusTogether({"garbage", ""}), 1);
  // This process's own text reads back as what it may use.
  EXPECT_EQ(machine::cpusTogether({machine::cpusText()}), machine::usableCpus());
}

// The override wins over the machine's report, and clearing it returns to the report.
TEST(Machine, TheCacheOverrideSetsTheStreamingThreshold) {
  const std::size_t before = kernels::streamingThresholdBytes();
  kernels::setLastLevelCacheBytes(2 * kMiB);
  EXPECT_EQ(kernels::streamingThresholdBytes(), kMiB);
  Options o;
  o.llcBytes = 8192;
  core::applyProcessSettings(o);
  EXPECT_EQ(kernels::streamingThresholdBytes(), 4096u);
  EXPECT_NE(core::processSettingsText().find("streaming from 4 KiB"), std::string::npos)
      << core::processSettingsText();
  kernels::setLastLevelCacheBytes(0);
  EXPECT_EQ(kernels::streamingThresholdBytes(), machine::lastLevelCache().bytes / 2);
  kernels::setLastLevelCacheBytes(before * 2);  // what the test main applied, if anything
}

// A thread that sleeps is off its CPU the whole time; the figure reads in per mille.
TEST(Machine, CpuShareCountsTheTimeOffTheCpu) {
  const machine::CpuShare share;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_GE(share.offCpuPermille(), 900u);
  EXPECT_LE(share.offCpuPermille(), 1000u);
  EXPECT_EQ(machine::permilleText(123), "12.3 %");
  EXPECT_EQ(machine::permilleText(5), "0.5 %");
}

}  // namespace
}  // namespace braid::test
