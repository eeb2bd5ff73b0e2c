// Compressed allreduce (include/braid/compress.hpp): every method x world size {1,2,3,4,5,7,8}
// x counts (0, 1, odd, primes, several blocks) x {sum, avg}, over the real communicator with
// tiny chunks. Each rank computes every rank's input itself (a hash of seed, rank, index), so the
// expectations are independent of braid: the exact sum in double, and per method either the
// exact compressed result (TopK, Sign: selection/decoding re-implemented here) or the documented
// error bound (Int8, RandK). Error feedback: over many steps the results plus the residuals add
// up to the exact sums, and the accumulated error stays below the one without feedback.
#include <gtest/gtest.h>

#include <algorithm>
#include <braid/compress.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/ranks.hpp"
#include "kernels/codec.hpp"

namespace braid::test {
namespace {

using train::CompressionKind;
using train::CompressionSpec;
using train::Compressor;

constexpr std::size_t kBlock = 16;  // small blocks: many per test vector, partial last block

std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
  z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ull;
  return z ^ (z >> 33);
}

/// Rank r's input at index i, step t: a per-index bias (so errors without feedback pile up) plus
/// noise, with magnitudes that change from block to block.
float inputValue(std::uint64_t seed, int rank, std::size_t i, int step = 0) {
  const std::uint64_t h = mix(seed * 0x9E3779B97F4A7C15ull ^ mix(i * 131 + rank * 7 + step * 977));
  const double u = static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0;  // [-1, 1)
  const double bias = 0.3 * std::sin(static_cast<double>(i) * 0.7);
  const double scale = 1.0 + static_cast<double>((i / 23) % 5) * 2.5;
  return static_cast<float>((bias + u) * scale);
}

std::vector<float> inputs(std::uint64_t seed, int rank, std::size_t count, int step = 0) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = inputValue(seed, rank, i, step);
  return v;
}

std::size_t kOf(double ratio, std::size_t count) {
  if (count == 0) return 0;
  auto k = static_cast<std::size_t>(std::llround(ratio * static_cast<double>(count)));
  return std::clamp<std::size_t>(k, 1, count);
}

/// Indices of the k largest |x|, ties to the lower index (the documented order), by full sort.
std::vector<std::size_t> topIndices(const std::vector<float>& x, std::size_t k) {
  std::vector<std::size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t a, std::size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  idx.resize(k);
  return idx;
}

std::string where(const Comm& c, const CompressionSpec& spec, std::size_t count, ReduceOp op,
                  std::size_t i) {
  std::ostringstream s;
  s << spec.toString() << " n=" << c.size() << " rank " << c.rank() << " count " << count << " "
    << toString(op) << " index " << i;
  return s.str();
}

/// All ranks hold bit-identical results.
void expectSameOnAllRanks(Comm& c, const std::vector<float>& out, const std::string& what) {
  std::vector<float> all(out.size() * c.size());
  c.allgather(out.data(), all.data(), out.size(), DataType::Float32);
  for (int r = 0; r < c.size(); ++r)
    if (std::memcmp(all.data() + r * out.size(), out.data(), out.size() * 4) != 0)
      throw std::runtime_error(what + ": result differs from rank " + std::to_string(r) + "'s");
}

void checkOneStep(Comm& c, const CompressionSpec& spec, std::size_t count, ReduceOp op) {
  const int n = c.size();
  const std::uint64_t seed = 1000 + count;
  std::vector<std::vector<float>> in(n);
  for (int r = 0; r < n; ++r) in[r] = inputs(seed, r, count);
  std::vector<float> data = in[c.rank()];
  auto comp = Compressor::create(spec);
  const train::CompressStats stats = comp->allreduce(c, data.data(), count, op);
  const double div = op == ReduceOp::Avg ? n : 1.0;

  // Wire volume, from the documented formulas.
  const std::size_t k = kOf(spec.ratio, count);
  const std::size_t nb = (count + kBlock - 1) / kBlock;
  double wire = 0;
  if (count > 0) {
    switch (spec.kind) {
      case CompressionKind::None:
        wire = 2.0 * (n - 1) / n * 4.0 * count;
        break;
      case CompressionKind::Int8: {
        double total = 0;
        for (int s = 0; s < n; ++s) {
          const std::size_t b0 = nb * s / n, b1 = nb * (s + 1) / n;
          const std::size_t len = std::min(b1 * kBlock, count) - std::min(b0 * kBlock, count);
          total += 4.0 * (b1 - b0) + static_cast<double>((len + 3) / 4 * 4);
        }
        wire = 2.0 * (n - 1) / n * total;
        break;
      }
      case CompressionKind::TopK:
        wire = (n - 1) * 8.0 * k;
        break;
      case CompressionKind::RandK:
        wire = 2.0 * (n - 1) / n * 4.0 * k;
        break;
      case CompressionKind::Sign:
        wire = (n - 1) * (4.0 * nb + static_cast<double>(((count + 7) / 8 + 3) / 4 * 4));
        break;
    }
  }
  if (std::fabs(stats.wireBytes - wire) > 1e-6 * (wire + 1))
    throw std::runtime_error(where(c, spec, count, op, 0) + ": wireBytes " +
                             std::to_string(stats.wireBytes) + ", expected " +
                             std::to_string(wire));
  if (std::fabs(stats.denseWireBytes - (n > 1 ? 2.0 * (n - 1) / n * 4.0 * count : 0.0)) > 1e-6)
    throw std::runtime_error(where(c, spec, count, op, 0) + ": denseWireBytes wrong");

  std::vector<std::vector<std::size_t>> top(n);
  if (spec.kind == CompressionKind::TopK)
    for (int r = 0; r < n; ++r) top[r] = topIndices(in[r], k);
  std::size_t selected = 0;  // RandK: indices whose value came through
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0, absSum = 0;
    for (int r = 0; r < n; ++r) {
      exact += in[r][i];
      absSum += std::fabs(in[r][i]);
    }
    const double got = data[i] * div;  // in units of the sum
    const double tol = 1e-5 * absSum + 1e-6;
    bool ok = true;
    std::string bound;
    switch (spec.kind) {
      case CompressionKind::None:
        ok = std::fabs(got - exact) <= tol;
        break;
      case CompressionKind::Int8: {
        // |error| <= sum_r m_r/254 (each rank's quantisation) + M/254 (the sum's), M <= sum_r m_r.
        const std::size_t b0 = i / kBlock * kBlock, b1 = std::min(b0 + kBlock, count);
        double m = 0;
        for (int r = 0; r < n; ++r) {
          double mr = 0;
          for (std::size_t j = b0; j < b1; ++j) mr = std::max(mr, std::fabs(double{in[r][j]}));
          m += mr;
        }
        ok = std::fabs(got - exact) <= m / 127.0 + tol;
        bound = " (bound " + std::to_string(m / 127.0) + ")";
        break;
      }
      case CompressionKind::TopK: {
        double expected = 0;
        for (int r = 0; r < n; ++r)
          if (std::find(top[r].begin(), top[r].end(), i) != top[r].end()) expected += in[r][i];
        ok = std::fabs(got - expected) <= tol;
        bound = " (expected " + std::to_string(expected) + ")";
        break;
      }
      case CompressionKind::RandK:
        // Either every rank's value of index i came through, or none did.
        if (got != 0.0) {
          ok = std::fabs(got - exact) <= tol;
          ++selected;
        }
        break;
      case CompressionKind::Sign: {
        const std::size_t b0 = i / kBlock * kBlock, b1 = std::min(b0 + kBlock, count);
        double expected = 0;
        for (int r = 0; r < n; ++r) {
          double l1 = 0;
          for (std::size_t j = b0; j < b1; ++j) l1 += std::fabs(double{in[r][j]});
          const double s = l1 / static_cast<double>(b1 - b0);
          expected += in[r][i] >= 0 ? s : -s;
        }
        ok = std::fabs(got - expected) <= tol;
        bound = " (expected " + std::to_string(expected) + ")";
        break;
      }
    }
    if (!ok)
      throw std::runtime_error(where(c, spec, count, op, i) + ": got " + std::to_string(got) +
                               ", exact sum " + std::to_string(exact) + bound);
  }
  if (spec.kind == CompressionKind::RandK && selected != k)
    throw std::runtime_error(where(c, spec, count, op, 0) + ": " + std::to_string(selected) +
                             " values came through, expected k = " + std::to_string(k));
  expectSameOnAllRanks(c, data, where(c, spec, count, op, 0));
}

CompressionSpec specOf(CompressionKind kind, double ratio = 0.1) {
  CompressionSpec s;
  s.kind = kind;
  s.ratio = ratio;
  s.blockElements = kBlock;
  return s;
}

const CompressionKind kKinds[] = {CompressionKind::None, CompressionKind::Int8,
                                  CompressionKind::TopK, CompressionKind::RandK,
                                  CompressionKind::Sign};
constexpr std::size_t kCounts[] = {0, 1, 7, 16, 17, 61, 257, 1031};

class CompressSweep : public ::testing::TestWithParam<int> {};

TEST_P(CompressSweep, EveryMethodCountOp) {
  runThreads(
      GetParam(), testOptions(),
      [](Comm& c) {
        for (CompressionKind kind : kKinds)
          for (std::size_t count : kCounts)
            for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
              checkOneStep(c, specOf(kind), count, op);
              if (kind == CompressionKind::TopK || kind == CompressionKind::RandK)
                checkOneStep(c, specOf(kind, 0.5), count, op);
            }
      },
      std::chrono::seconds(240));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CompressSweep, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

/// T steps with error feedback: sum_t result_t + sum_r residual_r = sum_t exact_t (identity, up
/// to fp32 rounding), and the accumulated error is smaller than without feedback.
void checkErrorFeedback(Comm& c, const CompressionSpec& spec, std::size_t count, int steps) {
  const int n = c.size();
  auto withEf = Compressor::create(spec);
  auto without = Compressor::create(spec);
  train::ErrorFeedback ef(*withEf);
  std::vector<double> sumEf(count, 0), sumPlain(count, 0), sumExact(count, 0);
  double absTotal = 0;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> a = inputs(77, c.rank(), count, t);
    std::vector<float> b = a;
    ef.allreduce(c, a.data(), count, ReduceOp::Sum);
    without->allreduce(c, b.data(), count, ReduceOp::Sum);
    for (std::size_t i = 0; i < count; ++i) {
      sumEf[i] += a[i];
      sumPlain[i] += b[i];
      for (int r = 0; r < n; ++r) {
        const float v = inputValue(77, r, i, t);
        sumExact[i] += v;
        absTotal += std::fabs(v);
      }
    }
  }
  std::vector<float> residuals(count * n);
  c.allgather(ef.residual().data(), residuals.data(), count, DataType::Float32);
  double errEf = 0, errPlain = 0, errIdentity = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double res = 0;
    for (int r = 0; r < n; ++r) res += residuals[r * count + i];
    errIdentity = std::max(errIdentity, std::fabs(sumEf[i] + res - sumExact[i]));
    errEf += (sumEf[i] - sumExact[i]) * (sumEf[i] - sumExact[i]);
    errPlain += (sumPlain[i] - sumExact[i]) * (sumPlain[i] - sumExact[i]);
  }
  const std::string what =
      spec.toString() + " n=" + std::to_string(n) + " rank " + std::to_string(c.rank()) + ": ";
  // fp32 rounding of `steps` additions of values of size ~absTotal / (count * steps).
  const double tol = 1e-5 * absTotal / static_cast<double>(count) + 1e-4;
  if (errIdentity > tol)
    throw std::runtime_error(what + "results + residuals differ from the exact sum by " +
                             std::to_string(errIdentity) + " (tolerance " + std::to_string(tol) +
                             ")");
  if (spec.kind != CompressionKind::None && n > 1 && !(std::sqrt(errEf) < std::sqrt(errPlain)))
    throw std::runtime_error(what + "accumulated error with feedback " +
                             std::to_string(std::sqrt(errEf)) + " is not below the one without " +
                             std::to_string(std::sqrt(errPlain)));
}

class ErrorFeedbackTest : public ::testing::TestWithParam<int> {};

TEST_P(ErrorFeedbackTest, ResidualsCloseTheGapToTheExactSum) {
  runThreads(
      GetParam(), testOptions(),
      [](Comm& c) {
        for (CompressionKind kind : kKinds) checkErrorFeedback(c, specOf(kind), 257, 40);
      },
      std::chrono::seconds(240));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ErrorFeedbackTest, ::testing::Values(1, 2, 3, 5, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(ErrorFeedbackTest, CountMustNotChange) {
  runThreads(2, testOptions(), [](Comm& c) {
    auto comp = Compressor::create(specOf(CompressionKind::Int8));
    train::ErrorFeedback ef(*comp);
    std::vector<float> v(10, 1.0f);
    ef.allreduce(c, v.data(), 10, ReduceOp::Sum);
    try {
      ef.allreduce(c, v.data(), 9, ReduceOp::Sum);
      throw std::runtime_error("no error for a changed count");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("count 9"), std::string::npos) << e.what();
    }
  });
}

TEST(CompressProcesses, Int8TopKSignAcrossProcesses) {
  runProcesses(
      3, testOptions(),
      [](Comm& c) {
        for (CompressionKind kind : kKinds) {
          checkOneStep(c, specOf(kind), 1031, ReduceOp::Avg);
          checkErrorFeedback(c, specOf(kind), 61, 20);
        }
      },
      std::chrono::seconds(240));
}

TEST(CompressErrors, BadOpNamesRankAndOp) {
  runThreads(2, testOptions(), [](Comm& c) {
    auto comp = Compressor::create(specOf(CompressionKind::TopK));
    std::vector<float> v(8, 1.0f);
    try {
      comp->allreduce(c, v.data(), v.size(), ReduceOp::Max);
      throw std::runtime_error("no error for op max");
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(m.find("rank " + std::to_string(c.rank())), std::string::npos) << m;
      EXPECT_NE(m.find("max"), std::string::npos) << m;
      EXPECT_NE(m.find("topk"), std::string::npos) << m;
    }
    try {
      comp->allreduce(c, nullptr, 4, ReduceOp::Sum);
      throw std::runtime_error("no error for null data");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("data is null"), std::string::npos) << e.what();
    }
    // Still usable afterwards.
    comp->allreduce(c, v.data(), v.size(), ReduceOp::Sum);
    EXPECT_EQ(v[0] + v[1] + v[7], 2.0f);  // k = 1: only index 0 (ties: the lowest) survives
  });
}

TEST(CompressionSpecTest, ParseAndPrint) {
  EXPECT_EQ(CompressionSpec::parse("int8")->kind, CompressionKind::Int8);
  EXPECT_EQ(CompressionSpec::parse("sign")->kind, CompressionKind::Sign);
  EXPECT_EQ(CompressionSpec::parse("none")->kind, CompressionKind::None);
  auto t = CompressionSpec::parse("topk:0.01");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind, CompressionKind::TopK);
  EXPECT_DOUBLE_EQ(t->ratio, 0.01);
  EXPECT_EQ(t->toString(), "topk:0.01");
  auto r = CompressionSpec::parse("randk:0.25");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, CompressionKind::RandK);
  EXPECT_EQ(r->toString(), "randk:0.25");
  for (const char* bad :
       {"", "int4", "topk:", "topk:0", "topk:1.5", "topk:-1", "randk:x", "int8:0.5", "topk:0.1x"})
    EXPECT_FALSE(CompressionSpec::parse(bad)) << bad;
  CompressionSpec s;
  s.kind = CompressionKind::TopK;
  s.ratio = 0;
  EXPECT_THROW(Compressor::create(s), Error);
}

TEST(CodecKernels, Int8RoundTripWithinHalfAStep) {
  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = inputValue(5, 0, i);
  std::fill(x.begin() + 100, x.begin() + 200, 0.0f);  // an all-zero block
  const std::size_t block = 50;
  std::vector<float> scales(20), back(1000);
  std::vector<std::int8_t> q(1000);
  kernels::quantizeInt8(x.data(), x.size(), block, scales.data(), q.data());
  kernels::dequantizeInt8(scales.data(), q.data(), x.size(), block, back.data(), false);
  for (std::size_t b = 0; b < 20; ++b) {
    float m = 0;
    for (std::size_t i = b * block; i < (b + 1) * block; ++i) m = std::max(m, std::fabs(x[i]));
    EXPECT_FLOAT_EQ(scales[b], m / 127.0f);
    for (std::size_t i = b * block; i < (b + 1) * block; ++i)
      ASSERT_LE(std::fabs(back[i] - x[i]), m / 254.0f * (1 + 1e-5f)) << i;
  }
}

TEST(CodecKernels, SampleIndicesDistinctSortedDeterministic) {
  std::vector<std::uint8_t> taken;
  for (std::size_t n : {1u, 2u, 10u, 1000u})
    for (std::size_t k : {std::size_t{1}, n / 2 + 1, n}) {
      std::vector<std::uint32_t> a(k), b(k), c(k);
      kernels::sampleIndices(42, 3, n, k, a.data(), taken);
      kernels::sampleIndices(42, 3, n, k, b.data(), taken);
      kernels::sampleIndices(42, 4, n, k, c.data(), taken);
      EXPECT_EQ(a, b);
      for (std::size_t j = 0; j < k; ++j) {
        ASSERT_LT(a[j], n);
        if (j > 0) {
          ASSERT_LT(a[j - 1], a[j]);
        }
      }
      if (n == 1000 && k == 1) {
        EXPECT_NE(a, c);  // another step draws other indices
      }
    }
  // The same draw as braid_torch.training.sample_indices (tests/python/workers/training_worker.py
  // checks the Python side against these numbers).
  std::vector<std::uint32_t> d(4);
  kernels::sampleIndices(42, 3, 10, 4, d.data(), taken);
  std::printf("sampleIndices(42, 3, 10, 4) = %u %u %u %u\n", d[0], d[1], d[2], d[3]);
  EXPECT_EQ(d, (std::vector<std::uint32_t>{2, 5, 6, 7}));
}

}  // namespace
}  // namespace braid::test
