// Element-wise loops shared by every instruction-set level, written once over a "lane traits"
// type K that one level defines per dtype:
//   T (stored element), V (compute vector: fp16/bf16 widen to fp32), kLanes (elements per V),
//   load(const T*) / store(T*, V) (unaligned), kCanStream, stream(T*, V) (aligned to
//   kLanes * sizeof(T)), fence(), add/mul/min/max(V, V), and for floats div(V, V), splat(int).
// Tails (fewer than kLanes elements) go through a zero-padded stack copy and the same vector
// code, so a level's tail rounds exactly like its body.
//
// Include this file only inside a `#pragma GCC target` region of an ISA translation unit (the
// functions take that region's target), after every standard header. Everything here has
// internal linkage so the per-ISA copies never merge at link time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.hpp"

namespace braid::kernels {
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces): one copy per ISA target

struct OpSum {
  template <class K>
  static typename K::V apply(typename K::V a, typename K::V b) {
    return K::add(a, b);
  }
};
struct OpProd {
  template <class K>
  static typename K::V apply(typename K::V a, typename K::V b) {
    return K::mul(a, b);
  }
};
struct OpMin {
  template <class K>
  static typename K::V apply(typename K::V a, typename K::V b) {
    return K::min(a, b);
  }
};
struct OpMax {
  template <class K>
  static typename K::V apply(typename K::V a, typename K::V b) {
    return K::max(a, b);
  }
};

struct OpBAnd {
  template <class K>
  static typename K::V apply(typename K::V a, typename K::V b) {
    return K::band(a, b);
  }
};
struct OpBOr {
  template <class K>
  static typename K::V apply(typename K::V a, typename K::V b) {
    return K::bor(a, b);
  }
};
struct OpBXor {
  template <class K>
  static typename K::V apply(typename K::V a, typename K::V b) {
    return K::bxor(a, b);
  }
};

template <class K, class Op>
inline void binaryTail(typename K::T* d, const typename K::T* a, const typename K::T* b,
                       std::size_t n) {
  using T = typename K::T;
  T x[K::kLanes] = {}, y[K::kLanes] = {}, z[K::kLanes];
  std::memcpy(x, a, n * sizeof(T));
  std::memcpy(y, b, n * sizeof(T));
  K::store(z, Op::template apply<K>(K::load(x), K::load(y)));
  std::memcpy(d, z, n * sizeof(T));
}

template <class K, class Op>
void binaryLoop(void* dv, const void* av, const void* bv, std::size_t n, bool stream) {
  using T = typename K::T;
  using V = typename K::V;
  constexpr std::size_t kL = K::kLanes;
  T* d = static_cast<T*>(dv);
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
  std::size_t i = 0;
  if constexpr (K::kCanStream) {
    constexpr std::uintptr_t kAlign = kL * sizeof(T);
    const auto addr = reinterpret_cast<std::uintptr_t>(d);
    if (stream && addr % sizeof(T) == 0) {
      std::size_t peel = ((kAlign - addr % kAlign) % kAlign) / sizeof(T);
      if (peel > n) peel = n;
      if (peel != 0) binaryTail<K, Op>(d, a, b, peel);
      for (i = peel; i + kL <= n; i += kL)
        K::stream(d + i, Op::template apply<K>(K::load(a + i), K::load(b + i)));
      K::fence();
    }
  }
  for (; i + 4 * kL <= n; i += 4 * kL) {
    V r0 = Op::template apply<K>(K::load(a + i), K::load(b + i));
    V r1 = Op::template apply<K>(K::load(a + i + kL), K::load(b + i + kL));
    V r2 = Op::template apply<K>(K::load(a + i + 2 * kL), K::load(b + i + 2 * kL));
    V r3 = Op::template apply<K>(K::load(a + i + 3 * kL), K::load(b + i + 3 * kL));
    K::store(d + i, r0);
    K::store(d + i + kL, r1);
    K::store(d + i + 2 * kL, r2);
    K::store(d + i + 3 * kL, r3);
  }
  for (; i + kL <= n; i += kL)
    K::store(d + i, Op::template apply<K>(K::load(a + i), K::load(b + i)));
  if (i < n) binaryTail<K, Op>(d + i, a + i, b + i, n - i);
}

template <class K>
void divideLoop(void* pv, std::size_t n, int divisor) {
  using T = typename K::T;
  constexpr std::size_t kL = K::kLanes;
  T* p = static_cast<T*>(pv);
  const typename K::V s = K::splat(divisor);
  std::size_t i = 0;
  for (; i + kL <= n; i += kL) K::store(p + i, K::div(K::load(p + i), s));
  if (i < n) {
    T x[kL] = {};
    std::memcpy(x, p + i, (n - i) * sizeof(T));
    K::store(x, K::div(K::load(x), s));
    std::memcpy(p + i, x, (n - i) * sizeof(T));
  }
}

/// One table row: the four ops of one dtype at this level.
template <class K>
constexpr void fillRow(detail::KernelTable& t, DataType dt) {
  const auto r = static_cast<int>(dt);
  t.binary[r][0] = &binaryLoop<K, OpSum>;
  t.binary[r][1] = &binaryLoop<K, OpProd>;
  t.binary[r][2] = &binaryLoop<K, OpMin>;
  t.binary[r][3] = &binaryLoop<K, OpMax>;
}

/// The bitwise columns of an integer (or Bool) row: K has band/bor/bxor.
template <class K>
constexpr void fillBitwise(detail::KernelTable& t, DataType dt) {
  const auto r = static_cast<int>(dt);
  t.binary[r][4] = &binaryLoop<K, OpBAnd>;
  t.binary[r][5] = &binaryLoop<K, OpBOr>;
  t.binary[r][6] = &binaryLoop<K, OpBXor>;
}

}  // namespace
}  // namespace braid::kernels
