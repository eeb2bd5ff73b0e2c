// The patterns, per operation (n ranks, L the largest exact integer magnitude of the dtype):
//   sum:      each value in [-L/n, L/n] ([0, L/n] unsigned), so any partial sum stays exact;
//   avg:      as sum, but the last rank adds 0..n-1 so the total is a multiple of n and the
//             average is exact whether it is computed by division or by multiplying by 1/n;
//   prod:     factors 1 or 2 (negated for some ranks in signed types), at most log2(L) twos;
//   min, max: values in [-100, 100] ([0, 200] unsigned);
//   moved:    values in [-2^20, 2^20] (clamped to L), distinct over a wide range of indices.
#include "check_data.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace braid::perf {
namespace {

double exactLimit(DataType t) {
  switch (t) {
    case DataType::Int8:
      return 127;
    case DataType::Uint8:
      return 255;
    case DataType::Int32:
      return 2147483647.0;
    case DataType::Int64:
      return 4503599627370496.0;  // 2^52: exact in the double we compute in
    case DataType::Float16:
      return 2048;
    case DataType::BFloat16:
      return 256;
    case DataType::Float32:
      return 16777216.0;
    case DataType::Float64:
      return 4503599627370496.0;
  }
  return 0;
}

/// v mapped into [-m, m] (signed) or [0, m].
double wrapInto(std::uint64_t h, double m, bool isSigned) {
  if (m < 1) return 0;
  const auto mi = static_cast<std::uint64_t>(m);
  if (isSigned) return static_cast<double>(h % (2 * mi + 1)) - m;
  return static_cast<double>(h % (mi + 1));
}

}  // namespace

DataPattern::DataPattern(DataType dtype, std::optional<ReduceOp> op, int nranks)
    : dtype_(dtype),
      op_(op),
      nranks_(std::max(nranks, 1)),
      signed_(dtype != DataType::Uint8),
      limit_(exactLimit(dtype)),
      perRank_(std::floor(limit_ / nranks_)),
      maxTwos_(static_cast<int>(std::floor(std::log2(limit_)))) {}

double DataPattern::sumTerm(int rank, std::size_t index, double magnitude) const {
  const std::uint64_t h = index * 7 + static_cast<std::uint64_t>(rank) * 13 + (index >> 5) * 3;
  return wrapInto(h, magnitude, signed_);
}

double DataPattern::value(int rank, std::size_t index) const {
  if (!op_) {
    const std::uint64_t h = static_cast<std::uint64_t>(rank) * 1009 + index * 3 + (index >> 8);
    return wrapInto(h, std::min(limit_, 1048576.0), signed_);
  }
  switch (*op_) {
    case ReduceOp::Sum:
      return sumTerm(rank, index, perRank_);
    case ReduceOp::Avg: {
      const double m = perRank_ - nranks_;
      if (m < 0) return sumTerm(0, index, perRank_);  // same on every rank: the average is exact
      double v = sumTerm(rank, index, m);
      if (rank == nranks_ - 1) {
        double total = 0;
        for (int r = 0; r < nranks_; ++r) total += sumTerm(r, index, m);
        const auto rem = static_cast<std::int64_t>(std::fmod(total, nranks_));
        v += static_cast<double>((nranks_ - rem) % nranks_);
      }
      return v;
    }
    case ReduceOp::Prod: {
      const bool two = (index + static_cast<std::size_t>(rank)) % 4 == 0 && rank < 4 * maxTwos_;
      const bool negative = signed_ && (index * 3 + static_cast<std::size_t>(rank)) % 5 == 0;
      const double v = two ? 2 : 1;
      return negative ? -v : v;
    }
    case ReduceOp::Min:
    case ReduceOp::Max: {
      const std::uint64_t h = index * 31 + static_cast<std::uint64_t>(rank) * 17 + (index >> 6);
      return signed_ ? static_cast<double>(h % 201) - 100 : static_cast<double>(h % 201);
    }
  }
  return 0;
}

double DataPattern::reduced(std::size_t index) const {
  if (!op_) return value(0, index);
  if (*op_ == ReduceOp::Avg && perRank_ - nranks_ >= 0) {
    // value() of the last rank sums every rank's term: reuse one pass instead of n.
    const double m = perRank_ - nranks_;
    double total = 0;
    for (int r = 0; r < nranks_; ++r) total += sumTerm(r, index, m);
    const auto rem = static_cast<std::int64_t>(std::fmod(total, nranks_));
    return (total + static_cast<double>((nranks_ - rem) % nranks_)) / nranks_;
  }
  double acc = value(0, index);
  for (int r = 1; r < nranks_; ++r) {
    const double v = value(r, index);
    switch (*op_) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += v;
        break;
      case ReduceOp::Prod:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, v);
        break;
    }
  }
  if (*op_ == ReduceOp::Avg) acc /= nranks_;  // exact: the patterns make the sum divisible
  return acc;
}

std::uint16_t floatToHalfBits(float f) noexcept {
  const auto x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t absBits = x & 0x7fffffffu;
  if (absBits >= 0x7f800000u)  // inf or NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u | (absBits > 0x7f800000u ? 0x200u : 0u));
  if (absBits >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
  if (absBits < 0x38800000u) {  // result is subnormal (or zero): value / 2^-24, rounded RNE
    const float scaled = std::bit_cast<float>(absBits) * 16777216.0f;  // exact (power of two)
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)));
  }
  std::uint32_t h = ((absBits >> 13) - ((127u - 15u) << 10));
  const std::uint32_t rest = absBits & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // round to nearest even
  return static_cast<std::uint16_t>(sign | h);
}

float halfBitsToFloat(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = static_cast<float>(mant) / 16777216.0f;  // subnormal: mant * 2^-24
  } else if (exp == 31) {
    magnitude = mant == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::bit_cast<float>(((exp + 127u - 15u) << 23) | (mant << 13));
  }
  return sign != 0 ? -magnitude : magnitude;
}

std::uint16_t floatToBf16Bits(float f) noexcept {
  const auto x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t roundingBias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + roundingBias) >> 16);
}

}  // namespace braid::perf
