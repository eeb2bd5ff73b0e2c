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
/// buf[i] /= divisor for floating-point and complex dtypes.
using DivideFn = void (*)(void* buf, std::size_t n, int divisor);
/// dst[i] = src[i] * factor (PremulSum's premultiplication; dst may equal src).
using ScaleFn = void (*)(void* dst, const void* src, std::size_t n, double factor);

/// Table columns: ReduceOp Sum, Prod, Min, Max, BAnd, BOr, BXor (Avg and PremulSum run as Sum).
inline constexpr int kTableOps = 7;

struct KernelTable {
  /// nullptr where the (dtype, op) is not supported (isSupported): validation rejects those.
  BinaryFn binary[kNumDataTypes][kTableOps];
  /// nullptr for integer dtypes and Bool: reduce.cpp divides integers with a portable loop.
  DivideFn divide[kNumDataTypes];
  /// nullptr for Bool. The vector levels use the scalar level's loops.
  ScaleFn scale[kNumDataTypes];
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

/// float8_e4m3fn (torch's rules): 4 exponent bits (bias 7), 3 mantissa bits, no infinity;
/// 0x7f and 0xff are NaN. Widening is exact.
inline float e4m3Widen(std::uint8_t b) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t em = b & 0x7fu;
  std::uint32_t u;
  if (em == 0x7fu) {
    u = sign | 0x7fc00000u;
  } else if (em >= 0x08u) {
    u = sign | ((em << 20) + (120u << 23));  // normal: rebias the exponent by 127 - 7
  } else {
    float f = static_cast<float>(em) * 0.001953125f;  // subnormal: em * 2^-9, exact
    __builtin_memcpy(&u, &f, sizeof u);
    u |= sign;
  }
  float out;
  __builtin_memcpy(&out, &u, sizeof out);
  return out;
}
/// Rounds to nearest even. As torch's conversion: there is no saturation, a magnitude that
/// rounds above 448 (from 464 exclusive), infinity and NaN all give NaN (0x7f, sign kept).
inline std::uint8_t e4m3Narrow(float f) noexcept {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7fffffffu;
  std::uint32_t o;
  if (u >= 0x43f00000u) {  // >= 480 (the first step above 448), inf, NaN
    o = 0x7fu;
  } else if (u < (121u << 23)) {  // below 2^-6: subnormal or zero
    // 2^14's ulp is 2^-9, the e4m3 subnormal step: the fp32 addition rounds to that grid (RNE).
    float a;
    __builtin_memcpy(&a, &u, sizeof a);
    a += 16384.0f;
    std::uint32_t b;
    __builtin_memcpy(&b, &a, sizeof b);
    o = b - 0x46800000u;
  } else {
    const std::uint32_t odd = (u >> 20) & 1u;
    o = (u - (120u << 23) + 0x7ffffu + odd) >> 20;  // may round up to 0x7f: NaN, as torch
  }
  return static_cast<std::uint8_t>(o | sign);
}
/// float8_e5m2: the high byte of an fp16 (5 exponent bits, 2 mantissa bits, infinities).
inline float e5m2Widen(std::uint8_t b) noexcept {
  return halfWiden(static_cast<std::uint16_t>(b << 8));
}
/// Rounds to nearest even, overflows to infinity (from 61440, the midpoint above 57344), every
/// NaN becomes 0x7f (sign kept), as torch's conversion.
inline std::uint8_t e5m2Narrow(float f) noexcept {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7fffffffu;
  std::uint32_t o;
  if (u >= (143u << 23)) {  // >= 2^16: inf; NaN
    o = u > 0x7f800000u ? 0x7fu : 0x7cu;
  } else if (u < (113u << 23)) {  // below 2^-14: subnormal (2^-16 steps, 128's ulp) or zero
    float a;
    __builtin_memcpy(&a, &u, sizeof a);
    a += 128.0f;
    std::uint32_t b;
    __builtin_memcpy(&b, &a, sizeof b);
    o = b - 0x43000000u;
  } else {
    const std::uint32_t odd = (u >> 21) & 1u;
    o = (u - (112u << 23) + 0xfffffu + odd) >> 21;  // may carry into 0x7c: inf
  }
  return static_cast<std::uint8_t>(o | sign);
}

}  // namespace braid::kernels::detail
