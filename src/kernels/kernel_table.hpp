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

}  // namespace braid::kernels::detail
