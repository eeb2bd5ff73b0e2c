#include "common/peer_policy.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <braid/error.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/fd.hpp"

namespace braid::security {

std::string readAuthKeyFile(const std::string& path) {
  const auto bad = [&](const std::string& why) {
    return Error(ErrorCode::InvalidArgument, "BRAID_AUTH_KEY_FILE='" + path + "': " + why);
  };
  // O_NOFOLLOW: the checks below are on the file itself, not on a link someone else may own.
  const Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!file) throw bad("cannot open: " + errnoText(errno));
  const int fd = file.get();
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw bad(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw bad("not a regular file");
  if (st.st_uid != ::geteuid())
    throw bad("owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
              std::to_string(::geteuid()) + ")");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw bad(std::string("readable or writable by others (mode ") + mode +
              "); the key must be readable only by you: chmod 600 " + path);
  }
  constexpr std::size_t kMaxKeyFileBytes = 4096;
  if (st.st_size > static_cast<off_t>(kMaxKeyFileBytes))
    throw bad("larger than " + std::to_string(kMaxKeyFileBytes) + " bytes");
  std::string key(kMaxKeyFileBytes, '\0');
  std::size_t got = 0;
  while (got < key.size()) {
    const ssize_t n = ::read(fd, key.data() + got, key.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw bad(std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  key.resize(got);
  while (!key.empty() &&
         (key.back() == '\n' || key.back() == '\r' || key.back() == ' ' || key.back() == '\t'))
    key.pop_back();
  if (key.empty()) throw bad("empty (write at least 128 random bits into it)");
  return key;
}

PeerPolicy::PeerPolicy()
    : dropped_(std::make_shared<std::atomic<std::uint64_t>>(0)),
      refused_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

PeerPolicy::PeerPolicy(const SecurityOptions& options)
    : key_(options.authKey),
      filter_(options.allowedPeers),
      handshakeTimeout_(options.handshakeTimeout.count() > 0 ? options.handshakeTimeout
                                                             : std::chrono::milliseconds(1)),
      log_(options.logRejections),
      dropped_(std::make_shared<std::atomic<std::uint64_t>>(0)),
      refused_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

void PeerPolicy::reportDropped(std::string_view endpoint, std::string_view peer,
                               std::string_view why) const {
  const std::uint64_t n = dropped_->fetch_add(1, std::memory_order_relaxed) + 1;
  if (!log_) return;
  if (n > kLoggedInFull && n % kLogEvery != 0) return;
  std::string line = "[braid WARN] ";
  line.append(endpoint).append(": dropped connection from ").append(peer).append(": ").append(why);
  if (n > kLoggedInFull) line += " (" + std::to_string(n) + " connections dropped so far)";
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

void PeerPolicy::reportRefused(std::string_view endpoint, std::string_view peer,
                               std::string_view why) const {
  const std::uint64_t n = refused_->fetch_add(1, std::memory_order_relaxed) + 1;
  if (!log_) return;
  if (n > kLoggedInFull && n % kLogEvery != 0) return;
  std::string line = "[braid WARN] ";
  line.append(endpoint).append(": refused a request from ").append(peer).append(": ").append(why);
  if (n > kLoggedInFull) line += " (" + std::to_string(n) + " requests refused so far)";
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

std::string connectTimeoutText(std::string_view self, std::chrono::milliseconds timeout,
                               const std::vector<int>& waitingFor, std::uint64_t dropped,
                               std::string_view droppedWhat, std::string_view lastDrop) {
  std::string names;
  for (const int r : waitingFor) names += (names.empty() ? "" : ", ") + std::to_string(r);
  std::string text = std::string(self) + " timed out after " + std::to_string(timeout.count()) +
                     " ms waiting for rank" + (waitingFor.size() > 1 ? "s " : " ") + names +
                     " to connect";
  if (dropped > 0)
    text += "; " + std::to_string(dropped) + " " + std::string(droppedWhat) +
            (dropped > 1 ? "s were" : " was") +
            " dropped meanwhile (last: " + std::string(lastDrop) + ")";
  return text;
}

}  // namespace braid::security
