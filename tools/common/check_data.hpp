// Test data for braid-perf -c 1 and braid-check: integer values chosen so that every partial
// result of the reduction is exactly representable in the element type (fp16 holds integers up
// to 2048, bf16 up to 256, int8 up to 127), whatever order an algorithm combines ranks in. Expected
// results are computed here, in double, without any braid code.
#pragma once

#include <bit>
#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

namespace braid::tools {

/// The value rank r contributes at global index i, and the reduction over all ranks.
class DataPattern {
 public:
  /// `op` empty: data that is only moved (gather, broadcast, alltoall, ...).
  DataPattern(DataType dtype, std::optional<ReduceOp> op, int nranks);

  /// Integer-valued, exactly representable in the dtype.
  double value(int rank, std::size_t index) const;
  /// op applied over value(0, index) .. value(nranks - 1, index), exactly.
  double reduced(std::size_t index) const;

 private:
  /// value = hash % modulus - offset: a term in [-m, m] (modulus 2m+1, offset m) or [0, m].
  struct Range {
    std::uint32_t modulus = 1;
    std::int64_t offset = 0;
  };
  static Range makeRange(std::int64_t m, bool isSigned);
  static std::int64_t term(std::uint32_t hash, Range r) { return (hash % r.modulus) - r.offset; }
  static std::uint32_t sumHash(int rank, std::size_t index);
  /// Avg: the sum over ranks of the unadjusted terms, and what the last rank adds to it.
  std::int64_t avgTotal(std::size_t index) const;
  std::int64_t avgAdjust(std::int64_t total) const;

  std::optional<ReduceOp> op_;
  int nranks_;
  bool signed_;
  Range sum_;        // Sum: n terms stay within the exact range
  Range avg_;        // Avg: as sum_, leaving room for the last rank's adjustment
  bool avgAdjusts_;  // false: too little room; every rank sends the same value instead
  Range moved_;      // data that is only moved
  bool bool_;        // Bool: 0/1 values, logical reductions
  Range minmax_;     // Min, Max
  int maxTwos_;      // Prod: at most this many factors of 2 per index
};

/// IEEE binary16 <-> float, written here so the check does not trust braid's own conversions.
std::uint16_t floatToHalfBits(float f) noexcept;
float halfBitsToFloat(std::uint16_t h) noexcept;
std::uint16_t floatToBf16Bits(float f) noexcept;
/// float8 of an exactly representable value (the check's data only: integers up to 16 for
/// e4m3fn, 8 for e5m2, and 0) and back.
std::uint8_t exactToE4m3Bits(double v) noexcept;
double e4m3BitsToDouble(std::uint8_t b) noexcept;

/// Stores the (exactly representable) value v as element i of a dtype buffer.
inline void storeElement(DataType t, void* buf, std::size_t i, double v) noexcept {
  auto put = [&](auto x) {
    std::memcpy(static_cast<unsigned char*>(buf) + i * sizeof(x), &x, sizeof(x));
  };
  switch (t) {
    case DataType::Int8:
      put(static_cast<std::int8_t>(v));
      break;
    case DataType::Uint8:
      put(static_cast<std::uint8_t>(v));
      break;
    case DataType::Int32:
      put(static_cast<std::int32_t>(v));
      break;
    case DataType::Int64:
      put(static_cast<std::int64_t>(v));
      break;
    case DataType::Float16:
      put(floatToHalfBits(static_cast<float>(v)));
      break;
    case DataType::BFloat16:
      put(floatToBf16Bits(static_cast<float>(v)));
      break;
    case DataType::Float32:
      put(static_cast<float>(v));
      break;
    case DataType::Float64:
      put(v);
      break;
    case DataType::Bool:
      put(static_cast<std::uint8_t>(v != 0 ? 1 : 0));
      break;
    case DataType::Int16:
      put(static_cast<std::int16_t>(v));
      break;
    case DataType::Uint16:
      put(static_cast<std::uint16_t>(v));
      break;
    case DataType::Uint32:
      put(static_cast<std::uint32_t>(v));
      break;
    case DataType::Uint64:
      put(static_cast<std::uint64_t>(v));
      break;
    case DataType::Float8E4M3Fn:
      put(exactToE4m3Bits(v));
      break;
    case DataType::Float8E5M2:  // the high byte of the fp16 (exact values only)
      put(static_cast<std::uint8_t>(floatToHalfBits(static_cast<float>(v)) >> 8));
      break;
    case DataType::Complex64: {  // (v, 0)
      const float c[2] = {static_cast<float>(v), 0.0f};
      std::memcpy(static_cast<unsigned char*>(buf) + i * sizeof c, c, sizeof c);
      break;
    }
    case DataType::Complex128: {
      const double c[2] = {v, 0.0};
      std::memcpy(static_cast<unsigned char*>(buf) + i * sizeof c, c, sizeof c);
      break;
    }
  }
}

/// Element i of a dtype buffer as a double (NaN stays NaN).
inline double loadElement(DataType t, const void* buf, std::size_t i) noexcept {
  auto get = [&](auto x) {
    std::memcpy(&x, static_cast<const unsigned char*>(buf) + i * sizeof(x), sizeof(x));
    return x;
  };
  switch (t) {
    case DataType::Int8:
      return get(std::int8_t{});
    case DataType::Uint8:
      return get(std::uint8_t{});
    case DataType::Int32:
      return get(std::int32_t{});
    case DataType::Int64:
      return static_cast<double>(get(std::int64_t{}));
    case DataType::Float16:
      return halfBitsToFloat(get(std::uint16_t{}));
    case DataType::BFloat16:
      return std::bit_cast<float>(static_cast<std::uint32_t>(get(std::uint16_t{})) << 16);
    case DataType::Float32:
      return get(float{});
    case DataType::Float64:
      return get(double{});
    case DataType::Bool:
      return get(std::uint8_t{});
    case DataType::Int16:
      return get(std::int16_t{});
    case DataType::Uint16:
      return get(std::uint16_t{});
    case DataType::Uint32:
      return get(std::uint32_t{});
    case DataType::Uint64:
      return static_cast<double>(get(std::uint64_t{}));
    case DataType::Float8E4M3Fn:
      return e4m3BitsToDouble(get(std::uint8_t{}));
    case DataType::Float8E5M2:
      return halfBitsToFloat(static_cast<std::uint16_t>(get(std::uint8_t{}) << 8));
    case DataType::Complex64:
    case DataType::Complex128: {
      // The check's complex data is real: a non-zero imaginary part reads as NaN (wrong).
      double c[2];
      if (t == DataType::Complex64) {
        float f[2];
        std::memcpy(f, static_cast<const unsigned char*>(buf) + i * sizeof f, sizeof f);
        c[0] = f[0];
        c[1] = f[1];
      } else {
        std::memcpy(c, static_cast<const unsigned char*>(buf) + i * sizeof c, sizeof c);
      }
      return c[1] == 0 ? c[0] : std::numeric_limits<double>::quiet_NaN();
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

namespace detail {
/// Calls f(tag) with a tag whose ::dtype is t, so loops below are compiled once per dtype
/// instead of switching on the dtype for every element.
template <DataType T>
struct DtypeTag {
  static constexpr DataType dtype = T;
};
template <class F>
decltype(auto) withDtype(DataType t, F&& f) {
  switch (t) {
    case DataType::Int8:
      return f(DtypeTag<DataType::Int8>{});
    case DataType::Uint8:
      return f(DtypeTag<DataType::Uint8>{});
    case DataType::Int32:
      return f(DtypeTag<DataType::Int32>{});
    case DataType::Int64:
      return f(DtypeTag<DataType::Int64>{});
    case DataType::Float16:
      return f(DtypeTag<DataType::Float16>{});
    case DataType::BFloat16:
      return f(DtypeTag<DataType::BFloat16>{});
    case DataType::Float32:
      return f(DtypeTag<DataType::Float32>{});
    case DataType::Float64:
      return f(DtypeTag<DataType::Float64>{});
    case DataType::Bool:
      return f(DtypeTag<DataType::Bool>{});
    case DataType::Int16:
      return f(DtypeTag<DataType::Int16>{});
    case DataType::Uint16:
      return f(DtypeTag<DataType::Uint16>{});
    case DataType::Uint32:
      return f(DtypeTag<DataType::Uint32>{});
    case DataType::Uint64:
      return f(DtypeTag<DataType::Uint64>{});
    case DataType::Float8E4M3Fn:
      return f(DtypeTag<DataType::Float8E4M3Fn>{});
    case DataType::Float8E5M2:
      return f(DtypeTag<DataType::Float8E5M2>{});
    case DataType::Complex64:
      return f(DtypeTag<DataType::Complex64>{});
    case DataType::Complex128:
      return f(DtypeTag<DataType::Complex128>{});
  }
  return f(DtypeTag<DataType::Float32>{});
}
}  // namespace detail

/// buf[i] = f(i) for i < count.
template <class F>
void fillBuffer(DataType t, void* buf, std::size_t count, F&& f) {
  detail::withDtype(t, [&](auto tag) {
    for (std::size_t i = 0; i < count; ++i) storeElement(tag.dtype, buf, i, f(i));
  });
}

/// Number of i < count where buf[i] != expected(i).
template <class F>
std::int64_t countWrong(DataType t, const void* buf, std::size_t count, F&& expected) {
  return detail::withDtype(t, [&](auto tag) {
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i)
      if (!(loadElement(tag.dtype, buf, i) == expected(i))) ++wrong;
    return wrong;
  });
}

}  // namespace braid::tools
