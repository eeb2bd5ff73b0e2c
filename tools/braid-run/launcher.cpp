// How braid-run supervises its ranks:
//  - every rank runs in its own process group, so stopping a rank also stops what it started
//    (a shell's children, a Python launcher's workers) and pipes reach end-of-file;
//  - each child gets PR_SET_PDEATHSIG=SIGKILL, so ranks do not outlive a braid-run that was
//    killed itself;
//  - SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive through a signalfd, so one poll() loop handles
//    output, exits, signals and deadlines without races.
#include "launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "common/fd.hpp"
#include "line_relay.hpp"

namespace braid::run {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void makePipe(Fd& readEnd, Fd& writeEnd) {
  std::array<int, 2> fds{};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) fail("pipe2");
  readEnd = Fd(fds[0]);
  writeEnd = Fd(fds[1]);
}

std::string signalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "unknown signal";
}

/// "exited with status 3" / "was killed by signal 9 (SIGKILL)".
std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string s = "was killed by signal " + std::to_string(sig) + " (" + signalName(sig) + ")";
    if (WCOREDUMP(status)) s += ", core dumped";
    return s;
  }
  return "ended with wait status " + std::to_string(status);
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void say(const std::string& message) {
  writeAll(STDERR_FILENO, "braid-run: " + message + "\n");
}

/// One output stream of one rank: the read end of its pipe and where its lines go.
struct Stream {
  Fd fd;
  std::unique_ptr<LineRelay> relay;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  std::array<Stream, 2> streams;  // stdout, stderr
};

/// Blocks the signals the loop handles and reads them from a signalfd instead; restores the
/// previous mask and SIGPIPE disposition when destroyed.
class SignalRouting {
 public:
  SignalRouting() {
    sigemptyset(&handled_);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled_, sig);
    if (::sigprocmask(SIG_BLOCK, &handled_, &previousMask_) != 0) fail("sigprocmask");
    fd_ = Fd(::signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!fd_) fail("signalfd");
    // A closed stdout (braid-run ... | head) must not kill the launcher; writes just fail.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &previousPipe_);
  }
  ~SignalRouting() {
    ::sigaction(SIGPIPE, &previousPipe_, nullptr);
    ::sigprocmask(SIG_SETMASK, &previousMask_, nullptr);
  }
  SignalRouting(const SignalRouting&) = delete;
  SignalRouting& operator=(const SignalRouting&) = delete;

  int fd() const { return fd_.get(); }
  const sigset_t& previousMask() const { return previousMask_; }

 private:
  sigset_t handled_{};
  sigset_t previousMask_{};
  struct sigaction previousPipe_ {};
  Fd fd_;
};

class Supervisor {
 public:
  explicit Supervisor(const LaunchSettings& settings) : settings_(settings) {}

  int run(const std::vector<RankSpec>& specs);

 private:
  void spawn(const RankSpec& spec, Rank& rank);
  void reapChildren();
  void onRankExit(Rank& rank, int status);
  void handleSignal(int sig);
  void stopAll(int sig);
  void killRunning(int sig);
  int runningCount() const;
  bool pipesOpen() const;
  int pollTimeoutMs(Clock::time_point now) const;
  void checkDeadlines(Clock::time_point now);
  void drain(Stream& stream);

  const LaunchSettings& settings_;
  SignalRouting signals_;
  Fd devNull_;
  std::vector<Rank> ranks_;
  bool stopping_ = false;
  std::optional<Clock::time_point> killAt_;      // SIGKILL whatever still runs at this time
  std::optional<Clock::time_point> timeoutAt_;   // --timeout
  std::optional<Clock::time_point> drainUntil_;  // ranks gone; stop waiting for stray pipes
  bool timedOut_ = false;
  int receivedSignal_ = 0;
  std::optional<int> firstFailureCode_;
  int toleratedFailures_ = 0;  // --max-failures
};

void Supervisor::spawn(const RankSpec& spec, Rank& rank) {
  rank.rank = spec.rank;
  std::array<Fd, 2> writeEnds;
  for (int s = 0; s < 2; ++s) makePipe(rank.streams[s].fd, writeEnds[s]);

  // Everything the child needs is prepared before fork(): after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // Rank 0 may read braid-run's stdin, unless it is a terminal: a rank in its own process group
  // reading the terminal would be stopped by SIGTTIN.
  const int stdinFd = spec.rank == 0 && !::isatty(STDIN_FILENO) ? STDIN_FILENO : devNull_.get();
  const std::string execFailure = "braid-run: cannot execute '" + spec.argv[0] + "': ";
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : spec.cpus) CPU_SET(c, &cpus);
  const std::string bindFailure =
      "braid-run: warning: rank " + std::to_string(spec.rank) + " could not be bound: ";
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) fail("fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    if (stdinFd != STDIN_FILENO) ::dup2(stdinFd, STDIN_FILENO);
    ::dup2(writeEnds[0].get(), STDOUT_FILENO);
    ::dup2(writeEnds[1].get(), STDERR_FILENO);
    ::signal(SIGPIPE, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &signals_.previousMask(), nullptr);
    if (!spec.cpus.empty() && ::sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      const char* reason = std::strerror(errno);
      [[maybe_unused]] ssize_t ignored =
          ::write(STDERR_FILENO, bindFailure.data(), bindFailure.size());
      ignored = ::write(STDERR_FILENO, reason, std::strlen(reason));
      ignored = ::write(STDERR_FILENO, "\n", 1);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    const char* reason = std::strerror(err);
    [[maybe_unused]] ssize_t ignored =
        ::write(STDERR_FILENO, execFailure.data(), execFailure.size());
    ignored = ::write(STDERR_FILENO, reason, std::strlen(reason));
    ignored = ::write(STDERR_FILENO, "\n", 1);
    ::_exit(err == ENOENT ? 127 : 126);
  }
  ::setpgid(pid, pid);  // also in the parent, so a kill right after fork reaches the group
  rank.pid = pid;
  rank.running = true;
  const std::string prefix = settings_.prefixOutput ? "[" + std::to_string(spec.rank) + "] " : "";
  rank.streams[0].relay = std::make_unique<LineRelay>(STDOUT_FILENO, prefix);
  rank.streams[1].relay = std::make_unique<LineRelay>(STDERR_FILENO, prefix);
}

int Supervisor::runningCount() const {
  return static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
}

bool Supervisor::pipesOpen() const {
  for (const Rank& r : ranks_)
    for (const Stream& s : r.streams)
      if (s.fd) return true;
  return false;
}

void Supervisor::killRunning(int sig) {
  for (const Rank& r : ranks_) {
    if (!r.running) continue;
    if (::kill(-r.pid, sig) != 0) ::kill(r.pid, sig);
  }
}

void Supervisor::stopAll(int sig) {
  stopping_ = true;
  killRunning(sig);
  const auto killAt = Clock::now() + settings_.grace;
  if (!killAt_ || killAt < *killAt_) killAt_ = killAt;
}

void Supervisor::onRankExit(Rank& rank, int status) {
  rank.running = false;
  rank.status = status;
  // What the rank started in its group (a shell's background jobs) goes with it.
  ::kill(-rank.pid, SIGKILL);
  const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!failed || stopping_) return;
  std::string message = "rank " + std::to_string(rank.rank) + " (pid " + std::to_string(rank.pid) +
                        ") " + describeStatus(status);
  if (toleratedFailures_ < settings_.maxFailures) {
    // The survivors go on (they shrink their communicators: docs/reliability.md).
    ++toleratedFailures_;
    say(message + "; failure " + std::to_string(toleratedFailures_) + " of the " +
        std::to_string(settings_.maxFailures) +
        " tolerated (--max-failures), the other ranks go on");
    return;
  }
  firstFailureCode_ = exitCodeOf(status);
  if (runningCount() > 0) {
    message += "; stopping the other ranks";
    stopAll(SIGTERM);
  }
  stopping_ = true;
  say(message);
}

void Supervisor::reapChildren() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (Rank& r : ranks_)
      if (r.pid == pid && r.running) onRankExit(r, status);
  }
}

void Supervisor::handleSignal(int sig) {
  if (receivedSignal_ != 0) {
    say("received " + signalName(sig) + " again; killing the ranks");
    killRunning(SIGKILL);
    return;
  }
  receivedSignal_ = sig;
  say("received " + signalName(sig) + "; forwarding it to the ranks");
  stopAll(sig);
}

int Supervisor::pollTimeoutMs(Clock::time_point now) const {
  std::optional<Clock::time_point> next;
  for (const auto& t : {killAt_, timeoutAt_, drainUntil_})
    if (t && (!next || *t < *next)) next = t;
  if (!next) return -1;
  if (*next <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
  return static_cast<int>(std::min<std::int64_t>(ms, 60000));
}

void Supervisor::checkDeadlines(Clock::time_point now) {
  if (timeoutAt_ && now >= *timeoutAt_) {
    timeoutAt_.reset();
    if (runningCount() > 0) {
      timedOut_ = true;
      const double s = std::chrono::duration<double>(*settings_.timeout).count();
      char text[96];
      std::snprintf(text, sizeof text, "time limit of %g s reached; stopping the ranks", s);
      say(text);
      stopAll(SIGTERM);
    }
  }
  if (killAt_ && now >= *killAt_) {
    killAt_.reset();
    if (runningCount() > 0) killRunning(SIGKILL);
  }
}

void Supervisor::drain(Stream& stream) {
  std::array<char, 65536> buf;
  for (;;) {
    const ssize_t n = ::read(stream.fd.get(), buf.data(), buf.size());
    if (n > 0) {
      stream.relay->feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
      if (static_cast<std::size_t>(n) < buf.size()) return;  // probably empty now: back to poll
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    stream.relay->finish();  // end of file (or a read error): the stream is done
    stream.fd.reset();
    return;
  }
}

int Supervisor::run(const std::vector<RankSpec>& specs) {
  devNull_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devNull_) fail("open /dev/null");
  if (settings_.timeout) timeoutAt_ = Clock::now() + *settings_.timeout;
  ranks_.resize(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    spawn(specs[i], ranks_[i]);
    for (Stream& s : ranks_[i].streams) ::fcntl(s.fd.get(), F_SETFL, O_NONBLOCK);
  }

  std::vector<pollfd> fds;
  std::vector<Stream*> owners;
  while (runningCount() > 0 || pipesOpen()) {
    const auto now = Clock::now();
    if (runningCount() == 0 && !drainUntil_) drainUntil_ = now + std::chrono::seconds(2);
    if (drainUntil_ && now >= *drainUntil_) break;  // something outside our groups holds a pipe
    checkDeadlines(now);

    fds.clear();
    owners.clear();
    fds.push_back({signals_.fd(), POLLIN, 0});
    owners.push_back(nullptr);
    for (Rank& r : ranks_)
      for (Stream& s : r.streams)
        if (s.fd) {
          fds.push_back({s.fd.get(), POLLIN, 0});
          owners.push_back(&s);
        }
    const int ready = ::poll(fds.data(), fds.size(), pollTimeoutMs(now));
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail("poll");
    }
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) drain(*owners[i]);
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      while (::read(signals_.fd(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        const int sig = static_cast<int>(info.ssi_signo);
        if (sig != SIGCHLD) handleSignal(sig);
      }
      reapChildren();  // SIGCHLD coalesces: always reap everything that is ready
    }
  }
  // Output that arrived with the last exits is already relayed; flush unterminated lines.
  for (Rank& r : ranks_)
    for (Stream& s : r.streams)
      if (s.fd) s.relay->finish();

  if (timedOut_) return kTimeoutExitCode;
  if (firstFailureCode_) return *firstFailureCode_;
  if (receivedSignal_ != 0) return 128 + receivedSignal_;
  return 0;
}

}  // namespace

int launch(const std::vector<RankSpec>& ranks, const LaunchSettings& settings) {
  Supervisor supervisor(settings);
  return supervisor.run(ranks);
}

}  // namespace braid::run
