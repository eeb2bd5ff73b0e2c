// AVX-512 lane traits (F, BW, DQ, VL): 512-bit vectors for every dtype, used by
// reduce_avx512.cpp and reduce_avx512bf16.cpp. Include only inside a `#pragma GCC target`
// region that enables at least avx512f,avx512bw,avx512dq,avx512vl, after <immintrin.h>.
// Internal linkage for the same reason as simd_loop.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::kernels {
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces): one copy per ISA target

struct Avx512Lane {
  static constexpr bool kCanStream = true;
  static void fence() { _mm_sfence(); }
};

// fp32 compute shared by fp32, fp16 and bf16. Min/Max: NaN in either operand gives NaN (b's
// when b is NaN): vminps(b, a) returns a when either is NaN, then b is moved in where b is NaN.
struct Ps16 : Avx512Lane {
  using V = __m512;
  static constexpr std::size_t kLanes = 16;
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V min(V a, V b) {
    return _mm512_mask_mov_ps(_mm512_min_ps(b, a), _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), b);
  }
  static V max(V a, V b) {
    return _mm512_mask_mov_ps(_mm512_max_ps(b, a), _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), b);
  }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V splat(int d) { return _mm512_set1_ps(static_cast<float>(d)); }
};

struct F32x16 : Ps16 {
  using T = float;
  static V load(const T* p) { return _mm512_loadu_ps(p); }
  static void store(T* p, V v) { _mm512_storeu_ps(p, v); }
  static void stream(T* p, V v) { _mm512_stream_ps(p, v); }
};

struct F16x16 : Ps16 {
  using T = std::uint16_t;
  static V load(const T* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m256i narrow(V v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static void store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
  static void stream(T* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
};

// bf16 without AVX512_BF16: widen by a 16-bit shift, narrow with integer round-to-nearest-even
// (add 0x7fff plus the lowest kept bit, keep the high half); NaN lanes keep their payload's
// high half with the quiet bit set.
struct Bf16x16 : Ps16 {
  using T = std::uint16_t;
  static V load(const T* p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static __m256i narrow(V v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    r = _mm512_srli_epi32(r, 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                              _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
  }
  static void store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
  static void stream(T* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
};

struct F64x8 : Avx512Lane {
  using T = double;
  using V = __m512d;
  static constexpr std::size_t kLanes = 8;
  static V load(const T* p) { return _mm512_loadu_pd(p); }
  static void store(T* p, V v) { _mm512_storeu_pd(p, v); }
  static void stream(T* p, V v) { _mm512_stream_pd(p, v); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
  static V min(V a, V b) {
    return _mm512_mask_mov_pd(_mm512_min_pd(b, a), _mm512_cmp_pd_mask(b, b, _CMP_UNORD_Q), b);
  }
  static V max(V a, V b) {
    return _mm512_mask_mov_pd(_mm512_max_pd(b, a), _mm512_cmp_pd_mask(b, b, _CMP_UNORD_Q), b);
  }
  static V div(V a, V b) { return _mm512_div_pd(a, b); }
  static V splat(int d) { return _mm512_set1_pd(static_cast<double>(d)); }
};

template <class TT>
struct IntLane512 : Avx512Lane {
  using T = TT;
  using V = __m512i;
  static constexpr std::size_t kLanes = 64 / sizeof(T);
  static V load(const T* p) { return _mm512_loadu_si512(p); }
  static void store(T* p, V v) { _mm512_storeu_si512(p, v); }
  static void stream(T* p, V v) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v); }
  static V band(V a, V b) { return _mm512_and_si512(a, b); }
  static V bor(V a, V b) { return _mm512_or_si512(a, b); }
  static V bxor(V a, V b) { return _mm512_xor_si512(a, b); }
};

// 8-bit products: vpmullw on the even and the odd bytes, recombined (as the AVX2 level).
inline __m512i mulBytes512(__m512i a, __m512i b) {
  const __m512i even = _mm512_mullo_epi16(a, b);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0x00ff)),
                         _mm512_slli_epi16(odd, 8));
}

struct I8x64 : IntLane512<std::int8_t> {
  static V add(V a, V b) { return _mm512_add_epi8(a, b); }
  static V mul(V a, V b) { return mulBytes512(a, b); }
  static V min(V a, V b) { return _mm512_min_epi8(a, b); }
  static V max(V a, V b) { return _mm512_max_epi8(a, b); }
};
struct U8x64 : IntLane512<std::uint8_t> {
  static V add(V a, V b) { return _mm512_add_epi8(a, b); }
  static V mul(V a, V b) { return mulBytes512(a, b); }
  static V min(V a, V b) { return _mm512_min_epu8(a, b); }
  static V max(V a, V b) { return _mm512_max_epu8(a, b); }
};
struct I32x16 : IntLane512<std::int32_t> {
  static V add(V a, V b) { return _mm512_add_epi32(a, b); }
  static V mul(V a, V b) { return _mm512_mullo_epi32(a, b); }
  static V min(V a, V b) { return _mm512_min_epi32(a, b); }
  static V max(V a, V b) { return _mm512_max_epi32(a, b); }
};
struct I64x8 : IntLane512<std::int64_t> {
  static V add(V a, V b) { return _mm512_add_epi64(a, b); }
  static V mul(V a, V b) { return _mm512_mullo_epi64(a, b); }
  static V min(V a, V b) { return _mm512_min_epi64(a, b); }
  static V max(V a, V b) { return _mm512_max_epi64(a, b); }
};
struct I16x32 : IntLane512<std::int16_t> {
  static V add(V a, V b) { return _mm512_add_epi16(a, b); }
  static V mul(V a, V b) { return _mm512_mullo_epi16(a, b); }
  static V min(V a, V b) { return _mm512_min_epi16(a, b); }
  static V max(V a, V b) { return _mm512_max_epi16(a, b); }
};
struct U16x32 : IntLane512<std::uint16_t> {
  static V add(V a, V b) { return _mm512_add_epi16(a, b); }
  static V mul(V a, V b) { return _mm512_mullo_epi16(a, b); }
  static V min(V a, V b) { return _mm512_min_epu16(a, b); }
  static V max(V a, V b) { return _mm512_max_epu16(a, b); }
};
struct U32x16 : IntLane512<std::uint32_t> {
  static V add(V a, V b) { return _mm512_add_epi32(a, b); }
  static V mul(V a, V b) { return _mm512_mullo_epi32(a, b); }
  static V min(V a, V b) { return _mm512_min_epu32(a, b); }
  static V max(V a, V b) { return _mm512_max_epu32(a, b); }
};
struct U64x8 : IntLane512<std::uint64_t> {
  static V add(V a, V b) { return _mm512_add_epi64(a, b); }
  static V mul(V a, V b) { return _mm512_mullo_epi64(a, b); }
  static V min(V a, V b) { return _mm512_min_epu64(a, b); }
  static V max(V a, V b) { return _mm512_max_epu64(a, b); }
};

}  // namespace
}  // namespace braid::kernels
