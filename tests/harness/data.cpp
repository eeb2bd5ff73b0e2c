#include "harness/data.hpp"

#include "kernels/reduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace braid::test {

void Buffer::set(std::size_t i, double v) {
  void* p = at(i);
  switch (t_) {
    case DataType::Int8: { auto x = static_cast<std::int8_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 1); break; }
    case DataType::Uint8: { auto x = static_cast<std::uint8_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 1); break; }
    case DataType::Int32: { auto x = static_cast<std::int32_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 4); break; }
    case DataType::Int64: { auto x = static_cast<std::int64_t>(v); std::memcpy(p, &x, 8); break; }
    case DataType::Float16: { auto x = kernels::floatToHalf(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case DataType::BFloat16: { auto x = kernels::floatToBf16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case DataType::Float32: { auto x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case DataType::Float64: std::memcpy(p, &v, 8); break;
  }
}

double Buffer::get(std::size_t i) const {
  const void* p = bytes_.data() + i * dataTypeSize(t_);
  switch (t_) {
    case DataType::Int8: { std::int8_t x; std::memcpy(&x, p, 1); return x; }
    case DataType::Uint8: { std::uint8_t x; std::memcpy(&x, p, 1); return x; }
    case DataType::Int32: { std::int32_t x; std::memcpy(&x, p, 4); return x; }
    case DataType::Int64: { std::int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DataType::Float16: { std::uint16_t x; std::memcpy(&x, p, 2); return kernels::halfToFloat(x); }
    case DataType::BFloat16: { std::uint16_t x; std::memcpy(&x, p, 2); return kernels::bf16ToFloat(x); }
    case DataType::Float32: { float x; std::memcpy(&x, p, 4); return x; }
    case DataType::Float64: { double x; std::memcpy(&x, p, 8); return x; }
  }
  return 0;
}

double roundTrip(DataType t, double v) {
  Buffer b(t, 1);
  b.set(0, v);
  return b.get(0);
}

double testValue(DataType t, ReduceOp op, int rank, std::size_t i) {
  const bool isUnsigned = t == DataType::Uint8;
  if (op == ReduceOp::Prod) {
    // Products of up to 8 ranks of values in {1, 2} (or {-1, 1, 2} when signed) stay exact
    // (2^8 = 256 needs int16+; keep at most three 2s per index for int8/uint8).
    std::size_t k = (i * 7 + static_cast<std::size_t>(rank) * 3) % 11;
    if (rank >= 3) return (isUnsigned || k % 2) ? 1 : -1;
    return k < 4 ? 2 : (isUnsigned || k % 3) ? 1 : -1;
  }
  // Sums of 8 values of magnitude <= 12 stay within int8 and are exact in every float type.
  auto v = static_cast<double>((i * 5 + static_cast<std::size_t>(rank) * 3) % 13);
  if (!isUnsigned && (i + static_cast<std::size_t>(rank)) % 3 == 0) v = -v;
  return v;
}

double expectedReduce(DataType t, ReduceOp op, const std::vector<double>& v) {
  double acc = v.at(0);
  for (std::size_t k = 1; k < v.size(); ++k) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc += v[k]; break;
      case ReduceOp::Prod: acc *= v[k]; break;
      case ReduceOp::Min: acc = std::min(acc, v[k]); break;
      case ReduceOp::Max: acc = std::max(acc, v[k]); break;
    }
  }
  if (op == ReduceOp::Avg) {
    const double n = static_cast<double>(v.size());
    const bool integer = t == DataType::Int8 || t == DataType::Uint8 || t == DataType::Int32 ||
                         t == DataType::Int64;
    acc = integer ? std::trunc(acc / n) : roundTrip(t, acc) / n;
  }
  return roundTrip(t, acc);
}

}  // namespace braid::test
