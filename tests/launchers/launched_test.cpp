// The C++ test program the real launchers start (tests/launchers/launchers_test.sh): every rank
// joins the job its launcher describes (Comm::fromEnv: mpirun, srun, braid-run, torchrun) with
// no store address of its own, then runs the collective sweep of the suite (harness/checks:
// every collective, dtype and op, results compared with independently computed expectations).
//
// `--victim R` runs the failure case instead (no gtest): after a barrier rank R SIGKILLs
// itself; every other rank must fail with Error(PeerLost), prints "launched: rank X: PeerLost:
// <message>" (the script checks that some survivor names rank R) and exits 3.
#include <gtest/gtest.h>
#include <signal.h>

#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/process_settings.hpp"
#include "harness/checks.hpp"
#include "harness/ranks.hpp"

namespace braid::test {
namespace {

TEST(Launched, EveryCollective) {
  const LaunchInfo li = LaunchInfo::fromEnv();
  auto comm = Comm::fromEnv(testOptions());
  ASSERT_EQ(comm->rank(), li.rank);
  ASSERT_EQ(comm->size(), li.size);
  std::printf("launched: rank %d of %d, launch %s, store from %s\n", comm->rank(), comm->size(),
              li.source.c_str(), li.storeSource.c_str());
  sweepCollectives(*comm, std::vector<std::size_t>{0, 1, 13, 1031});
  comm->barrier();
}

}  // namespace

// The failure case, as an application that does not catch the error would end: a survivor
// exits 3 after PeerLost (4 after another error, 5 when nothing failed within 30 s), so the
// launcher's exit status reports the failure whatever it does about the killed rank.
int killedRankCase(int victim) {
  Options o = testOptions();
  o.execTimeout = std::chrono::seconds(20);
  auto comm = Comm::fromEnv(o);
  if (victim >= comm->size()) {
    std::printf("launched: --victim %d is outside world size %d\n", victim, comm->size());
    return 2;
  }
  comm->barrier();
  if (comm->rank() == victim) {
    std::fflush(stdout);
    ::raise(SIGKILL);
  }
  std::vector<float> v(4096, 1.0f);
  const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  try {
    while (std::chrono::steady_clock::now() < giveUp)
      comm->allreduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Max);
  } catch (const Error& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    std::printf("launched: rank %d: %s: %s\n", comm->rank(), toString(e.code()), msg.c_str());
    std::fflush(stdout);
    return e.code() == ErrorCode::PeerLost ? 3 : 4;
  }
  std::printf("launched: rank %d: no error within 30 s of rank %d's death\n", comm->rank(), victim);
  return 5;
}

}  // namespace braid::test

int main(int argc, char** argv) {
  int victim = -1;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--victim") == 0 && i + 1 < argc) {
      victim = std::atoi(argv[++i]);
      continue;
    }
    args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  testing::InitGoogleTest(&n, args.data());
  braid::core::applyProcessSettings(braid::Options::fromEnv());
  if (victim >= 0) {
    try {
      return braid::test::killedRankCase(victim);
    } catch (const std::exception& e) {
      std::printf("launched: %s\n", e.what());
      return 4;
    }
  }
  return RUN_ALL_TESTS();
}
