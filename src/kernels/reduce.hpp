// Reduction kernels for every dtype x op, vectorised for the CPU found at run time
// (function multi-versioning: AVX-512, AVX2, baseline x86-64; fp16 via F16C where present).
// fp16 and bf16 are widened to fp32, combined, and rounded back (round-to-nearest-even).
#pragma once

#include <braid/types.hpp>

#include <cstddef>
#include <cstdint>

namespace braid::kernels {

/// dst[i] = dst[i] op src[i]. Avg behaves as Sum (the caller divides afterwards).
void reduceInto(DataType t, ReduceOp op, void* dst, const void* src, std::size_t count);
/// dst[i] = a[i] op b[i]; dst may alias a or b.
void reduce3(DataType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);
/// buf[i] /= divisor (integer division for integer types) — completes Avg.
void divideBy(DataType t, void* buf, std::size_t count, int divisor);
/// The instruction set the dispatcher picked on this CPU: "avx512", "avx2" or "baseline".
const char* selectedIsa() noexcept;

/// fp16 / bf16 scalar conversions (exact inverse for every finite half; RNE when narrowing).
float halfToFloat(std::uint16_t h) noexcept;
std::uint16_t floatToHalf(float f) noexcept;
float bf16ToFloat(std::uint16_t b) noexcept;
std::uint16_t floatToBf16(float f) noexcept;

}  // namespace braid::kernels
