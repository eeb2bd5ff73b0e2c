// Portable level: plain C++ per element (one "lane"), the fallback on every CPU and the level
// BRAID_KERNEL_ISA=scalar forces. fp16 converts in integer arithmetic (kernel_table.hpp).
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

detail::KernelTable makeTable() {
  detail::KernelTable t{};
  fillRow<IntLane<std::int8_t, std::uint8_t>>(t, DataType::Int8);
  fillRow<IntLane<std::uint8_t, std::uint8_t>>(t, DataType::Uint8);
  fillRow<IntLane<std::int32_t, std::uint32_t>>(t, DataType::Int32);
  fillRow<IntLane<std::int64_t, std::uint64_t>>(t, DataType::Int64);
  fillRow<HalfLane>(t, DataType::Float16);
  fillRow<Bf16Lane>(t, DataType::BFloat16);
  fillRow<PlainFloatLane<float>>(t, DataType::Float32);
  fillRow<PlainFloatLane<double>>(t, DataType::Float64);
  t.divide[static_cast<int>(DataType::Float16)] = &divideLoop<HalfLane>;
  t.divide[static_cast<int>(DataType::BFloat16)] = &divideLoop<Bf16Lane>;
  t.divide[static_cast<int>(DataType::Float32)] = &divideLoop<PlainFloatLane<float>>;
  t.divide[static_cast<int>(DataType::Float64)] = &divideLoop<PlainFloatLane<double>>;
  return t;
}

}  // namespace

const detail::KernelTable& detail::scalarKernels() {
  static const KernelTable table = makeTable();
  return table;
}

}  // namespace braid::kernels
