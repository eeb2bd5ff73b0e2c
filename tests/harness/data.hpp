// Typed buffers for tests: write and read elements of any DataType as doubles, and compute
// expected reductions independently of braid's kernels (plain double arithmetic, then the
// wrap-around or rounding the dtype implies).
#pragma once

#include <braid/types.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid::test {

class Buffer {
 public:
  Buffer(DataType t, std::size_t count) : t_(t), count_(count), bytes_(count * dataTypeSize(t) + 1) {}
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  std::size_t count() const { return count_; }
  DataType dtype() const { return t_; }
  void set(std::size_t i, double v);
  double get(std::size_t i) const;
  /// Pointer to element i.
  void* at(std::size_t i) { return bytes_.data() + i * dataTypeSize(t_); }

 private:
  DataType t_;
  std::size_t count_;
  std::vector<std::uint8_t> bytes_;
};

/// An integer value for (rank, index) that every dtype represents exactly and that keeps
/// sums/products of up to 8 ranks exact: small for sums, in {1, 2, -1 patterns} for prod.
double testValue(DataType t, ReduceOp op, int rank, std::size_t i);
/// Expected result of reducing v[0..n) with op, converted as the dtype stores it.
double expectedReduce(DataType t, ReduceOp op, const std::vector<double>& v);
/// The value as stored by dtype t (wrap-around for integers, rounding for floats).
double roundTrip(DataType t, double v);

inline constexpr DataType kAllDataTypes[] = {
    DataType::Int8,     DataType::Uint8,    DataType::Int32,   DataType::Int64,
    DataType::Float16,  DataType::BFloat16, DataType::Float32, DataType::Float64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min,
                                             ReduceOp::Max, ReduceOp::Avg};

}  // namespace braid::test
