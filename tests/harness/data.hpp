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

/// The dtypes of the full sweeps (the original eight: kExtendedDataTypes get a focused sweep,
/// checkExtendedReductions, so the grid does not multiply).
inline constexpr DataType kAllDataTypes[] = {
    DataType::Int8,     DataType::Uint8,    DataType::Int32,   DataType::Int64,
    DataType::Float16,  DataType::BFloat16, DataType::Float32, DataType::Float64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min,
                                             ReduceOp::Max, ReduceOp::Avg};
/// The dtypes added for torch 2.x (bool, 16/32/64-bit unsigned, int16, float8, complex).
inline constexpr DataType kExtendedDataTypes[] = {
    DataType::Bool,         DataType::Int16,      DataType::Uint16,    DataType::Uint32,
    DataType::Uint64,       DataType::Float8E4M3Fn, DataType::Float8E5M2, DataType::Complex64,
    DataType::Complex128};
/// Every op, the bitwise ones and PremulSum included.
inline constexpr ReduceOp kEveryReduceOp[] = {ReduceOp::Sum,  ReduceOp::Prod, ReduceOp::Min,
                                              ReduceOp::Max,  ReduceOp::Avg,  ReduceOp::BAnd,
                                              ReduceOp::BOr,  ReduceOp::BXor, ReduceOp::PremulSum};

/// float8 encoders and decoders of the harness, written independently of braid's kernels: the
/// value of every pattern from its fields, and rounding by search over the 128 magnitudes
/// (nearest, ties to the even pattern) with torch's special rules (e4m3fn: a magnitude that
/// reaches 480, the step above 448, is NaN 0x7f; e5m2: overflow to inf 0x7c; NaN 0x7f; signs
/// kept).
double e4m3Value(std::uint8_t p);
double e5m2Value(std::uint8_t p);
std::uint8_t encodeE4m3(double x);
std::uint8_t encodeE5m2(double x);

/// The focused sweep of the added dtypes and ops (checkExtendedReductions): element i of
/// `rank`'s input for (t, op), written as raw bytes (dataTypeSize(t) of them at out), and the
/// expected result of reducing every rank's input on `n` ranks. Values are chosen so that every
/// order of reduction gives the same bits (wrap-around integers; float8 sums of small integers;
/// complex with small integer parts), so any algorithm is checked bit-exactly. PremulSum uses
/// premulFactor(rank).
void extendedInput(DataType t, ReduceOp op, int rank, std::size_t i, std::uint8_t* out);
void extendedExpected(DataType t, ReduceOp op, int n, std::size_t i, std::uint8_t* out);
double premulFactor(DataType t, int rank);

}  // namespace braid::test
