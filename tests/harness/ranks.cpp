#include "harness/ranks.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/store_process.hpp"
#include "store/memory_store.hpp"

namespace braid::test {

Options testOptions(std::string algo) {
  Options o;
  o.chunkBytes = 64;
  o.bufferBytes = 4096;
  o.smallMessageBytes = 256;
  o.algo = std::move(algo);
  o.connectTimeout = std::chrono::milliseconds(20000);
  o.execTimeout = std::chrono::milliseconds(30000);
  o.logLevel = 1;
  // The shared-memory transport's crowded-host decisions (waiters yield at once, the direct
  // collectives stage, send/recv goes single copy) follow the CPU count it assumes, not the
  // machine's: a host of 2 CPUs, so 3 or more ranks are crowded everywhere (docs/testing.md,
  // "Machine independence").
  o.shmHostCpus = 2;
  // The single-copy threshold, measured at creation with a CPU per rank (2 ranks here) and
  // staged on a crowded host, fixed at 64 KiB: blocks and messages from 64 KiB read the peer's
  // buffer (process_vm_readv) on every machine. Tests of the staged paths set SIZE_MAX, the
  // measurement's tests reset it (tests/comm/shm_single_copy_test.cpp).
  o.shmCmaThresholdBytes = std::size_t{64} << 10;
  return o;
}

void runThreads(int n, const Options& opts, const RankFn& fn, std::chrono::seconds deadline) {
  auto store = std::make_shared<MemoryStore>();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> errors(n);
  std::vector<bool> finished(n, false);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::string err;
      try {
        auto comm = Comm::create(store, r, n, opts);
        fn(*comm);
      } catch (const std::exception& e) {
        err = e.what();
      }
      std::lock_guard<std::mutex> lk(mu);
      errors[r] = err;
      finished[r] = true;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    bool ok = cv.wait_for(lk, deadline, [&] {
      for (bool f : finished)
        if (!f) return false;
      return true;
    });
    if (!ok) {
      std::string stuck;
      for (int r = 0; r < n; ++r)
        if (!finished[r]) stuck += " " + std::to_string(r);
      std::fprintf(stderr, "runThreads: ranks%s did not finish within %lld s; aborting\n",
                   stuck.c_str(), static_cast<long long>(deadline.count()));
      std::fflush(stderr);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " of " << n;
}

void runProcesses(int n, const Options& opts, const RankFn& fn, std::chrono::seconds deadline) {
  // The store runs in a process of its own: a store thread of this process could hold an
  // allocator lock at a fork (ASan's allocator has no fork handler) and leave a rank deadlocked
  // in its first malloc.
  StoreProcess server;
  const std::uint16_t port = server.port();
  ASSERT_NE(port, 0) << "the store process did not start";
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", port, opts.connectTimeout);
        auto comm = Comm::create(store, r, n, opts);
        fn(*comm);
        if (::testing::Test::HasFailure()) code = 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    ASSERT_GT(pid, 0) << "fork failed";
    pids.push_back(pid);
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  std::vector<int> status(n, -1);
  int remaining = n;
  while (remaining > 0 && std::chrono::steady_clock::now() < end) {
    for (int r = 0; r < n; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --remaining;
      }
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < n; ++r) {
    if (status[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
      ADD_FAILURE() << "rank " << r << " of " << n << " did not finish within " << deadline.count()
                    << " s (killed)";
    } else if (!WIFEXITED(status[r]) || WEXITSTATUS(status[r]) != 0) {
      ADD_FAILURE() << "rank " << r << " of " << n << " failed (status " << status[r] << ")";
    }
  }
}

}  // namespace braid::test
