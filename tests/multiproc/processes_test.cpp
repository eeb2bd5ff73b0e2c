// Ranks as separate processes (fork) joined through a TCP store on loopback: the realistic
// setting. The sweep runs at a few world sizes; sub-communicators and async too.
#include <gtest/gtest.h>

#include "harness/checks.hpp"
#include "harness/ranks.hpp"

#include <vector>

namespace braid::test {
namespace {

class ProcessSweep : public ::testing::TestWithParam<int> {};

TEST_P(ProcessSweep, EveryCollective) {
  runProcesses(GetParam(), testOptions(), [](Comm& c) {
    sweepCollectives(c, std::vector<std::size_t>{0, 1, 13, 1031});
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ProcessSweep, ::testing::Values(2, 3, 4, 5));

TEST(Processes, SplitAndAsyncAcrossProcesses) {
  runProcesses(4, testOptions("ring"), [](Comm& c) {
    auto half = c.split(c.rank() / 2, 0);
    ASSERT_NE(half, nullptr);
    std::vector<double> v(5000, c.rank() + 1.0);
    Work w = half->allreduceAsync(v.data(), v.data(), v.size(), DataType::Float64, ReduceOp::Max);
    c.barrier();
    w.wait();
    for (double x : v) ASSERT_EQ(x, (c.rank() / 2) * 2 + 2.0);
  });
}

TEST(Processes, LargeMessagesPipelineThroughSmallScratch) {
  Options o = testOptions();
  o.chunkBytes = 4096;
  o.bufferBytes = 16384;
  runProcesses(3, o, [](Comm& c) {
    const std::size_t count = (8 << 20) / 4 + 3;  // 8 MiB + 12 B of fp32: many chunks
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>((i + c.rank()) % 100);
    c.allreduce(v.data(), v.data(), count, DataType::Float32, ReduceOp::Sum);
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(v[i], static_cast<float>((i % 100) + ((i + 1) % 100) + ((i + 2) % 100))) << i;
    std::vector<float> b(count, c.rank() == 2 ? 7.0f : 0.0f);
    c.broadcast(b.data(), count, DataType::Float32, 2);
    for (float x : b) ASSERT_EQ(x, 7.0f);
  });
}

}  // namespace
}  // namespace braid::test
