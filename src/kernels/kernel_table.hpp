// The dispatch table of one instruction-set level: a function per (dtype, op) and a float
// divide per dtype. Each level's translation unit fills one; reduce.cpp picks among them once.
#pragma once

#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>

namespace braid::kernels::detail {

/// dst[i] = a[i] op b[i] for i < n; dst may equal a or b. stream: write dst with
/// non-temporal stores (then sfence) where the level has them.
using BinaryFn = void (*)(void* dst, const void* a, const void* b, std::size_t n, bool stream);
/// buf[i] /= divisor for floating-point dtypes.
using DivideFn = void (*)(void* buf, std::size_t n, int divisor);

/// Table columns: ReduceOp Sum, Prod, Min, Max (Avg runs as Sum).
inline constexpr int kTableOps = 4;

struct KernelTable {
  BinaryFn binary[kNumDataTypes][kTableOps];
  /// nullptr for integer dtypes: reduce.cpp divides those with a portable loop.
  DivideFn divide[kNumDataTypes];
};

const KernelTable& scalarKernels();
#if defined(__x86_64__)
const KernelTable& avx2Kernels();
const KernelTable& avx512Kernels();
/// The AVX-512 table with the bf16 row (and divide) replaced by AVX512_BF16 kernels.
void overrideWithAvx512Bf16(KernelTable& table);
#endif

/// Scalar bf16 conversions shared by every level's tails and tests: widening is a shift,
/// narrowing rounds to nearest even and keeps NaN a (quiet) NaN.
inline float bf16Widen(std::uint16_t b) noexcept {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}
inline std::uint16_t bf16Narrow(float f) noexcept {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// Scalar fp16 conversions in integer arithmetic (faster than the compiler's soft-float calls
/// on CPUs without F16C). Widening is exact; narrowing rounds to nearest even, overflows to inf,
/// keeps subnormals, and turns every NaN into the quiet NaN 0x7e00 (sign kept).
inline float halfWiden(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t em = h & 0x7fffu;
  std::uint32_t u;
  if (em >= 0x7c00u) {
    u = sign | 0x7f800000u | ((em & 0x3ffu) << 13);  // inf, NaN (payload kept)
  } else if (em >= 0x0400u) {
    u = sign | ((em << 13) + (112u << 23));  // normal: rebias the exponent by 127 - 15
  } else {
    float f = static_cast<float>(em) * 5.9604644775390625e-8f;  // subnormal: em * 2^-24, exact
    __builtin_memcpy(&u, &f, sizeof u);
    u |= sign;
  }
  float out;
  __builtin_memcpy(&out, &u, sizeof out);
  return out;
}
inline std::uint16_t halfNarrow(float f) noexcept {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  std::uint32_t o;
  if (u >= (143u << 23)) {  // >= 2^16 (rounds to inf), inf, NaN
    o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < (113u << 23)) {  // below 2^-14: fp16 subnormal or zero
    // Adding 0.5 aligns the value's bits to the fp16 subnormal grid (2^-24 steps) in the low
    // mantissa bits; the fp32 addition rounds to nearest even (the default mode).
    float a;
    __builtin_memcpy(&a, &u, sizeof a);
    a += 0.5f;
    std::uint32_t b;
    __builtin_memcpy(&b, &a, sizeof b);
    o = b - 0x3f000000u;
  } else {
    const std::uint32_t odd = (u >> 13) & 1u;
    o = (u - (112u << 23) + 0xfffu + odd) >> 13;  // rebias, round to nearest even; may carry to inf
  }
  return static_cast<std::uint16_t>(o | sign);
}

}  // namespace braid::kernels::detail
