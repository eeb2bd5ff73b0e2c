#include "common/fd.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace braid {

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

int Fd::close() noexcept {
  if (fd_ < 0) return 0;
  const int rc = ::close(release());
  return rc == 0 ? 0 : errno;
}

std::string errnoText(int err) {
  const char* name = ::strerrorname_np(err);
  char buf[256];
  const char* text = ::strerror_r(err, buf, sizeof buf);  // GNU variant: returns the text
  return std::string(name != nullptr ? name : "errno " + std::to_string(err)) + " (" + text + ")";
}

}  // namespace braid
