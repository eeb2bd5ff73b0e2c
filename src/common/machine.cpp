#include "common/machine.hpp"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace braid::machine {
namespace {

std::string firstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "32768K", "1024K", "32M", "512" (bytes): what sysfs's cache/index*/size holds. 0 on garbage.
std::size_t parseCacheSize(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || errno != 0) return 0;
  const std::string unit(end);
  int shift = 0;
  if (unit == "K" || unit == "k") shift = 10;
  if (unit == "M" || unit == "m") shift = 20;
  if (unit == "G" || unit == "g") shift = 30;
  if (!unit.empty() && shift == 0) return 0;
  if (v > (~0ULL >> shift)) return 0;
  return static_cast<std::size_t>(v << shift);
}

std::string levelName(int level) {
  return "L" + std::to_string(level);
}

// The limit of one cgroup directory in CPUs (quota / period, rounded up); 0 when unlimited.
int limitOfV2(const std::string& dir) {
  std::istringstream in(firstLine(dir + "/cpu.max"));
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  const long long q = std::atoll(quota.c_str());
  if (q <= 0) return 0;
  return static_cast<int>(std::min<long long>((q + period - 1) / period, 1 << 20));
}

int limitOfV1(const std::string& dir) {
  const long long q = std::atoll(firstLine(dir + "/cpu.cfs_quota_us").c_str());
  const long long period = std::atoll(firstLine(dir + "/cpu.cfs_period_us").c_str());
  if (q <= 0 || period <= 0) return 0;
  return static_cast<int>(std::min<long long>((q + period - 1) / period, 1 << 20));
}

// The tightest limit from `base + path` up to `base`.
template <class Limit>
int tightestOnPath(const std::string& base, std::string path, Limit limitOf) {
  int best = 0;
  while (true) {
    const int l = limitOf(base + path);
    if (l > 0 && (best == 0 || l < best)) best = l;
    if (path.empty() || path == "/") break;
    const std::size_t slash = path.find_last_of('/');
    path = slash == std::string::npos || slash == 0 ? std::string() : path.substr(0, slash);
  }
  return best;
}

}  // namespace

CacheReading lastLevelCache(const std::string& sysRoot) {
  CacheReading r;
  int bestLevel = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = sysRoot + "/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    const std::string type = firstLine(dir + "/type");
    if (type == "Instruction") continue;
    const int level = std::atoi(firstLine(dir + "/level").c_str());
    const std::size_t bytes = parseCacheSize(firstLine(dir + "/size"));
    if (level > bestLevel && bytes > 0) {
      bestLevel = level;
      r.reportedBytes = bytes;
      r.source = "sysfs " + levelName(level);
    }
  }
  if (r.reportedBytes == 0 && sysRoot == "/sys") {
    // No cache description in sysfs (a Firecracker guest has none): cpuid through sysconf,
    // which may give the whole socket or whatever the hypervisor made up.
    for (auto [name, level] : {std::pair{_SC_LEVEL3_CACHE_SIZE, 3}, {_SC_LEVEL2_CACHE_SIZE, 2}}) {
      const long v = ::sysconf(name);
      if (v > 0) {
        r.reportedBytes = static_cast<std::size_t>(v);
        r.source = "sysconf " + levelName(level);
        break;
      }
    }
  }
  if (r.reportedBytes == 0) {
    r.source = "none";
    r.bytes = kMaxLlcBytes;
    return r;
  }
  r.bytes = std::clamp(r.reportedBytes, kMinLlcBytes, kMaxLlcBytes);
  return r;
}

std::vector<int> allowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

int cgroupCpuLimit(const std::string& procSelfCgroup, const std::string& cgroupRoot) {
  std::ifstream in(procSelfCgroup);
  int best = 0;
  auto take = [&best](int l) {
    if (l > 0 && (best == 0 || l < best)) best = l;
  };
  for (std::string line; std::getline(in, line);) {
    // "0::/path" (v2) or "4:cpu,cpuacct:/path" (v1).
    const std::size_t a = line.find(':');
    const std::size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (!path.empty() && path.back() == '/') path.pop_back();
    if (controllers.empty()) {
      take(tightestOnPath(cgroupRoot, path, limitOfV2));
      continue;
    }
    std::istringstream list(controllers);
    bool cpu = false;
    for (std::string c; std::getline(list, c, ',');) cpu = cpu || c == "cpu";
    if (!cpu) continue;
    for (const std::string& mount : {controllers, std::string("cpu,cpuacct"), std::string("cpu")})
      take(tightestOnPath(cgroupRoot + "/" + mount, path, limitOfV1));
  }
  return best;
}

int usableCpus() {
  const int affinity = static_cast<int>(allowedCpus().size());
  const int limit = cgroupCpuLimit();
  int n = affinity > 0 ? affinity : 1;
  if (limit > 0) n = std::min(n, limit);
  return std::max(n, 1);
}

std::string cpusText() {
  std::string out = std::to_string(cgroupCpuLimit());
  for (int c : allowedCpus()) out += " " + std::to_string(c);
  return out;
}

int cpusTogether(const std::vector<std::string>& texts) {
  cpu_set_t all;
  CPU_ZERO(&all);
  int limit = 0;
  for (const std::string& text : texts) {
    std::istringstream in(text);
    int l = 0;
    if (in >> l && l > 0 && (limit == 0 || l < limit)) limit = l;
    for (int c = 0; in >> c;)
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &all);
  }
  int n = std::max(1, CPU_COUNT(&all));
  if (limit > 0) n = std::min(n, limit);
  return n;
}

std::vector<std::string> rdmaDevices(const std::string& sysRoot) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(sysRoot + "/class/infiniband", ec))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

std::int64_t clockNs(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

std::string permilleText(std::uint64_t permille) {
  return std::to_string(permille / 10) + "." + std::to_string(permille % 10) + " %";
}

CpuShare::CpuShare()
    : wallNs_(clockNs(CLOCK_MONOTONIC)), cpuNs_(clockNs(CLOCK_THREAD_CPUTIME_ID)) {}

std::uint64_t CpuShare::offCpuPermille() const {
  const std::int64_t wall = clockNs(CLOCK_MONOTONIC) - wallNs_;
  const std::int64_t cpu = clockNs(CLOCK_THREAD_CPUTIME_ID) - cpuNs_;
  if (wall <= 0 || cpu >= wall) return 0;
  return static_cast<std::uint64_t>((wall - cpu) * 1000 / wall);
}

}  // namespace braid::machine
