// This process's PeerInfo, read from Linux: what a rank publishes about itself at bootstrap.
#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>

#include "common/machine.hpp"
#include "topology/topology.hpp"
#include "transport/host_identity.hpp"

namespace braid::topology {

namespace {

std::string hostName() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "";
  return name.data();
}

std::string netnsInode() {
  struct stat st {};
  if (::stat("/proc/self/ns/net", &st) != 0) return "";
  return std::to_string(static_cast<unsigned long long>(st.st_ino));
}

// "0-3,8" -> {0,1,2,3,8}; malformed parts are skipped.
std::vector<int> parseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::size_t i = 0;
  auto num = [&](int& v) {
    if (i >= text.size() || text[i] < '0' || text[i] > '9') return false;
    v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && v < 1 << 20)
      v = v * 10 + (text[i++] - '0');
    return true;
  };
  while (i < text.size()) {
    int lo = 0;
    int hi = 0;
    if (!num(lo)) break;
    hi = lo;
    if (i < text.size() && text[i] == '-') {
      ++i;
      if (!num(hi)) break;
    }
    for (int c = lo; c <= hi && c - lo < 1 << 16; ++c) cpus.push_back(c);
    if (i < text.size() && text[i] == ',')
      ++i;
    else
      break;
  }
  return cpus;
}

// The one NUMA node (from /sys/devices/system/node/node*/cpulist) holding every allowed CPU,
// else -1.
int numaNodeOf(const std::vector<int>& cpus) {
  DIR* dir = ::opendir("/sys/devices/system/node");
  if (dir == nullptr || cpus.empty()) {
    if (dir != nullptr) ::closedir(dir);
    return -1;
  }
  int found = -1;
  bool mixed = false;
  while (dirent* e = ::readdir(dir)) {
    int node = -1;
    if (std::sscanf(e->d_name, "node%d", &node) != 1 || node < 0) continue;
    std::ifstream in("/sys/devices/system/node/" + std::string(e->d_name) + "/cpulist");
    std::string line;
    std::getline(in, line);
    const std::vector<int> nodeCpus = parseCpuList(line);
    std::size_t inside = 0;
    for (int c : cpus)
      if (std::find(nodeCpus.begin(), nodeCpus.end(), c) != nodeCpus.end()) ++inside;
    if (inside == cpus.size())
      found = node;
    else if (inside > 0)
      mixed = true;
  }
  ::closedir(dir);
  return mixed ? -1 : found;
}

int prefixLength(const sockaddr* mask) {
  if (mask == nullptr) return -1;
  int bits = 0;
  const unsigned char* b = nullptr;
  std::size_t len = 0;
  if (mask->sa_family == AF_INET) {
    b = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    len = 4;
  } else if (mask->sa_family == AF_INET6) {
    b = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    len = 16;
  } else {
    return -1;
  }
  for (std::size_t i = 0; i < len; ++i)
    for (int k = 7; k >= 0; --k) bits += (b[i] >> k) & 1;
  return bits;
}

std::vector<Interface> interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_UP) == 0) continue;
    const int fam = a->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    std::array<char, INET6_ADDRSTRLEN> buf{};
    const void* src =
        fam == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr);
    if (::inet_ntop(fam, src, buf.data(), buf.size()) == nullptr) continue;
    std::string addr = buf.data();
    const int prefix = prefixLength(a->ifa_netmask);
    if (prefix >= 0) addr += "/" + std::to_string(prefix);
    Interface* itf = nullptr;
    for (auto& i : out)
      if (i.name == a->ifa_name) itf = &i;
    if (itf == nullptr) itf = &out.emplace_back(Interface{a->ifa_name, {}});
    itf->addresses.push_back(std::move(addr));
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace

PeerInfo localPeerInfo(std::string_view hostId) {
  PeerInfo p;
  p.hostname = hostName();
  p.hostId = hostId.empty() ? transport::hostIdentity() : std::string(hostId);
  p.netns = netnsInode();
  const std::vector<int> cpus = machine::allowedCpus();
  p.cpus = formatCpuList(cpus);
  p.numaNode = numaNodeOf(cpus);
  p.interfaces = interfaces();
  return p;
}

}  // namespace braid::topology
