// braid public API: element types, reduction operations, collective kinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace braid {

/// Element type of a buffer. fp16 is IEEE binary16, bf16 is bfloat16. Bool is one byte, 0 or 1
/// (any non-zero byte reads as true). Float8E4M3Fn and Float8E5M2 are the OCP 8-bit floats as
/// torch stores them (float8_e4m3fn: no infinity, largest 448, NaN 0x7f/0xff; float8_e5m2:
/// IEEE-like with infinities). Complex64 and Complex128 are (real, imaginary) pairs of fp32 and
/// fp64, as std::complex<float/double> lays them out. New values are appended: the numeric
/// values of the first eight never change.
enum class DataType : std::uint8_t {
  Int8,
  Uint8,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Bool,
  Int16,
  Uint16,
  Uint32,
  Uint64,
  Float8E4M3Fn,
  Float8E5M2,
  Complex64,
  Complex128
};

/// Reduction operation. Avg is a sum divided by the communicator size (integer division for
/// integer types). fp16, bf16 and the float8 types are accumulated in fp32 within each
/// reduction step and rounded once per step. Bool: Sum and Max are logical or, Prod and Min
/// logical and. BAnd, BOr and BXor are bitwise (integer types and Bool only). PremulSum is the
/// sum of every rank's input multiplied by that rank's factor (pass it as a Reduction, e.g.
/// braid::premulSum(0.25)); a bare ReduceOp::PremulSum has the factor 1. Which op fits which
/// dtype: isSupported(DataType, ReduceOp); other combinations are Error(InvalidArgument).
enum class ReduceOp : std::uint8_t { Sum, Prod, Min, Max, Avg, BAnd, BOr, BXor, PremulSum };

/// The reduction a collective takes: an op and, for PremulSum, this rank's factor. Implicit
/// from a ReduceOp, so `allreduce(..., ReduceOp::Sum)` reads as before.
struct Reduction {
  ReduceOp op = ReduceOp::Sum;
  /// PremulSum only (ignored otherwise): every element of this rank's input is multiplied by
  /// it before the sum, in the dtype's compute type (fp32 for fp16/bf16/float8/fp32/complex64,
  /// fp64 for fp64/complex128) and rounded to the dtype once; for integer dtypes it must be an
  /// integral value in int64's range (the product wraps like Prod). Ranks may pass different
  /// factors.
  double factor = 1.0;
  constexpr Reduction(ReduceOp o) noexcept : op(o) {}  // NOLINT(google-explicit-constructor)
  constexpr Reduction(ReduceOp o, double f) noexcept : op(o), factor(f) {}
};
/// The PremulSum reduction with this rank's factor (torch's ReduceOp.PREMUL_SUM,
/// ncclRedOpCreatePreMulSum).
constexpr Reduction premulSum(double factor) noexcept {
  return {ReduceOp::PremulSum, factor};
}

/// Where a buffer lives. Only host memory exists today; kernels and transports dispatch on it.
enum class MemoryKind : std::uint8_t { Host };

/// Every operation a communicator runs (used in errors, logs, fingerprints and benchmarks).
enum class Collective : std::uint8_t {
  Allreduce,
  Reduce,
  Broadcast,
  Allgather,
  Allgatherv,
  ReduceScatter,
  ReduceScatterv,
  Gather,
  Scatter,
  Alltoall,
  Alltoallv,
  Barrier,
  Send,
  Recv,
};

inline constexpr int kNumDataTypes = 17;
inline constexpr int kNumReduceOps = 9;

/// Size in bytes of one element; 0 for a value outside the enum. Inline: every call of every
/// operation asks several times.
constexpr std::size_t dataTypeSize(DataType t) noexcept {
  constexpr std::uint8_t kSizes[kNumDataTypes] = {1, 1, 4, 8, 2, 2, 4, 8, 1,
                                                  2, 2, 4, 8, 1, 1, 8, 16};
  const auto i = static_cast<unsigned>(t);
  return i < kNumDataTypes ? kSizes[i] : 0;
}
const char* toString(DataType t) noexcept;
const char* toString(ReduceOp op) noexcept;
const char* toString(Collective c) noexcept;
/// Accepts "fp32", "float32", "float", "f32", "int8", "uint8", "int32", "int", "int64",
/// "fp16", "half", "bf16", "bfloat16", "fp64", "double", "bool", "int16", "uint16", "uint32",
/// "uint64", "fp8e4m3" ("float8_e4m3fn"), "fp8e5m2" ("float8_e5m2"), "complex64" ("c64"),
/// "complex128" ("c128").
std::optional<DataType> parseDataType(std::string_view s) noexcept;
std::optional<ReduceOp> parseReduceOp(std::string_view s) noexcept;
std::optional<Collective> parseCollective(std::string_view s) noexcept;
constexpr bool isValid(DataType t) noexcept {
  return dataTypeSize(t) != 0;
}
constexpr bool isValid(ReduceOp op) noexcept {
  return static_cast<unsigned>(op) < kNumReduceOps;
}
/// Integer dtypes (signed and unsigned; not Bool).
constexpr bool isInteger(DataType t) noexcept {
  return t == DataType::Int8 || t == DataType::Uint8 || t == DataType::Int16 ||
         t == DataType::Uint16 || t == DataType::Int32 || t == DataType::Uint32 ||
         t == DataType::Int64 || t == DataType::Uint64;
}
constexpr bool isComplex(DataType t) noexcept {
  return t == DataType::Complex64 || t == DataType::Complex128;
}
/// Whether reductions with `op` are defined on `t` (both valid): bitwise ops on integers and
/// Bool only; Min and Max not on complex; Avg and PremulSum not on Bool.
constexpr bool isSupported(DataType t, ReduceOp op) noexcept {
  if (!isValid(t) || !isValid(op)) return false;
  switch (op) {
    case ReduceOp::BAnd:
    case ReduceOp::BOr:
    case ReduceOp::BXor:
      return isInteger(t) || t == DataType::Bool;
    case ReduceOp::Min:
    case ReduceOp::Max:
      return !isComplex(t);
    case ReduceOp::Avg:
    case ReduceOp::PremulSum:
      return t != DataType::Bool;
    default:
      return true;
  }
}

}  // namespace braid
