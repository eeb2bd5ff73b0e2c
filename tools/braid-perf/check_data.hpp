// Test data for braid-perf -c 1: integer values chosen so that every partial result of the
// reduction is exactly representable in the element type (fp16 holds integers up to 2048,
// bf16 up to 256, int8 up to 127), whatever order an algorithm combines ranks in. Expected
// results are computed here, in double, without any braid code.
#pragma once

#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace braid::perf {

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
  double sumTerm(int rank, std::size_t index, double magnitude) const;

  DataType dtype_;
  std::optional<ReduceOp> op_;
  int nranks_;
  bool signed_;
  double limit_;    // every integer in [-limit, limit] ([0, limit] for uint8) is exact
  double perRank_;  // Sum/Avg: bound on one rank's |value|, so n of them stay within limit
  int maxTwos_;     // Prod: at most this many factors of 2 per index
};

/// Stores the (exactly representable) value v as element i of a dtype buffer.
void storeElement(DataType t, void* buf, std::size_t i, double v) noexcept;
/// Element i of a dtype buffer as a double (NaN stays NaN).
double loadElement(DataType t, const void* buf, std::size_t i) noexcept;

/// buf[i] = f(i) for i < count.
template <class F>
void fillBuffer(DataType t, void* buf, std::size_t count, F&& f) {
  for (std::size_t i = 0; i < count; ++i) storeElement(t, buf, i, f(i));
}

/// Number of i < count where buf[i] != expected(i).
template <class F>
std::int64_t countWrong(DataType t, const void* buf, std::size_t count, F&& expected) {
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (!(loadElement(t, buf, i) == expected(i))) ++wrong;
  return wrong;
}

/// IEEE binary16 <-> float, written here so the check does not trust braid's own conversions.
std::uint16_t floatToHalfBits(float f) noexcept;
float halfBitsToFloat(std::uint16_t h) noexcept;

}  // namespace braid::perf
