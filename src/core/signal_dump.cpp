#include "core/signal_dump.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

namespace braid::core {
namespace {

constexpr char kDumpByte = 'd';
constexpr char kQuitByte = 'q';

// Written by the registration path, read by the handler: lock-free, so reading it in a signal
// handler is safe. The pipe is created once and never closed, so a handler running late on
// another thread never writes to a closed (or reused) descriptor.
std::atomic<int> gWriteFd{-1};

void onSignal(int) {
  const int saved = errno;
  const int fd = gWriteFd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char b = kDumpByte;
    [[maybe_unused]] const ssize_t n = ::write(fd, &b, 1);  // full pipe: a dump is pending anyway
  }
  errno = saved;
}

struct Registry {
  std::mutex lifecycle;  // registration, handler, thread start/stop
  std::mutex entriesMu;  // entries; held while dumping
  std::vector<std::pair<void*, DumpFn>> entries;
  int readFd = -1;
  std::unique_ptr<std::thread> thread;
  bool installed = false;
  struct sigaction previous {};

  void loop() {
    char b = 0;
    for (;;) {
      const ssize_t n = ::read(readFd, &b, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || b == kQuitByte) return;
      std::lock_guard<std::mutex> lk(entriesMu);
      for (auto& [self, dump] : entries) dump(self);
    }
  }
};

void afterForkInChild();

Registry& registry() {
  // The signal's process-wide state (see the header). Never destroyed: a communicator leaked
  // past exit() must not find its registry gone, nor a joinable thread terminate the process.
  static Registry& r = []() -> Registry& {
    auto* fresh = new Registry();
    ::pthread_atfork(nullptr, nullptr, afterForkInChild);
    return *fresh;
  }();
  return r;
}

// A forked child has none of the parent's threads and must not share its pipe (its handler
// would wake the parent's dump thread, its last unregistration would stop it). Communicators are
// not inherited: the child starts with an empty registry and a pipe of its own on first use.
// Only async-signal-safe calls here; the locks are re-created, as another thread may have held
// them at the fork.
void afterForkInChild() {
  Registry& r = registry();
  new (&r.lifecycle) std::mutex();
  new (&r.entriesMu) std::mutex();
  r.entries.clear();
  static_cast<void>(r.thread.release());  // the parent's thread: nothing to join here
  const int w = gWriteFd.exchange(-1);
  if (w >= 0) ::close(w);
  if (r.readFd >= 0) ::close(r.readFd);
  r.readFd = -1;
}

bool ensurePipe(Registry& r) {
  if (r.readFd >= 0) return true;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  // The write end never blocks (the handler must not); the read end blocks the dump thread.
  ::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK);
  r.readFd = fds[0];
  gWriteFd.store(fds[1], std::memory_order_relaxed);
  return true;
}

void drain(Registry& r) {
  const int flags = ::fcntl(r.readFd, F_GETFL);
  ::fcntl(r.readFd, F_SETFL, flags | O_NONBLOCK);
  char buf[64];
  while (::read(r.readFd, buf, sizeof buf) > 0) {
  }
  ::fcntl(r.readFd, F_SETFL, flags);
}

}  // namespace

bool registerSignalDump(void* self, DumpFn dump) {
  Registry& r = registry();
  std::lock_guard<std::mutex> life(r.lifecycle);
  if (!ensurePipe(r)) return false;
  if (!r.installed) {
    struct sigaction current {};
    ::sigaction(SIGUSR1, nullptr, &current);
    const bool isDefault = (current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_DFL;
    if (!isDefault) return false;  // the application's: leave it alone
    struct sigaction mine {};
    mine.sa_handler = onSignal;
    sigemptyset(&mine.sa_mask);
    mine.sa_flags = SA_RESTART;
    if (::sigaction(SIGUSR1, &mine, &r.previous) != 0) return false;
    r.installed = true;
  }
  {
    std::lock_guard<std::mutex> lk(r.entriesMu);
    r.entries.emplace_back(self, dump);
  }
  if (r.thread == nullptr) {
    drain(r);
    r.thread = std::make_unique<std::thread>([&r] { r.loop(); });
  }
  return true;
}

void unregisterSignalDump(void* self) {
  Registry& r = registry();
  std::lock_guard<std::mutex> life(r.lifecycle);
  bool empty;
  {
    std::lock_guard<std::mutex> lk(r.entriesMu);
    std::erase_if(r.entries, [&](const auto& e) { return e.first == self; });
    empty = r.entries.empty();
  }
  if (!empty || r.thread == nullptr) return;
  if (r.installed) {
    struct sigaction current {};
    ::sigaction(SIGUSR1, nullptr, &current);
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == onSignal)
      ::sigaction(SIGUSR1, &r.previous, nullptr);
    r.installed = false;
  }
  // The quit byte must get through even if signals filled the pipe: read them away first is not
  // possible without racing the thread, so retry briefly until the write succeeds.
  const char b = kQuitByte;
  while (::write(gWriteFd.load(std::memory_order_relaxed), &b, 1) != 1) std::this_thread::yield();
  r.thread->join();
  r.thread.reset();
}

}  // namespace braid::core
