// AVX2 level (AVX2 + F16C): 256-bit vectors. fp16 is widened with vcvtph2ps and narrowed with
// vcvtps2ph (round to nearest even); bf16 is widened by a 16-bit shift and narrowed with
// integer round-to-nearest-even (NaN kept quiet). Every function here carries the target
// attribute of the pragma below, so the library still loads and runs on CPUs without AVX2:
// reduce.cpp calls into this table only after checking the CPU.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

#include "kernels/simd_loop.hpp"

namespace braid::kernels {
namespace {

struct Avx2Lane {
  static constexpr bool kCanStream = true;
  static void fence() { _mm_sfence(); }
};

// fp32 compute shared by fp32, fp16 and bf16. Min/Max: NaN in either operand gives NaN (b's
// when b is NaN): vminps(b, a) returns a when either is NaN, then b is blended in where b is NaN.
struct Ps8 : Avx2Lane {
  using V = __m256;
  static constexpr std::size_t kLanes = 8;
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V min(V a, V b) {
    return _mm256_blendv_ps(_mm256_min_ps(b, a), b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
  }
  static V max(V a, V b) {
    return _mm256_blendv_ps(_mm256_max_ps(b, a), b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
  }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V splat(int d) { return _mm256_set1_ps(static_cast<float>(d)); }
};

struct F32 : Ps8 {
  using T = float;
  static V load(const T* p) { return _mm256_loadu_ps(p); }
  static void store(T* p, V v) { _mm256_storeu_ps(p, v); }
  static void stream(T* p, V v) { _mm256_stream_ps(p, v); }
};

struct F16 : Ps8 {
  using T = std::uint16_t;
  static V load(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m128i narrow(V v) {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static void store(T* p, V v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow(v)); }
  static void stream(T* p, V v) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), narrow(v)); }
};

// bf16 works on 16 elements at once as two fp32 vectors: vpunpckl/hwd with zero widens (the
// bf16 bits land in the high half of each 32-bit lane) and vpackusdw of the two halves narrows,
// both per 128-bit lane, so the element order comes back without a cross-lane permute.
struct Ps8x2 {
  __m256 lo, hi;
};

struct Bf16 : Avx2Lane {
  using T = std::uint16_t;
  using V = Ps8x2;
  static constexpr std::size_t kLanes = 16;
  static V load(const T* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i zero = _mm256_setzero_si256();
    return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x)),
            _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x))};
  }
  // Round to nearest even on the bit pattern: add 0x7fff plus the lowest kept bit, keep the
  // high half (in the low 16 bits of the lane). NaN lanes keep their payload's high half with
  // the quiet bit set.
  static __m256i round32(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    r = _mm256_srli_epi32(r, 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  }
  static __m256i narrow(V v) { return _mm256_packus_epi32(round32(v.lo), round32(v.hi)); }
  static void store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
  static void stream(T* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
  static V add(V a, V b) { return {Ps8::add(a.lo, b.lo), Ps8::add(a.hi, b.hi)}; }
  static V mul(V a, V b) { return {Ps8::mul(a.lo, b.lo), Ps8::mul(a.hi, b.hi)}; }
  static V min(V a, V b) { return {Ps8::min(a.lo, b.lo), Ps8::min(a.hi, b.hi)}; }
  static V max(V a, V b) { return {Ps8::max(a.lo, b.lo), Ps8::max(a.hi, b.hi)}; }
  static V div(V a, V b) { return {Ps8::div(a.lo, b.lo), Ps8::div(a.hi, b.hi)}; }
  static V splat(int d) { return {Ps8::splat(d), Ps8::splat(d)}; }
};

struct F64 : Avx2Lane {
  using T = double;
  using V = __m256d;
  static constexpr std::size_t kLanes = 4;
  static V load(const T* p) { return _mm256_loadu_pd(p); }
  static void store(T* p, V v) { _mm256_storeu_pd(p, v); }
  static void stream(T* p, V v) { _mm256_stream_pd(p, v); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
  static V min(V a, V b) {
    return _mm256_blendv_pd(_mm256_min_pd(b, a), b, _mm256_cmp_pd(b, b, _CMP_UNORD_Q));
  }
  static V max(V a, V b) {
    return _mm256_blendv_pd(_mm256_max_pd(b, a), b, _mm256_cmp_pd(b, b, _CMP_UNORD_Q));
  }
  static V div(V a, V b) { return _mm256_div_pd(a, b); }
  static V splat(int d) { return _mm256_set1_pd(static_cast<double>(d)); }
};

template <class TT>
struct IntLane : Avx2Lane {
  using T = TT;
  using V = __m256i;
  static constexpr std::size_t kLanes = 32 / sizeof(T);
  static V load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static void stream(T* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v); }
  static V band(V a, V b) { return _mm256_and_si256(a, b); }
  static V bor(V a, V b) { return _mm256_or_si256(a, b); }
  static V bxor(V a, V b) { return _mm256_xor_si256(a, b); }
};

// 8-bit products: vpmullw on the even and the odd bytes (the low byte of a 16-bit product
// depends only on the operands' low bytes), recombined.
inline __m256i mulBytes(__m256i a, __m256i b) {
  const __m256i even = _mm256_mullo_epi16(a, b);
  const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00ff)),
                         _mm256_slli_epi16(odd, 8));
}

struct I8 : IntLane<std::int8_t> {
  static V add(V a, V b) { return _mm256_add_epi8(a, b); }
  static V mul(V a, V b) { return mulBytes(a, b); }
  static V min(V a, V b) { return _mm256_min_epi8(a, b); }
  static V max(V a, V b) { return _mm256_max_epi8(a, b); }
};
struct U8 : IntLane<std::uint8_t> {
  static V add(V a, V b) { return _mm256_add_epi8(a, b); }
  static V mul(V a, V b) { return mulBytes(a, b); }
  static V min(V a, V b) { return _mm256_min_epu8(a, b); }
  static V max(V a, V b) { return _mm256_max_epu8(a, b); }
};
struct I32 : IntLane<std::int32_t> {
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }
  static V mul(V a, V b) { return _mm256_mullo_epi32(a, b); }
  static V min(V a, V b) { return _mm256_min_epi32(a, b); }
  static V max(V a, V b) { return _mm256_max_epi32(a, b); }
};
struct I64 : IntLane<std::int64_t> {
  static V add(V a, V b) { return _mm256_add_epi64(a, b); }
  // No 64-bit vpmullq in AVX2: lo*lo + ((hi_a*lo_b + lo_a*hi_b) << 32), mod 2^64.
  static V mul(V a, V b) {
    const __m256i lo = _mm256_mul_epu32(a, b);
    const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                           _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
  }
  static V min(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
  static V max(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a)); }
};
struct I16 : IntLane<std::int16_t> {
  static V add(V a, V b) { return _mm256_add_epi16(a, b); }
  static V mul(V a, V b) { return _mm256_mullo_epi16(a, b); }
  static V min(V a, V b) { return _mm256_min_epi16(a, b); }
  static V max(V a, V b) { return _mm256_max_epi16(a, b); }
};
struct U16 : IntLane<std::uint16_t> {
  static V add(V a, V b) { return _mm256_add_epi16(a, b); }
  static V mul(V a, V b) { return _mm256_mullo_epi16(a, b); }
  static V min(V a, V b) { return _mm256_min_epu16(a, b); }
  static V max(V a, V b) { return _mm256_max_epu16(a, b); }
};
struct U32 : IntLane<std::uint32_t> {
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }
  static V mul(V a, V b) { return _mm256_mullo_epi32(a, b); }
  static V min(V a, V b) { return _mm256_min_epu32(a, b); }
  static V max(V a, V b) { return _mm256_max_epu32(a, b); }
};
// Unsigned 64-bit order: the signed comparison of both operands with the sign bit flipped.
struct U64 : IntLane<std::uint64_t> {
  static V add(V a, V b) { return _mm256_add_epi64(a, b); }
  static V mul(V a, V b) { return I64::mul(a, b); }
  static V gt(V a, V b) {
    const __m256i flip = _mm256_set1_epi64x(static_cast<long long>(0x8000000000000000ull));
    return _mm256_cmpgt_epi64(_mm256_xor_si256(a, flip), _mm256_xor_si256(b, flip));
  }
  static V min(V a, V b) { return _mm256_blendv_epi8(a, b, gt(a, b)); }
  static V max(V a, V b) { return _mm256_blendv_epi8(a, b, gt(b, a)); }
};

template <class K>
void fillInt(detail::KernelTable& t, DataType dt) {
  fillRow<K>(t, dt);
  fillBitwise<K>(t, dt);
}

detail::KernelTable makeTable() {
  // Bool, float8, complex and every scale entry stay the scalar level's.
  detail::KernelTable t = detail::scalarKernels();
  fillInt<I8>(t, DataType::Int8);
  fillInt<U8>(t, DataType::Uint8);
  fillInt<I16>(t, DataType::Int16);
  fillInt<U16>(t, DataType::Uint16);
  fillInt<I32>(t, DataType::Int32);
  fillInt<U32>(t, DataType::Uint32);
  fillInt<I64>(t, DataType::Int64);
  fillInt<U64>(t, DataType::Uint64);
  fillRow<F16>(t, DataType::Float16);
  fillRow<Bf16>(t, DataType::BFloat16);
  fillRow<F32>(t, DataType::Float32);
  fillRow<F64>(t, DataType::Float64);
  t.divide[static_cast<int>(DataType::Float16)] = &divideLoop<F16>;
  t.divide[static_cast<int>(DataType::BFloat16)] = &divideLoop<Bf16>;
  t.divide[static_cast<int>(DataType::Float32)] = &divideLoop<F32>;
  t.divide[static_cast<int>(DataType::Float64)] = &divideLoop<F64>;
  return t;
}

}  // namespace
}  // namespace braid::kernels

#pragma GCC pop_options

namespace braid::kernels {
// makeTable is compiled for AVX2 too: reduce.cpp calls this only after checking the CPU.
const detail::KernelTable& detail::avx2Kernels() {
  static const KernelTable table = makeTable();
  return table;
}
}  // namespace braid::kernels

#endif  // __x86_64__
