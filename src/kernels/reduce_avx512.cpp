// AVX-512 level (F, BW, DQ, VL): 512-bit vectors for every dtype; fp16 through the AVX-512F
// vcvtph2ps/vcvtps2ph (round to nearest even), bf16 with integer round-to-nearest-even
// (avx512_traits.hpp). Compiled for that target by the pragma below only; reduce.cpp calls
// into it after checking the CPU, so the library still runs on CPUs without AVX-512.
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
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,f16c")

#include "kernels/avx512_traits.hpp"
#include "kernels/simd_loop.hpp"

namespace braid::kernels {
namespace {

template <class K>
void fillInt(detail::KernelTable& t, DataType dt) {
  fillRow<K>(t, dt);
  fillBitwise<K>(t, dt);
}

detail::KernelTable makeTable() {
  // Bool, float8, complex and every scale entry stay the scalar level's.
  detail::KernelTable t = detail::scalarKernels();
  fillInt<I8x64>(t, DataType::Int8);
  fillInt<U8x64>(t, DataType::Uint8);
  fillInt<I16x32>(t, DataType::Int16);
  fillInt<U16x32>(t, DataType::Uint16);
  fillInt<I32x16>(t, DataType::Int32);
  fillInt<U32x16>(t, DataType::Uint32);
  fillInt<I64x8>(t, DataType::Int64);
  fillInt<U64x8>(t, DataType::Uint64);
  fillRow<F16x16>(t, DataType::Float16);
  fillRow<Bf16x16>(t, DataType::BFloat16);
  fillRow<F32x16>(t, DataType::Float32);
  fillRow<F64x8>(t, DataType::Float64);
  t.divide[static_cast<int>(DataType::Float16)] = &divideLoop<F16x16>;
  t.divide[static_cast<int>(DataType::BFloat16)] = &divideLoop<Bf16x16>;
  t.divide[static_cast<int>(DataType::Float32)] = &divideLoop<F32x16>;
  t.divide[static_cast<int>(DataType::Float64)] = &divideLoop<F64x8>;
  return t;
}

}  // namespace
}  // namespace braid::kernels

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace braid::kernels {
// makeTable is compiled for AVX-512 too: reduce.cpp calls this only after checking the CPU.
const detail::KernelTable& detail::avx512Kernels() {
  static const KernelTable table = makeTable();
  return table;
}
}  // namespace braid::kernels

#endif  // __x86_64__
