// Fusion buffer and overlapped allreduce (include/braid/fusion.hpp): many tensors of mixed
// sizes (0, 1, odd, primes, larger than the threshold), dtypes and ops over world sizes
// {1,2,3,4,5,7,8}, ranks queueing at different speeds, flushes by threshold, by cycle time and
// by flush(); every element compared with an independently computed value.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <braid/fusion.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.hpp"
#include "kernels/reduce.hpp"

namespace braid::test {
namespace {

using train::FusedWork;
using train::FusionBuffer;
using train::FusionOptions;

/// Integer term in [-5, 5]: sums of up to 8 ranks are exact in every dtype used here.
int term(int tensor, std::size_t i, int rank) {
  return static_cast<int>((tensor * 31 + i * 7 + rank * 3 + (tensor * i) % 5) % 11) - 5;
}

struct Spec {
  std::size_t count;
  DataType dtype;
  ReduceOp op;
};

std::vector<Spec> tensorSpecs() {
  const std::size_t counts[] = {0, 1, 7, 13, 61, 257, 1031, 3};
  const DataType dtypes[] = {DataType::Float32, DataType::Float64, DataType::Int32,
                             DataType::Int8,    DataType::Float16, DataType::Int64};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum};
  std::vector<Spec> out;
  for (int t = 0; t < 48; ++t) out.push_back({counts[t % 8], dtypes[(t / 2) % 6], ops[t % 4]});
  return out;
}

void store(DataType t, void* buf, std::size_t i, double v) {
  auto put = [&](auto x) { std::memcpy(static_cast<char*>(buf) + i * sizeof(x), &x, sizeof(x)); };
  switch (t) {
    case DataType::Float32:
      put(static_cast<float>(v));
      break;
    case DataType::Float64:
      put(v);
      break;
    case DataType::Int32:
      put(static_cast<std::int32_t>(v));
      break;
    case DataType::Int8:
      put(static_cast<std::int8_t>(v));
      break;
    case DataType::Int64:
      put(static_cast<std::int64_t>(v));
      break;
    case DataType::Float16:
      put(kernels::floatToHalf(static_cast<float>(v)));
      break;
    default:
      throw std::logic_error("dtype not used here");
  }
}

double load(DataType t, const void* buf, std::size_t i) {
  auto get = [&](auto x) {
    std::memcpy(&x, static_cast<const char*>(buf) + i * sizeof(x), sizeof(x));
    return x;
  };
  switch (t) {
    case DataType::Float32:
      return get(float{});
    case DataType::Float64:
      return get(double{});
    case DataType::Int32:
      return get(std::int32_t{});
    case DataType::Int8:
      return get(std::int8_t{});
    case DataType::Int64:
      return static_cast<double>(get(std::int64_t{}));
    case DataType::Float16:
      return kernels::halfToFloat(get(std::uint16_t{}));
    default:
      throw std::logic_error("dtype not used here");
  }
}

double expected(const Spec& s, int tensor, std::size_t i, int n) {
  double acc = term(tensor, i, 0);
  for (int r = 1; r < n; ++r) {
    const double v = term(tensor, i, r);
    if (s.op == ReduceOp::Sum) acc += v;
    if (s.op == ReduceOp::Max) acc = std::max(acc, v);
    if (s.op == ReduceOp::Min) acc = std::min(acc, v);
  }
  return acc;
}

/// Queues every tensor (with `pause` between them on this rank), then checks every element.
void runMixed(Comm& c, const FusionOptions& fo, std::chrono::microseconds pause, bool useFlush) {
  const auto specs = tensorSpecs();
  std::vector<std::vector<unsigned char>> bufs(specs.size());
  std::vector<FusedWork> works;
  std::atomic<int> callbacks{0};
  FusionBuffer fb(c, fo);
  for (std::size_t t = 0; t < specs.size(); ++t) {
    const Spec& s = specs[t];
    bufs[t].resize(s.count * dataTypeSize(s.dtype) + 1);
    for (std::size_t i = 0; i < s.count; ++i)
      store(s.dtype, bufs[t].data(), i, term(static_cast<int>(t), i, c.rank()));
    works.push_back(fb.allreduce(bufs[t].data(), s.count, s.dtype, s.op, [&] { ++callbacks; }));
    if (pause.count() > 0) std::this_thread::sleep_for(pause * (c.rank() + 1));
  }
  if (useFlush) fb.synchronize();
  for (std::size_t t = 0; t < specs.size(); ++t) {
    if (!works[t].wait(std::chrono::milliseconds(120000)))
      throw std::runtime_error("tensor " + std::to_string(t) + " never completed");
    const Spec& s = specs[t];
    for (std::size_t i = 0; i < s.count; ++i) {
      const double want = expected(s, static_cast<int>(t), i, c.size());
      const double got = load(s.dtype, bufs[t].data(), i);
      if (got != want)
        throw std::runtime_error(
            "n=" + std::to_string(c.size()) + " rank " + std::to_string(c.rank()) + " tensor " +
            std::to_string(t) + " (" + toString(s.dtype) + " " + toString(s.op) + " count " +
            std::to_string(s.count) + ") index " + std::to_string(i) + ": got " +
            std::to_string(got) + ", expected " + std::to_string(want));
    }
  }
  fb.synchronize();
  EXPECT_EQ(callbacks.load(), static_cast<int>(specs.size()));
  const auto st = fb.stats();
  EXPECT_EQ(st.tensors, specs.size());
  // How many tensors share an allreduce here depends on when the fusion thread wakes (the
  // threshold fires while tensors are still being queued): not checked. FusionSweep.
  // EverythingQueuedBeforeTheFlushGoesInOneRound checks the packing where it is deterministic.
}

class FusionSweep : public ::testing::TestWithParam<int> {};

TEST_P(FusionSweep, MixedTensorsSmallThresholdFlushBySynchronize) {
  // 512 B: many packs, tensors of 1031 elements go alone; cycle time long: flush() decides.
  runThreads(
      GetParam(), testOptions(),
      [](Comm& c) {
        runMixed(c, FusionOptions{512, std::chrono::seconds(30)}, {}, true);
      },
      std::chrono::seconds(240));
}

TEST_P(FusionSweep, EverythingQueuedBeforeTheFlushGoesInOneRound) {
  // The threshold (1 MiB) is above the 48 tensors' total and the cycle time is long, so only
  // synchronize() sends: one negotiation, then one pack per distinct (dtype, op).
  runThreads(
      GetParam(), testOptions(),
      [](Comm& c) {
        runMixed(c, FusionOptions{std::size_t{1} << 20, std::chrono::seconds(30)}, {}, true);
      },
      std::chrono::seconds(240));
  const auto specs = tensorSpecs();
  std::size_t total = 0;
  std::vector<std::pair<DataType, ReduceOp>> kinds;
  for (const Spec& s : specs) {
    total += s.count * dataTypeSize(s.dtype);
    if (std::find(kinds.begin(), kinds.end(), std::pair{s.dtype, s.op}) == kinds.end())
      kinds.emplace_back(s.dtype, s.op);
  }
  ASSERT_LT(total, std::size_t{1} << 20);
  ASSERT_LT(kinds.size(), specs.size());
  runThreads(GetParam(), testOptions(), [&](Comm& c) {
    FusionBuffer fb(c, FusionOptions{std::size_t{1} << 20, std::chrono::seconds(30)});
    std::vector<std::vector<unsigned char>> bufs(specs.size());
    for (std::size_t t = 0; t < specs.size(); ++t) {
      bufs[t].assign(specs[t].count * dataTypeSize(specs[t].dtype) + 1, 0);
      fb.allreduce(bufs[t].data(), specs[t].count, specs[t].dtype, specs[t].op);
    }
    fb.synchronize();
    const auto st = fb.stats();
    EXPECT_EQ(st.rounds, 1u);
    EXPECT_EQ(st.allreduces, kinds.size());
    EXPECT_EQ(st.tensors, specs.size());
  });
}

TEST_P(FusionSweep, RanksQueueAtDifferentSpeedsCycleTimeFlushes) {
  // No flush(): only the 1 ms cycle time (and the 4 KiB threshold) send the tensors, while rank
  // r pauses (r+1) * 200 us between tensors: the ranks see different queues when they negotiate.
  runThreads(
      GetParam(), testOptions(),
      [](Comm& c) {
        runMixed(c, FusionOptions{4096, std::chrono::milliseconds(1)},
                 std::chrono::microseconds(200), false);
      },
      std::chrono::seconds(240));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FusionSweep, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(FusionBufferTest, ThousandSmallTensorsFuseIntoFewAllreduces) {
  runThreads(4, testOptions(), [](Comm& c) {
    constexpr int kTensors = 1000;
    std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(1024));
    FusionBuffer fb(c, FusionOptions{std::size_t{1} << 20, std::chrono::seconds(30)});
    for (int t = 0; t < kTensors; ++t) {
      for (std::size_t i = 0; i < 1024; ++i) bufs[t][i] = static_cast<float>(t + c.rank() + i);
      fb.allreduce(bufs[t].data(), 1024, DataType::Float32, ReduceOp::Sum);
    }
    fb.synchronize();
    for (int t = 0; t < kTensors; ++t)
      for (std::size_t i = 0; i < 1024; i += 97)
        ASSERT_EQ(bufs[t][i], static_cast<float>(4 * (t + i) + 6)) << t << " " << i;
    const auto st = fb.stats();
    EXPECT_EQ(st.tensors, 1000u);
    EXPECT_EQ(st.bytes, 1000u * 4096u);
    // 4 MiB in packs of at most 1 MiB: at least 4 allreduces, and far fewer than 1000.
    EXPECT_GE(st.allreduces, 4u);
    EXPECT_LE(st.allreduces, 40u);
  });
}

TEST(FusionBufferTest, AcrossProcesses) {
  runProcesses(
      3, testOptions(),
      [](Comm& c) {
        runMixed(c, FusionOptions{1024, std::chrono::milliseconds(2)}, {}, true);
      },
      std::chrono::seconds(240));
}

TEST(FusionBufferTest, BadInputNamesRank) {
  runThreads(2, testOptions(), [](Comm& c) {
    FusionBuffer fb(c);
    try {
      fb.allreduce(nullptr, 3, DataType::Float32, ReduceOp::Sum);
      throw std::runtime_error("no error for a null buffer");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(c.rank())), std::string::npos)
          << e.what();
    }
    // Unsupported (dtype, op) pairs and PremulSum (a ReduceOp has no factor) are rejected at
    // the call, naming op and dtype.
    float f = 1;
    for (ReduceOp op : {ReduceOp::BAnd, ReduceOp::PremulSum}) {
      try {
        fb.allreduce(&f, 1, DataType::Float32, op);
        throw std::runtime_error(std::string("no error for ") + toString(op) + " on fp32");
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find(toString(op)), std::string::npos) << e.what();
      }
    }
    std::int32_t bits = c.rank() == 0 ? 0b1100 : 0b1010;
    fb.allreduce(&bits, 1, DataType::Int32, ReduceOp::BXor).wait();
    EXPECT_EQ(bits, 0b0110);
    float v = 1;
    fb.allreduce(&v, 1, DataType::Float32, ReduceOp::Sum).wait();
    EXPECT_EQ(v, 2.0f);
    c.barrier();  // the caller's communicator stays usable beside the buffer's own
  });
}

TEST(FusionBufferTest, NotifyCallbackSeesResultsInPlace) {
  // allreduceNotify's callback (the PyTorch binding completes its futures with it) runs once per
  // tensor, with nullptr, after that tensor's result is in its buffer and before its FusedWork.
  runThreads(3, testOptions(), [](Comm& c) {
    constexpr int kTensors = 40;
    std::vector<std::vector<double>> bufs(kTensors);
    std::vector<int> seen(kTensors, 0);  // 1: callback saw the right sums; -1: wrong
    std::atomic<int> calls{0};
    std::vector<FusedWork> works;
    FusionBuffer fb(c, FusionOptions{1000, std::chrono::milliseconds(1)});
    for (int t = 0; t < kTensors; ++t) {
      bufs[t].assign(static_cast<std::size_t>(t * 3 + 1), 0.0);
      for (std::size_t i = 0; i < bufs[t].size(); ++i) bufs[t][i] = term(t, i, c.rank());
      works.push_back(fb.allreduceNotify(bufs[t].data(), bufs[t].size(), DataType::Float64,
                                         ReduceOp::Sum, [&, t](std::exception_ptr e) {
                                           ++calls;
                                           bool ok = e == nullptr;
                                           for (std::size_t i = 0; ok && i < bufs[t].size(); ++i) {
                                             double want = 0;
                                             for (int r = 0; r < c.size(); ++r)
                                               want += term(t, i, r);
                                             ok = bufs[t][i] == want;
                                           }
                                           seen[t] = ok ? 1 : -1;
                                         }));
    }
    for (int t = 0; t < kTensors; ++t) {
      ASSERT_TRUE(works[t].wait(std::chrono::milliseconds(120000))) << t;
      EXPECT_EQ(seen[t], 1) << "tensor " << t;  // set before the FusedWork completed
    }
    fb.synchronize();
    EXPECT_EQ(calls.load(), kTensors);
  });
}

TEST(FusionBufferTest, NotifyCallbackGetsTheError) {
  // Rank 1 never queues anything, so rank 0's negotiation cannot complete: it fails (the
  // operation timeout, or the peer's buffer closing), and the callback receives that error.
  Options o = testOptions();
  o.execTimeout = std::chrono::milliseconds(1500);
  runThreads(2, o, [](Comm& c) {
    std::atomic<int> errors{0}, successes{0};
    {
      FusionBuffer fb(c, FusionOptions{1 << 20, std::chrono::milliseconds(1)});
      if (c.rank() == 0) {
        float v = 1;
        FusedWork w = fb.allreduceNotify(&v, 1, DataType::Float32, ReduceOp::Sum,
                                         [&](std::exception_ptr e) { ++(e ? errors : successes); });
        EXPECT_THROW(w.wait(), Error);
      }
    }
    EXPECT_EQ(successes.load(), 0);
    EXPECT_EQ(errors.load(), c.rank() == 0 ? 1 : 0);
  });
}

TEST(FusionBufferTest, EnvironmentSetsThresholdAndCycleTime) {
  ::setenv("BRAID_FUSION_THRESHOLD", "2M", 1);
  ::setenv("BRAID_CYCLE_TIME", "2.5", 1);
  Options o = Options::fromEnv();
  EXPECT_EQ(o.fusionThresholdBytes, std::size_t{2} << 20);
  EXPECT_EQ(o.cycleTime, std::chrono::microseconds(2500));
  EXPECT_EQ(FusionOptions::from(o).thresholdBytes, std::size_t{2} << 20);
  ::setenv("BRAID_CYCLE_TIME", "soon", 1);
  try {
    Options::fromEnv();
    ADD_FAILURE() << "no error for BRAID_CYCLE_TIME=soon";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_CYCLE_TIME"), std::string::npos) << e.what();
  }
  ::unsetenv("BRAID_FUSION_THRESHOLD");
  ::unsetenv("BRAID_CYCLE_TIME");
  Options d = Options::fromEnv();
  EXPECT_EQ(d.fusionThresholdBytes, std::size_t{64} << 20);
  EXPECT_EQ(d.cycleTime, std::chrono::microseconds(1000));
}

class OverlapTest : public ::testing::TestWithParam<int> {};

TEST_P(OverlapTest, ChunksHandedOverWhileComputing) {
  runThreads(
      GetParam(), testOptions(),
      [](Comm& c) {
        for (std::size_t count : {0u, 1u, 7u, 1031u, 10007u})
          for (std::size_t chunks : {1u, 3u, 16u}) {
            std::vector<double> v(count);
            train::OverlappedAllreduce ar(c, v.data(), count, DataType::Float64, ReduceOp::Sum,
                                          chunks);
            for (std::size_t k = 0; k < ar.chunks(); ++k) {
              for (std::size_t i = ar.chunkBegin(k); i < ar.chunkEnd(k); ++i)
                v[i] = static_cast<double>(i % 100 + c.rank());
              ar.ready(k);
            }
            ar.wait();
            const int n = c.size();
            for (std::size_t i = 0; i < count; ++i)
              ASSERT_EQ(v[i], static_cast<double>(n * (i % 100) + n * (n - 1) / 2))
                  << "count " << count << " chunks " << chunks << " index " << i;
          }
        std::vector<float> w(10);
        train::OverlappedAllreduce ar(c, w.data(), 10, DataType::Float32, ReduceOp::Sum, 2);
        EXPECT_THROW(ar.ready(1), Error);  // out of order
        EXPECT_THROW(ar.wait(), Error);    // nothing handed over
        ar.ready(0);
        ar.ready(1);
        ar.wait();
      },
      std::chrono::seconds(240));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, OverlapTest, ::testing::Values(1, 2, 3, 5, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace braid::test
