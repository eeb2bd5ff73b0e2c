// Runs a command-line tool of this build as a child process and captures what it did: exit
// status, stdout, stderr and how long it took. Tools are found beside the test binary (both are
// built into bin/). Every run has a deadline; on expiry the child's process group is killed.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace braid::tooltest {

/// The directory of the running test binary: where the tools are.
inline std::filesystem::path binDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}

inline std::string toolPath(const std::string& tool) {
  return (binDir() / tool).string();
}

struct ProcessResult {
  int status = 0;  // raw wait status
  std::string out;
  std::string err;
  double seconds = 0;
  bool timedOut = false;

  bool exited() const { return WIFEXITED(status); }
  int exitCode() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  std::vector<std::string> outLines() const { return lines(out); }
  std::vector<std::string> errLines() const { return lines(err); }
  static std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) v.push_back(line);
    return v;
  }
};

struct ProcessOptions {
  /// Variables to set (NAME, value) or, with an empty optional, to remove.
  std::vector<std::pair<std::string, std::optional<std::string>>> env;
  std::string stdinData;
  std::chrono::milliseconds timeout{120000};
  /// Called once with the child's pid (e.g. to send it a signal) as soon as `actionWhen`, given
  /// the stdout read so far, returns true.
  std::function<bool(const std::string& out)> actionWhen;
  std::function<void(pid_t)> action;
};

/// Launch-related variables a test environment may carry; removed so that a tool started
/// without a launcher really is a single process.
inline std::vector<std::pair<std::string, std::optional<std::string>>> cleanLaunchEnv() {
  std::vector<std::pair<std::string, std::optional<std::string>>> v;
  for (const char* name :
       {"BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK", "BRAID_LOCAL_WORLD_SIZE",
        "BRAID_NODE_RANK", "BRAID_STORE", "BRAID_STORE_EXTERNAL", "BRAID_ALGO", "RANK",
        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"})
    v.emplace_back(name, std::nullopt);
  return v;
}

inline ProcessResult runProcess(const std::vector<std::string>& argv,
                                const ProcessOptions& opts = {}) {
  using Clock = std::chrono::steady_clock;
  ProcessResult result;
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [k, v] : opts.env) overridden = overridden || k == name;
    if (!overridden) env.push_back(entry);
  }
  for (const auto& [k, v] : opts.env)
    if (v) env.push_back(k + "=" + *v);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  for (const std::string& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  std::array<int, 2> inPipe{}, outPipe{}, errPipe{};
  if (::pipe2(inPipe.data(), O_CLOEXEC) != 0 || ::pipe2(outPipe.data(), O_CLOEXEC) != 0 ||
      ::pipe2(errPipe.data(), O_CLOEXEC) != 0)
    throw std::runtime_error("pipe2 failed");
  const auto start = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(inPipe[0], STDIN_FILENO);
    ::dup2(outPipe[1], STDOUT_FILENO);
    ::dup2(errPipe[1], STDERR_FILENO);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(inPipe[0]);
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  // Small inputs fit in the pipe buffer; write and close so the child sees end-of-file.
  ::signal(SIGPIPE, SIG_IGN);
  if (!opts.stdinData.empty()) {
    [[maybe_unused]] const ssize_t n =
        ::write(inPipe[1], opts.stdinData.data(), opts.stdinData.size());
  }
  ::close(inPipe[1]);

  std::array<int, 2> fds{outPipe[0], errPipe[0]};
  std::array<std::string*, 2> sinks{&result.out, &result.err};
  bool actionDone = !opts.actionWhen || !opts.action;
  const auto deadline = start + opts.timeout;
  while (fds[0] >= 0 || fds[1] >= 0) {
    const auto now = Clock::now();
    if (now >= deadline && !result.timedOut) {
      result.timedOut = true;
      ::kill(-pid, SIGKILL);
    }
    // Something outside the child's group may hold the pipes; give up on them eventually.
    if (result.timedOut && now >= deadline + std::chrono::seconds(2)) break;
    if (!actionDone && opts.actionWhen(result.out)) {
      actionDone = true;
      opts.action(pid);
    }
    std::vector<pollfd> pfds;
    for (int fd : fds)
      if (fd >= 0) pfds.push_back({fd, POLLIN, 0});
    auto wake = result.timedOut ? now + std::chrono::milliseconds(100) : deadline;
    const auto waitMs = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    ::poll(pfds.data(), pfds.size(), static_cast<int>(std::max<long long>(waitMs, 0) + 1));
    for (const pollfd& p : pfds) {
      if (p.revents == 0) continue;
      for (int s = 0; s < 2; ++s) {
        if (fds[s] != p.fd) continue;
        char buf[65536];
        const ssize_t n = ::read(p.fd, buf, sizeof buf);
        if (n > 0) {
          sinks[s]->append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          ::close(p.fd);
          fds[s] = -1;
        }
      }
    }
  }
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  ::waitpid(pid, &result.status, 0);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

/// Joined for assertion messages.
inline std::string describe(const ProcessResult& r) {
  std::ostringstream s;
  s << "status " << r.status << " (exit " << r.exitCode() << ")" << (r.timedOut ? " TIMED OUT" : "")
    << " after " << r.seconds << " s\n--- stdout ---\n"
    << r.out << "--- stderr ---\n"
    << r.err;
  return s.str();
}

}  // namespace braid::tooltest
