// What the process-rank tests share: a TCP store served from a child process (so every rank may
// be killed, and the test process stays single-threaded while it forks: a rank forked while
// another thread holds an allocator lock can deadlock in malloc under ASan), whole-pipe I/O, and
// what a test checks was left behind (child processes, /dev/shm entries).
// The server dies with the test process, or when the object goes.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <braid/store.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace braid::test {

class StoreProcess {
 public:
  StoreProcess() {
    int fds[2];
    if (::pipe(fds) != 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(fds[0]);
      TcpStoreServer server("127.0.0.1", 0);
      const std::uint16_t port = server.port();
      if (::write(fds[1], &port, sizeof port) != static_cast<ssize_t>(sizeof port)) ::_exit(1);
      for (;;) ::pause();
    }
    ::close(fds[1]);
    if (pid_ < 0 || ::read(fds[0], &port_, sizeof port_) != static_cast<ssize_t>(sizeof port_))
      port_ = 0;
    ::close(fds[0]);
  }
  ~StoreProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;
  /// The store's port; 0 when the child could not be started.
  std::uint16_t port() const { return port_; }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

inline void writeAll(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w <= 0) return;
    done += static_cast<std::size_t>(w);
  }
}

/// Everything until EOF.
inline std::string readAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) break;
    out.append(buf, static_cast<std::size_t>(r));
  }
  return out;
}

/// The entries of /dev/shm whose names contain "braid", sorted.
inline std::vector<std::string> braidShmEntries() {
  std::vector<std::string> names;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.find("braid") != std::string::npos) names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

/// Processes whose parent is this process (from /proc/<pid>/stat).
inline std::vector<int> childrenOfThisProcess() {
  std::vector<int> kids;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return kids;
  const int self = ::getpid();
  while (const dirent* e = ::readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == self) kids.push_back(pid);
  }
  ::closedir(d);
  return kids;
}

/// Forks a child that runs `body` (returning its exit code; an exception is printed and exits
/// 99) and returns that exit code (-1: killed by a signal).
template <class F>
int inChild(F&& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    std::fflush(stderr);
    ::_exit(code);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace braid::test
