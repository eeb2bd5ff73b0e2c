#include "transport/host_identity.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <fstream>

namespace braid::transport {

namespace {

std::string hostName() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "";
  return name.data();
}

std::string bootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string namespaceInode(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return "";
  return std::to_string(static_cast<unsigned long long>(st.st_ino));
}

}  // namespace

std::string hostIdentity() {
  return hostName() + "/" + bootId() + "/net:" + namespaceInode("/proc/self/ns/net") +
         "/pid:" + namespaceInode("/proc/self/ns/pid");
}

}  // namespace braid::transport
