// Portable level: plain C++ per element (one "lane"), the fallback on every CPU and the level
// BRAID_KERNEL_ISA=scalar forces, and the source of every entry a vector level does not
// vectorise (they start from this table). fp16 and float8 convert in integer arithmetic
// (kernel_table.hpp).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.hpp"
#include "kernels/simd_loop.hpp"

namespace braid::kernels {
namespace {

// Float Min/Max: NaN in either operand gives NaN (b's when b is NaN), as every vector level.
template <class F>
F floatMin(F a, F b) {
  if (b != b) return b;
  return b < a ? b : a;
}
template <class F>
F floatMax(F a, F b) {
  if (b != b) return b;
  return a < b ? b : a;
}

// Loads and stores through memcpy: user buffers may be misaligned for their dtype (the
// communicator passes them as they come), and a plain dereference would be undefined
// behaviour there (UBSan reports it). Compilers turn these into single moves.
template <class T>
T loadAny(const T* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void storeAny(T* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

struct ScalarLane {
  static constexpr std::size_t kLanes = 1;
  static constexpr bool kCanStream = false;
  static void fence() {}
};

// Integers: arithmetic in the unsigned twin U so sums and products wrap (two's complement).
template <class TT, class U>
struct IntLane : ScalarLane {
  using T = TT;
  using V = TT;
  static V load(const T* p) { return loadAny(p); }
  static void store(T* p, V v) { storeAny(p, v); }
  static void stream(T* p, V v) { storeAny(p, v); }
  static V add(V a, V b) {
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
  static V mul(V a, V b) {
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  }
  static V min(V a, V b) { return b < a ? b : a; }
  static V max(V a, V b) { return a < b ? b : a; }
  static V band(V a, V b) { return static_cast<T>(a & b); }
  static V bor(V a, V b) { return static_cast<T>(a | b); }
  static V bxor(V a, V b) { return static_cast<T>(a ^ b); }
  // PremulSum: an integral factor (validation checks it), converted modulo 2^bits.
  static V scaleBy(V v, double factor) {
    return mul(v, static_cast<T>(static_cast<U>(static_cast<std::int64_t>(factor))));
  }
};

// Bool: one byte, any non-zero byte is true; results are 0 or 1. Sum and Max are logical or,
// Prod and Min logical and (torch's semantics), the bitwise ops act on the 0/1 values.
struct BoolLane : ScalarLane {
  using T = std::uint8_t;
  using V = std::uint8_t;
  static V load(const T* p) { return *p != 0 ? 1 : 0; }
  static void store(T* p, V v) { *p = v; }
  static void stream(T* p, V v) { *p = v; }
  static V add(V a, V b) { return a | b; }
  static V mul(V a, V b) { return a & b; }
  static V min(V a, V b) { return a & b; }
  static V max(V a, V b) { return a | b; }
  static V band(V a, V b) { return a & b; }
  static V bor(V a, V b) { return a | b; }
  static V bxor(V a, V b) { return a ^ b; }
};

template <class TT, class F>
struct FloatOps : ScalarLane {
  using T = TT;
  using V = F;
  static V add(V a, V b) { return a + b; }
  static V mul(V a, V b) { return a * b; }
  static V min(V a, V b) { return floatMin(a, b); }
  static V max(V a, V b) { return floatMax(a, b); }
  static V div(V a, V b) { return a / b; }
  static V splat(int d) { return static_cast<V>(d); }
  static V scaleBy(V v, double factor) { return v * static_cast<V>(factor); }
};

template <class F>
struct PlainFloatLane : FloatOps<F, F> {
  static F load(const F* p) { return loadAny(p); }
  static void store(F* p, F v) { storeAny(p, v); }
  static void stream(F* p, F v) { storeAny(p, v); }
};

struct HalfLane : FloatOps<std::uint16_t, float> {
  static float load(const std::uint16_t* p) { return detail::halfWiden(loadAny(p)); }
  static void store(std::uint16_t* p, float v) { storeAny(p, detail::halfNarrow(v)); }
  static void stream(std::uint16_t* p, float v) { store(p, v); }
};

struct Bf16Lane : FloatOps<std::uint16_t, float> {
  static float load(const std::uint16_t* p) { return detail::bf16Widen(loadAny(p)); }
  static void store(std::uint16_t* p, float v) { storeAny(p, detail::bf16Narrow(v)); }
  static void stream(std::uint16_t* p, float v) { store(p, v); }
};

struct E4m3Lane : FloatOps<std::uint8_t, float> {
  static float load(const std::uint8_t* p) { return detail::e4m3Widen(*p); }
  static void store(std::uint8_t* p, float v) { *p = detail::e4m3Narrow(v); }
  static void stream(std::uint8_t* p, float v) { store(p, v); }
};

struct E5m2Lane : FloatOps<std::uint8_t, float> {
  static float load(const std::uint8_t* p) { return detail::e5m2Widen(*p); }
  static void store(std::uint8_t* p, float v) { *p = detail::e5m2Narrow(v); }
  static void stream(std::uint8_t* p, float v) { store(p, v); }
};

// Complex: (re, im) pairs. Sum is per component; Prod is the textbook product
// (ac - bd, ad + bc) in the component type, no special infinity/NaN recovery (as torch's CPU
// kernels); Avg divides both components; PremulSum scales both by the real factor.
template <class F>
struct Cx {
  F re, im;
};
template <class F>
struct ComplexLane : ScalarLane {
  using T = Cx<F>;
  using V = Cx<F>;
  static V load(const T* p) { return loadAny(p); }
  static void store(T* p, V v) { storeAny(p, v); }
  static void stream(T* p, V v) { storeAny(p, v); }
  static V add(V a, V b) { return {a.re + b.re, a.im + b.im}; }
  static V mul(V a, V b) {
    // Two roundings per component, never fused: every level and the tests' expectation agree.
    const volatile F ac = a.re * b.re, bd = a.im * b.im, ad = a.re * b.im, bc = a.im * b.re;
    return {ac - bd, ad + bc};
  }
  static V div(V a, V b) { return {a.re / b.re, a.im / b.re}; }
  static V splat(int d) { return {static_cast<F>(d), F{0}}; }
  static V scaleBy(V v, double factor) {
    const F f = static_cast<F>(factor);
    return {v.re * f, v.im * f};
  }
};

template <class K>
void scaleLoop(void* dv, const void* sv, std::size_t n, double factor) {
  auto* d = static_cast<typename K::T*>(dv);
  const auto* s = static_cast<const typename K::T*>(sv);
  for (std::size_t i = 0; i < n; ++i) K::store(d + i, K::scaleBy(K::load(s + i), factor));
}

template <class K>
void fillInt(detail::KernelTable& t, DataType dt) {
  fillRow<K>(t, dt);
  fillBitwise<K>(t, dt);
  t.scale[static_cast<int>(dt)] = &scaleLoop<K>;
}

template <class K>
void fillFloat(detail::KernelTable& t, DataType dt) {
  fillRow<K>(t, dt);
  t.divide[static_cast<int>(dt)] = &divideLoop<K>;
  t.scale[static_cast<int>(dt)] = &scaleLoop<K>;
}

template <class K>
void fillComplex(detail::KernelTable& t, DataType dt) {
  const auto r = static_cast<int>(dt);
  t.binary[r][0] = &binaryLoop<K, OpSum>;
  t.binary[r][1] = &binaryLoop<K, OpProd>;
  t.divide[r] = &divideLoop<K>;
  t.scale[r] = &scaleLoop<K>;
}

detail::KernelTable makeTable() {
  detail::KernelTable t{};
  fillInt<IntLane<std::int8_t, std::uint8_t>>(t, DataType::Int8);
  fillInt<IntLane<std::uint8_t, std::uint8_t>>(t, DataType::Uint8);
  fillInt<IntLane<std::int16_t, std::uint16_t>>(t, DataType::Int16);
  fillInt<IntLane<std::uint16_t, std::uint16_t>>(t, DataType::Uint16);
  fillInt<IntLane<std::int32_t, std::uint32_t>>(t, DataType::Int32);
  fillInt<IntLane<std::uint32_t, std::uint32_t>>(t, DataType::Uint32);
  fillInt<IntLane<std::int64_t, std::uint64_t>>(t, DataType::Int64);
  fillInt<IntLane<std::uint64_t, std::uint64_t>>(t, DataType::Uint64);
  fillRow<BoolLane>(t, DataType::Bool);
  fillBitwise<BoolLane>(t, DataType::Bool);
  fillFloat<HalfLane>(t, DataType::Float16);
  fillFloat<Bf16Lane>(t, DataType::BFloat16);
  fillFloat<PlainFloatLane<float>>(t, DataType::Float32);
  fillFloat<PlainFloatLane<double>>(t, DataType::Float64);
  fillFloat<E4m3Lane>(t, DataType::Float8E4M3Fn);
  fillFloat<E5m2Lane>(t, DataType::Float8E5M2);
  fillComplex<ComplexLane<float>>(t, DataType::Complex64);
  fillComplex<ComplexLane<double>>(t, DataType::Complex128);
  return t;
}

}  // namespace

const detail::KernelTable& detail::scalarKernels() {
  static const KernelTable table = makeTable();
  return table;
}

}  // namespace braid::kernels
