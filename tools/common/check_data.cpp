// The patterns, per operation (n ranks, L the largest exact integer magnitude of the dtype):
//   sum:      each value in [-L/n, L/n] ([0, L/n] unsigned), so any partial sum stays exact;
//   avg:      as sum, but the last rank adds 0..n-1 so the total is a multiple of n and the
//             average is exact whether it is computed by division or by multiplying by 1/n;
//   prod:     factors 1 or 2 (negated for some ranks in signed types), at most log2(L) twos;
//   min, max: values in [-100, 100] ([0, 200] unsigned);
//   moved:    values in [-2^20, 2^20] (clamped to L), distinct over a wide range of indices.
// L is capped at 2^30 for the wide types so all of this is 32-bit modular arithmetic.
#include "common/check_data.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace braid::tools {
namespace {

/// Every integer in [-L, L] ([0, L] for uint8) is exact in the dtype. Wide types are capped at
/// 2^30 so that all arithmetic here fits 32-bit moduli and the double we compute in.
std::int64_t exactLimit(DataType t) {
  switch (t) {
    case DataType::Int8:
      return 127;
    case DataType::Uint8:
      return 255;
    case DataType::Float16:
      return 2048;
    case DataType::BFloat16:
      return 256;
    case DataType::Float32:
      return std::int64_t{1} << 24;
    case DataType::Int32:
    case DataType::Int64:
    case DataType::Float64:
    case DataType::Uint32:
    case DataType::Uint64:
    case DataType::Complex128:
      return std::int64_t{1} << 30;
    case DataType::Int16:
      return 32767;
    case DataType::Uint16:
      return 65535;
    case DataType::Bool:
      return 1;
    case DataType::Float8E4M3Fn:
      return 16;
    case DataType::Float8E5M2:
      return 8;
    case DataType::Complex64:
      return std::int64_t{1} << 24;
  }
  return 0;
}

}  // namespace

DataPattern::Range DataPattern::makeRange(std::int64_t m, bool isSigned) {
  if (m < 1) return Range{};
  return isSigned ? Range{static_cast<std::uint32_t>(2 * m + 1), m}
                  : Range{static_cast<std::uint32_t>(m + 1), 0};
}

std::uint32_t DataPattern::sumHash(int rank, std::size_t index) {
  const auto i = static_cast<std::uint32_t>(index);
  return i * 7u + static_cast<std::uint32_t>(rank) * 13u + (i >> 5) * 3u;
}

DataPattern::DataPattern(DataType dtype, std::optional<ReduceOp> op, int nranks)
    : op_(op),
      nranks_(std::max(nranks, 1)),
      signed_(dtype != DataType::Uint8 && dtype != DataType::Uint16 && dtype != DataType::Uint32 &&
              dtype != DataType::Uint64 && dtype != DataType::Bool),
      bool_(dtype == DataType::Bool) {
  const std::int64_t limit = exactLimit(dtype);
  const std::int64_t perRank = limit / nranks_;
  sum_ = makeRange(perRank, signed_);
  avgAdjusts_ = perRank - nranks_ >= 0;
  avg_ = makeRange(perRank - nranks_, signed_);
  moved_ = makeRange(std::min<std::int64_t>(limit, 1 << 20), signed_);
  maxTwos_ = std::bit_width(static_cast<std::uint64_t>(limit)) - 1;
  minmax_ = makeRange(std::min<std::int64_t>(limit, 100), signed_);
}

std::int64_t DataPattern::avgTotal(std::size_t index) const {
  std::int64_t total = 0;
  for (int r = 0; r < nranks_; ++r) total += term(sumHash(r, index), avg_);
  return total;
}

std::int64_t DataPattern::avgAdjust(std::int64_t total) const {
  return (nranks_ - total % nranks_) % nranks_;  // total % n is in (-n, n)
}

double DataPattern::value(int rank, std::size_t index) const {
  if (bool_ ||
      (op_ && (*op_ == ReduceOp::BAnd || *op_ == ReduceOp::BOr || *op_ == ReduceOp::BXor))) {
    // Bool: 0/1 with columns of all-true; bitwise ops on integers: 0..127 (every type).
    const auto i = static_cast<std::uint32_t>(index);
    const std::uint32_t h = (i * 2654435761u) ^ (static_cast<std::uint32_t>(rank) * 40503u + i);
    if (bool_) return (i % 4 == 0) ? 1 : static_cast<double>((h >> 7) & 1u);
    return static_cast<double>((h >> 5) & 0x7fu);
  }
  if (!op_) {
    const auto i = static_cast<std::uint32_t>(index);
    return static_cast<double>(
        term(static_cast<std::uint32_t>(rank) * 1009u + i * 3u + (i >> 8), moved_));
  }
  switch (*op_) {
    case ReduceOp::Sum:
    case ReduceOp::PremulSum:  // braid-perf passes the factor 1
      return static_cast<double>(term(sumHash(rank, index), sum_));
    case ReduceOp::Avg: {
      // Same value on every rank when there is no room to adjust: the average is exact.
      if (!avgAdjusts_) return static_cast<double>(term(sumHash(0, index), sum_));
      std::int64_t v = term(sumHash(rank, index), avg_);
      if (rank == nranks_ - 1) v += avgAdjust(avgTotal(index));
      return static_cast<double>(v);
    }
    case ReduceOp::Prod: {
      const bool two = (index + static_cast<std::size_t>(rank)) % 4 == 0 && rank < 4 * maxTwos_;
      const bool negative = signed_ && (index * 3 + static_cast<std::size_t>(rank)) % 5 == 0;
      const double v = two ? 2 : 1;
      return negative ? -v : v;
    }
    case ReduceOp::Min:
    case ReduceOp::Max: {
      const auto i = static_cast<std::uint32_t>(index);
      const std::uint32_t h = i * 31u + static_cast<std::uint32_t>(rank) * 17u + (i >> 6);
      return static_cast<double>(term(h, minmax_));
    }
    default:
      break;
  }
  return 0;
}

double DataPattern::reduced(std::size_t index) const {
  if (!op_) return value(0, index);
  if (bool_ || *op_ == ReduceOp::BAnd || *op_ == ReduceOp::BOr || *op_ == ReduceOp::BXor) {
    auto acc = static_cast<std::int64_t>(value(0, index));
    for (int r = 1; r < nranks_; ++r) {
      const auto v = static_cast<std::int64_t>(value(r, index));
      const ReduceOp o = *op_;
      if (o == ReduceOp::BXor)
        acc ^= v;
      else if (o == ReduceOp::BAnd || o == ReduceOp::Prod || o == ReduceOp::Min)
        acc &= v;  // bool: prod and min are logical and
      else
        acc |= v;  // bool: sum and max are logical or
    }
    return static_cast<double>(acc);
  }
  if (*op_ == ReduceOp::Sum || *op_ == ReduceOp::PremulSum) {
    std::int64_t total = 0;
    for (int r = 0; r < nranks_; ++r) total += term(sumHash(r, index), sum_);
    return static_cast<double>(total);
  }
  if (*op_ == ReduceOp::Avg) {
    if (!avgAdjusts_) return value(0, index);
    const std::int64_t total = avgTotal(index);
    return static_cast<double>((total + avgAdjust(total)) / nranks_);  // exact by construction
  }
  double acc = value(0, index);
  for (int r = 1; r < nranks_; ++r) {
    const double v = value(r, index);
    switch (*op_) {
      case ReduceOp::Prod:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, v);
        break;
      default:
        break;
    }
  }
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

std::uint8_t exactToE4m3Bits(double v) noexcept {
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0;
  v = std::fabs(v);
  if (v == 0) return sign;
  int e = 0;
  const double m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  // 1.xxx * 2^(e-1): biased exponent e - 1 + 7, three mantissa bits of 2m - 1.
  const auto mant = static_cast<unsigned>((2 * m - 1) * 8);
  return static_cast<std::uint8_t>(sign | ((e + 6) << 3) | mant);
}

double e4m3BitsToDouble(std::uint8_t b) noexcept {
  const int e = (b >> 3) & 15, m = b & 7;
  if ((b & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (b & 0x80) ? -v : v;
}

std::uint16_t floatToBf16Bits(float f) noexcept {
  const auto x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t roundingBias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + roundingBias) >> 16);
}

}  // namespace braid::tools
