// Reduction kernels. Each (dtype, op) loop is compiled three times by GCC function
// multi-versioning (x86-64-v4 = AVX-512, x86-64-v3 = AVX2+FMA+F16C, baseline) and the loader
// picks the best clone for the CPU at run time, so one binary runs everywhere at full width.
// Integer sums and products wrap (computed in the unsigned type, as two's complement).
#include "kernels/reduce.hpp"

#include <braid/error.hpp>

#include <cstring>
#include <string>

// TSan cannot run ifunc resolvers (they run before its runtime starts): sanitizer builds set
// BRAID_NO_CLONES and use the baseline loops.
#if defined(__x86_64__) && !defined(BRAID_NO_CLONES)
#define BRAID_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BRAID_CLONES
#endif

namespace braid::kernels {
namespace {

using Half = _Float16;

inline float bf16Load(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t bf16Store(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <class T>
inline T minOf(T x, T y) {
  return y < x ? y : x;
}
template <class T>
inline T maxOf(T x, T y) {
  return x < y ? y : x;
}

// Integer loops: T is the stored type, U its unsigned twin for wrapping arithmetic.
#define BRAID_INT_KERNELS(SUFFIX, T, U)                                                      \
  BRAID_CLONES void sum_##SUFFIX(T* d, const T* a, const T* b, std::size_t n) {              \
    for (std::size_t i = 0; i < n; ++i)                                                      \
      d[i] = static_cast<T>(static_cast<U>(static_cast<U>(a[i]) + static_cast<U>(b[i])));    \
  }                                                                                          \
  BRAID_CLONES void prod_##SUFFIX(T* d, const T* a, const T* b, std::size_t n) {             \
    for (std::size_t i = 0; i < n; ++i)                                                      \
      d[i] = static_cast<T>(static_cast<U>(static_cast<U>(a[i]) * static_cast<U>(b[i])));    \
  }                                                                                          \
  BRAID_CLONES void min_##SUFFIX(T* d, const T* a, const T* b, std::size_t n) {              \
    for (std::size_t i = 0; i < n; ++i) d[i] = minOf(a[i], b[i]);                            \
  }                                                                                          \
  BRAID_CLONES void max_##SUFFIX(T* d, const T* a, const T* b, std::size_t n) {              \
    for (std::size_t i = 0; i < n; ++i) d[i] = maxOf(a[i], b[i]);                            \
  }

BRAID_INT_KERNELS(i8, std::int8_t, std::uint8_t)
BRAID_INT_KERNELS(u8, std::uint8_t, std::uint8_t)
BRAID_INT_KERNELS(i32, std::int32_t, std::uint32_t)
BRAID_INT_KERNELS(i64, std::int64_t, std::uint64_t)

// Float loops: LOAD widens the stored type to the accumulation type, STORE narrows back.
#define BRAID_FLOAT_KERNELS(SUFFIX, T, LOAD, STORE)                                        \
  BRAID_CLONES void sum_##SUFFIX(T* d, const T* a, const T* b, std::size_t n) {            \
    for (std::size_t i = 0; i < n; ++i) d[i] = STORE(LOAD(a[i]) + LOAD(b[i]));             \
  }                                                                                        \
  BRAID_CLONES void prod_##SUFFIX(T* d, const T* a, const T* b, std::size_t n) {           \
    for (std::size_t i = 0; i < n; ++i) d[i] = STORE(LOAD(a[i]) * LOAD(b[i]));             \
  }                                                                                        \
  BRAID_CLONES void min_##SUFFIX(T* d, const T* a, const T* b, std::size_t n) {            \
    for (std::size_t i = 0; i < n; ++i) d[i] = STORE(minOf(LOAD(a[i]), LOAD(b[i])));       \
  }                                                                                        \
  BRAID_CLONES void max_##SUFFIX(T* d, const T* a, const T* b, std::size_t n) {            \
    for (std::size_t i = 0; i < n; ++i) d[i] = STORE(maxOf(LOAD(a[i]), LOAD(b[i])));       \
  }

#define BRAID_ID(x) (x)
#define BRAID_H2F(x) static_cast<float>(x)
#define BRAID_F2H(x) static_cast<Half>(x)
BRAID_FLOAT_KERNELS(f32, float, BRAID_ID, BRAID_ID)
BRAID_FLOAT_KERNELS(f64, double, BRAID_ID, BRAID_ID)
BRAID_FLOAT_KERNELS(f16, Half, BRAID_H2F, BRAID_F2H)
BRAID_FLOAT_KERNELS(bf16, std::uint16_t, bf16Load, bf16Store)

template <class T>
using Loop = void (*)(T*, const T*, const T*, std::size_t);

template <class T>
void run(ReduceOp op, Loop<T> sum, Loop<T> prod, Loop<T> mn, Loop<T> mx, void* d, const void* a,
         const void* b, std::size_t n) {
  Loop<T> f = nullptr;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: f = sum; break;
    case ReduceOp::Prod: f = prod; break;
    case ReduceOp::Min: f = mn; break;
    case ReduceOp::Max: f = mx; break;
  }
  if (f == nullptr)
    throw Error(ErrorCode::InvalidArgument,
                "reduction kernel: unknown op " + std::to_string(static_cast<int>(op)));
  f(static_cast<T*>(d), static_cast<const T*>(a), static_cast<const T*>(b), n);
}

template <class T>
void divideLoop(T* p, std::size_t n, T divisor) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / divisor);
}

}  // namespace

#define BRAID_RUN(SUFFIX, T) \
  run<T>(op, sum_##SUFFIX, prod_##SUFFIX, min_##SUFFIX, max_##SUFFIX, dst, a, b, count)

void reduce3(DataType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  if (count == 0) return;
  switch (t) {
    case DataType::Int8: BRAID_RUN(i8, std::int8_t); return;
    case DataType::Uint8: BRAID_RUN(u8, std::uint8_t); return;
    case DataType::Int32: BRAID_RUN(i32, std::int32_t); return;
    case DataType::Int64: BRAID_RUN(i64, std::int64_t); return;
    case DataType::Float16: BRAID_RUN(f16, Half); return;
    case DataType::BFloat16: BRAID_RUN(bf16, std::uint16_t); return;
    case DataType::Float32: BRAID_RUN(f32, float); return;
    case DataType::Float64: BRAID_RUN(f64, double); return;
  }
  throw Error(ErrorCode::InvalidArgument,
              "reduction kernel: unknown dtype " + std::to_string(static_cast<int>(t)));
}

void reduceInto(DataType t, ReduceOp op, void* dst, const void* src, std::size_t count) {
  reduce3(t, op, dst, dst, src, count);
}

void divideBy(DataType t, void* buf, std::size_t count, int divisor) {
  if (count == 0 || divisor == 1) return;
  switch (t) {
    case DataType::Int8:
      return divideLoop(static_cast<std::int8_t*>(buf), count, static_cast<std::int8_t>(divisor));
    case DataType::Uint8:
      return divideLoop(static_cast<std::uint8_t*>(buf), count,
                        static_cast<std::uint8_t>(divisor));
    case DataType::Int32:
      return divideLoop(static_cast<std::int32_t*>(buf), count, std::int32_t{divisor});
    case DataType::Int64:
      return divideLoop(static_cast<std::int64_t*>(buf), count, std::int64_t{divisor});
    case DataType::Float32:
      return divideLoop(static_cast<float*>(buf), count, static_cast<float>(divisor));
    case DataType::Float64:
      return divideLoop(static_cast<double*>(buf), count, static_cast<double>(divisor));
    case DataType::Float16: {
      auto* p = static_cast<Half*>(buf);
      for (std::size_t i = 0; i < count; ++i)
        p[i] = static_cast<Half>(static_cast<float>(p[i]) / static_cast<float>(divisor));
      return;
    }
    case DataType::BFloat16: {
      auto* p = static_cast<std::uint16_t*>(buf);
      for (std::size_t i = 0; i < count; ++i)
        p[i] = bf16Store(bf16Load(p[i]) / static_cast<float>(divisor));
      return;
    }
  }
  throw Error(ErrorCode::InvalidArgument, "divideBy: unknown dtype");
}

const char* selectedIsa() noexcept {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return "avx512 (x86-64-v4)";
  if (__builtin_cpu_supports("x86-64-v3")) return "avx2+f16c (x86-64-v3)";
  return "baseline (x86-64)";
#else
  return "portable";
#endif
}

float halfToFloat(std::uint16_t h) noexcept {
  Half x;
  std::memcpy(&x, &h, sizeof x);
  return static_cast<float>(x);
}
std::uint16_t floatToHalf(float f) noexcept {
  Half x = static_cast<Half>(f);
  std::uint16_t h;
  std::memcpy(&h, &x, sizeof h);
  return h;
}
float bf16ToFloat(std::uint16_t b) noexcept { return bf16Load(b); }
std::uint16_t floatToBf16(float f) noexcept { return bf16Store(f); }

}  // namespace braid::kernels
