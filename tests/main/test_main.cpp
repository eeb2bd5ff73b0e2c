// main() of every GoogleTest binary of the suite. It applies the process-wide settings of the
// environment before any test runs (core/process_settings.hpp), so that a binary run with
// BRAID_KERNEL_ISA=avx2 or BRAID_LLC_SIZE=8K behaves as a machine with that instruction set or
// that cache would, also in tests that drive kernels or algorithms without a communicator
// (.ci/run runs the kernel tests and the collective sweeps so), and prints what it applied.
#include <gtest/gtest.h>

#include <braid/error.hpp>
#include <braid/options.hpp>
#include <cstdio>

#include "core/process_settings.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  try {
    braid::core::applyProcessSettings(braid::Options::fromEnv());
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "test main: %s\n", e.what());
    return 2;
  }
  // gtest_discover_tests parses --gtest_list_tests' output: nothing else may be printed then.
  if (!GTEST_FLAG_GET(list_tests))
    std::printf("[ machine  ] kernels %s\n", braid::core::processSettingsText().c_str());
  return RUN_ALL_TESTS();
}
