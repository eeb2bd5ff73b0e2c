// AVX512_BF16 level: the AVX-512 level with bf16 narrowed by vcvtneps2bf16 (hardware
// round-to-nearest-even, NaN kept quiet). That instruction treats fp32 denormal inputs as zero,
// which the integer path does not: a vector holding a denormal (rare: results below 2^-126)
// takes those lanes from the integer path, so the level stays bit-identical to the others.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_* used as pass-through).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,f16c")

#include "kernels/avx512_traits.hpp"
#include "kernels/simd_loop.hpp"

namespace braid::kernels {
namespace {

struct Bf16Hw : Bf16x16 {
  static __m256i narrow(V v) {
    __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 denormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)) &
                               _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff));
    if (denormal != 0) h = _mm256_mask_mov_epi16(h, denormal, Bf16x16::narrow(v));
    return h;
  }
  static void store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
  static void stream(T* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
};

void fillBf16(detail::KernelTable& t) {
  fillRow<Bf16Hw>(t, DataType::BFloat16);
  t.divide[static_cast<int>(DataType::BFloat16)] = &divideLoop<Bf16Hw>;
}

}  // namespace
}  // namespace braid::kernels

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace braid::kernels {
// Compiled for AVX512_BF16 too: reduce.cpp calls this only after checking the CPU.
void detail::overrideWithAvx512Bf16(KernelTable& table) {
  fillBf16(table);
}
}  // namespace braid::kernels

#endif  // __x86_64__
