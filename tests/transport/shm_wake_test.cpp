// The doorbell of the shared-memory transport (shm_segment.hpp): a writer stores what a peer
// waits for, then calls notify(); a sleeper announces itself in `sleepers`, calls announced(),
// looks once more, then sleeps on the futex. Neither pairing, the writer's fence (light off) nor
// the sleeper's membarrier (light on), may lose a wake-up: two threads hand a counter back and
// forth 20000 times, every wait sleeping at once, and no sleep may last until its long timeout.
#include <gtest/gtest.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "transport/shm/shm_segment.hpp"

namespace braid::transport::shm {
namespace {

// MEMBARRIER_CMD_GET_REGISTRATIONS (Linux 6.3): the commands this process registered for.
constexpr int kGetRegistrations = 1 << 9;

bool lightWakeOffered() {
  const long cmds = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
         (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0;
}

// The first test of this program: nothing has asked for the registration yet, and the process
// is registered already: the library did it when it was loaded, while the process had one
// thread (which costs microseconds then, an RCU grace period later).
TEST(ShmWake, RegisteredWhenTheLibraryWasLoaded) {
  if (!lightWakeOffered()) GTEST_SKIP() << "the kernel offers no global expedited membarrier";
  const long registered = ::syscall(SYS_membarrier, kGetRegistrations, 0, 0);
  if (registered < 0) GTEST_SKIP() << "no MEMBARRIER_CMD_GET_REGISTRATIONS (Linux < 6.3)";
  EXPECT_NE(registered & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0) << registered;
}

// A forked child answers for itself (it registers anew rather than trusting its parent's answer).
TEST(ShmWake, AForkedChildIsRegisteredToo) {
  if (!lightWakeOffered()) GTEST_SKIP() << "the kernel offers no global expedited membarrier";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Twice: the second answer is the first one's, kept for this process.
    const bool ok = registerLightWake() && registerLightWake();
    const long registered = ::syscall(SYS_membarrier, kGetRegistrations, 0, 0);
    ::_exit(ok && (registered < 0 || (registered & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED)) ? 0
                                                                                              : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(ShmWake, LightWakeRegistersWhereTheKernelOffersIt) {
  const long cmds = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  const bool offered = cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
                       (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0;
  EXPECT_EQ(registerLightWake(), offered);
  EXPECT_EQ(registerLightWake(), offered);  // again: harmless
  if (offered) {
    EXPECT_TRUE(heavyFence());
  }
  // Without the membarrier a light sleeper bounds its sleep, so a missed ring costs 1 ms.
  EXPECT_EQ(announced(false), std::chrono::nanoseconds::max());
  EXPECT_EQ(announced(true), offered ? std::chrono::nanoseconds::max()
                                     : std::chrono::nanoseconds(std::chrono::milliseconds(1)));
}

struct Doorbells {
  RankSlot slot[2]{};
  alignas(kCacheLine) std::atomic<std::uint64_t> counter{0};
};

// Sleeps (announce, announced(), last look, futex) until counter >= want; counts the sleeps that
// ran into their 2 s timeout, i.e. a wake-up that never came.
int waitFor(Doorbells& d, int self, std::uint64_t want, bool light) {
  int lost = 0;
  RankSlot& me = d.slot[self];
  while (d.counter.load(std::memory_order_acquire) < want) {
    me.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const auto bound = announced(light);
    const std::uint32_t bell = me.bell.load(std::memory_order_seq_cst);
    if (d.counter.load(std::memory_order_acquire) < want) {
      const auto start = std::chrono::steady_clock::now();
      futexWait(me.bell, bell, std::min<std::chrono::nanoseconds>(bound, std::chrono::seconds(2)));
      if (std::chrono::steady_clock::now() - start >= std::chrono::seconds(2)) ++lost;
    }
    me.sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
  return lost;
}

class ShmWakePairing : public ::testing::TestWithParam<bool> {};

TEST_P(ShmWakePairing, PingPongNeverLosesAWakeUp) {
  const bool light = GetParam();
  if (light) registerLightWake();
  constexpr std::uint64_t kRounds = 20000;
  auto d = std::make_unique<Doorbells>();
  int lostA = 0;
  int lostB = 0;
  std::thread b([&] {
    for (std::uint64_t i = 0; i < kRounds; ++i) {
      lostB += waitFor(*d, 1, 2 * i + 1, light);
      d->counter.store(2 * i + 2, std::memory_order_release);
      notify(d->slot[0], light);
    }
  });
  for (std::uint64_t i = 0; i < kRounds; ++i) {
    d->counter.store(2 * i + 1, std::memory_order_release);
    notify(d->slot[1], light);
    lostA += waitFor(*d, 0, 2 * i + 2, light);
  }
  b.join();
  EXPECT_EQ(d->counter.load(), 2 * kRounds);
  EXPECT_EQ(lostA, 0);
  EXPECT_EQ(lostB, 0);
}

INSTANTIATE_TEST_SUITE_P(Writers, ShmWakePairing, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "light" : "fenced"; });

}  // namespace
}  // namespace braid::transport::shm
