// braid public API: element types, reduction operations, collective kinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace braid {

/// Element type of a buffer. fp16 is IEEE binary16, bf16 is bfloat16.
enum class DataType : std::uint8_t {
  Int8,
  Uint8,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64
};

/// Reduction operation. Avg is a sum divided by the communicator size (integer division for
/// integer types). fp16 and bf16 are accumulated in fp32 within each reduction step.
enum class ReduceOp : std::uint8_t { Sum, Prod, Min, Max, Avg };

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

inline constexpr int kNumDataTypes = 8;
inline constexpr int kNumReduceOps = 5;

/// Size in bytes of one element; 0 for a value outside the enum. Inline: every call of every
/// operation asks several times.
constexpr std::size_t dataTypeSize(DataType t) noexcept {
  constexpr std::uint8_t kSizes[kNumDataTypes] = {1, 1, 4, 8, 2, 2, 4, 8};
  const auto i = static_cast<unsigned>(t);
  return i < kNumDataTypes ? kSizes[i] : 0;
}
const char* toString(DataType t) noexcept;
const char* toString(ReduceOp op) noexcept;
const char* toString(Collective c) noexcept;
/// Accepts "fp32", "float32", "float", "f32", "int8", "uint8", "int32", "int", "int64",
/// "fp16", "half", "bf16", "bfloat16", "fp64", "double".
std::optional<DataType> parseDataType(std::string_view s) noexcept;
std::optional<ReduceOp> parseReduceOp(std::string_view s) noexcept;
std::optional<Collective> parseCollective(std::string_view s) noexcept;
constexpr bool isValid(DataType t) noexcept {
  return dataTypeSize(t) != 0;
}
constexpr bool isValid(ReduceOp op) noexcept {
  return static_cast<unsigned>(op) < kNumReduceOps;
}

}  // namespace braid
