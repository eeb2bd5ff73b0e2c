// Reduction kernels against independent references, at every instruction-set level this CPU
// supports (kernels::supportedIsas(): scalar always, AVX2 / AVX-512 / AVX512_BF16 where present):
// every dtype x op, lengths around every vector width (0 .. 1000003), unaligned and mixed
// offsets, dst distinct from / equal to either input, cached and streaming stores. Floats are
// compared bit-exactly with a reference that computes in fp32 (fp64 for fp64) and, for fp16 and
// bf16, rounds once with an encoder written here (nearest representable value by search, ties
// to even, overflow to inf); a NaN result only has to be a NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <braid/braid.hpp>
#include <braid/error.hpp>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/machine.hpp"
#include "harness/data.hpp"
#include "kernels/reduce.hpp"

namespace braid::test {
namespace {

using kernels::Isa;
using kernels::StoreMode;

// ---- independent fp16 / bf16 references ---------------------------------------------------

double halfValue(std::uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0)
    v = std::ldexp(m, -24);
  else if (e == 31)
    v = m != 0 ? NAN : INFINITY;
  else
    v = std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

double bf16Value(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest of the positive patterns 0..infPattern (whose values increase with the pattern; the
// infinity pattern counts as the next power of two, IEEE's overflow rule), ties to the even
// pattern.
template <class ValueFn>
std::uint16_t roundBySearch(double x, std::uint16_t infPattern, double infAsValue, ValueFn value) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  x = std::fabs(x);
  auto val = [&](unsigned p) { return p == infPattern ? infAsValue : value(p); };
  if (x >= infAsValue) return sign | infPattern;
  unsigned lo = 0, hi = infPattern;  // val(lo) <= x < val(hi)
  while (hi - lo > 1) {
    unsigned mid = (lo + hi) / 2;
    (val(mid) <= x ? lo : hi) = mid;
  }
  const double below = x - val(lo), above = val(hi) - x;
  unsigned p = below < above ? lo : above < below ? hi : ((lo & 1) ? hi : lo);
  return static_cast<std::uint16_t>(sign | p);
}

std::uint16_t roundToHalf(float f) {
  if (std::isnan(f)) return 0x7e00;
  return roundBySearch(f, 0x7c00, 65536.0, [](unsigned p) { return halfValue(p); });
}
std::uint16_t roundToBf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  return roundBySearch(f, 0x7f80, std::ldexp(1.0, 128), [](unsigned p) { return bf16Value(p); });
}

// float8: the harness's encoders (harness/data.cpp: search over every pattern).
std::uint8_t roundToE4m3(float f) {
  return encodeE4m3(f);
}
std::uint8_t roundToE5m2(float f) {
  return encodeE5m2(f);
}

TEST(KernelReference, Float8EncodersAgreeOnKnownValues) {
  EXPECT_EQ(roundToE4m3(1.0f), 0x38);
  EXPECT_EQ(roundToE4m3(448.0f), 0x7e);    // the largest finite value
  EXPECT_EQ(roundToE4m3(464.0f), 0x7e);    // tie between 448 and "480" -> even (448)
  EXPECT_EQ(roundToE4m3(465.0f), 0x7f);    // rounds past 448: NaN (no saturation, as torch)
  EXPECT_EQ(roundToE4m3(INFINITY), 0x7f);  // no infinity: NaN
  EXPECT_EQ(roundToE4m3(-INFINITY), 0xff);
  EXPECT_EQ(roundToE4m3(17.0f), 0x58);                  // tie between 16 and 18 -> even (16)
  EXPECT_EQ(roundToE4m3(std::ldexp(1.0f, -9)), 0x01);   // the smallest subnormal
  EXPECT_EQ(roundToE4m3(std::ldexp(1.0f, -10)), 0x00);  // tie -> even (0)
  EXPECT_EQ(roundToE4m3(-0.0f), 0x80);
  EXPECT_EQ(roundToE5m2(1.0f), 0x3c);
  EXPECT_EQ(roundToE5m2(57344.0f), 0x7b);  // the largest finite value
  EXPECT_EQ(roundToE5m2(61439.0f), 0x7b);
  EXPECT_EQ(roundToE5m2(61440.0f), 0x7c);  // tie -> even: infinity
  EXPECT_EQ(roundToE5m2(-INFINITY), 0xfc);
  EXPECT_EQ(roundToE5m2(NAN), 0x7f);
  EXPECT_EQ(roundToE5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(roundToE5m2(5.0f), 0x45);
  EXPECT_EQ(roundToE5m2(9.0f), 0x48);  // tie between 8 and 10 -> even (8)
}

TEST(KernelReference, EncodersAgreeOnKnownValues) {
  EXPECT_EQ(roundToHalf(1.0f), 0x3c00);
  EXPECT_EQ(roundToHalf(2049.0f), 0x6800);           // tie -> even (2048)
  EXPECT_EQ(roundToHalf(2051.0f), 0x6802);           // tie -> even (2052)
  EXPECT_EQ(roundToHalf(65519.0f), 0x7bff);          // below the overflow tie
  EXPECT_EQ(roundToHalf(65520.0f), 0x7c00);          // overflow tie -> inf
  EXPECT_EQ(roundToHalf(std::ldexp(1.0f, -25)), 0);  // tie between 0 and min subnormal -> 0
  EXPECT_EQ(roundToHalf(std::ldexp(3.0f, -25)), 2);  // tie between 1 and 2 (x 2^-24) -> 2
  EXPECT_EQ(roundToHalf(-0.0f), 0x8000);
  EXPECT_EQ(roundToBf16(257.0f), 0x4380);  // 256, tie -> even
  EXPECT_EQ(roundToBf16(259.0f), 0x4382);  // 260
  EXPECT_EQ(roundToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(roundToBf16(std::ldexp(1.0f, -133)), 0x0001);  // min subnormal
  EXPECT_EQ(roundToBf16(std::ldexp(1.0f, -134)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(roundToBf16(std::ldexp(3.0f, -134)), 0x0002);  // tie -> even (2)
  EXPECT_EQ(roundToBf16(3.4e38f), 0x7f80);                 // above max + half ulp -> inf
}

// ---- reference element operation ----------------------------------------------------------

struct Expected {
  std::vector<std::uint8_t> bytes;  // expected bit pattern per element
  std::vector<bool> nan;            // result is NaN: any NaN accepted
};

template <class F>
F refMin(F a, F b) {
  if (std::isnan(b)) return b;
  return b < a ? b : a;
}
template <class F>
F refMax(F a, F b) {
  if (std::isnan(b)) return b;
  return a < b ? b : a;
}

template <class F>
F floatOp(ReduceOp op, F a, F b) {
  switch (op) {
    case ReduceOp::PremulSum:
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return a + b;
    case ReduceOp::Prod:
      return a * b;
    case ReduceOp::Min:
      return refMin(a, b);
    case ReduceOp::Max:
      return refMax(a, b);
    default:
      break;
  }
  return a;
}

template <class T, class U>
T intOp(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::BAnd:
      return static_cast<T>(a & b);
    case ReduceOp::BOr:
      return static_cast<T>(a | b);
    case ReduceOp::BXor:
      return static_cast<T>(a ^ b);
    case ReduceOp::PremulSum:
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::Prod:
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::Min:
      return b < a ? b : a;
    case ReduceOp::Max:
      return a < b ? b : a;
  }
  return a;
}

template <class T>
T loadAt(const std::uint8_t* p, std::size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void storeAt(std::uint8_t* p, std::size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Complex: (re, im) of F; Sum per component, Prod (ac - bd, ad + bc) with every product and
// the difference/sum rounded separately (no fused multiply-add).
template <class F>
void complexElement(ReduceOp op, const std::uint8_t* a, const std::uint8_t* b, std::size_t i,
                    Expected& e) {
  const F ar = loadAt<F>(a, 2 * i), ai = loadAt<F>(a, 2 * i + 1);
  const F br = loadAt<F>(b, 2 * i), bi = loadAt<F>(b, 2 * i + 1);
  F re, im;
  if (op == ReduceOp::Prod) {
    const volatile F ac = ar * br, bd = ai * bi, ad = ar * bi, bc = ai * br;
    re = ac - bd;
    im = ad + bc;
  } else {
    re = ar + br;
    im = ai + bi;
  }
  e.nan[i] = std::isnan(re) || std::isnan(im);
  storeAt(e.bytes.data(), 2 * i, re);
  storeAt(e.bytes.data(), 2 * i + 1, im);
}

// One element: expected bits and NaN-ness of a op b for dtype t.
void expectElement(DataType t, ReduceOp op, const std::uint8_t* a, const std::uint8_t* b,
                   std::size_t i, Expected& e) {
  std::uint8_t* out = e.bytes.data();
  switch (t) {
    case DataType::Int8:
      return storeAt(out, i,
                     intOp<std::int8_t, std::uint8_t>(op, loadAt<std::int8_t>(a, i),
                                                      loadAt<std::int8_t>(b, i)));
    case DataType::Uint8:
      return storeAt(out, i,
                     intOp<std::uint8_t, std::uint8_t>(op, loadAt<std::uint8_t>(a, i),
                                                       loadAt<std::uint8_t>(b, i)));
    case DataType::Int32:
      return storeAt(out, i,
                     intOp<std::int32_t, std::uint32_t>(op, loadAt<std::int32_t>(a, i),
                                                        loadAt<std::int32_t>(b, i)));
    case DataType::Int64:
      return storeAt(out, i,
                     intOp<std::int64_t, std::uint64_t>(op, loadAt<std::int64_t>(a, i),
                                                        loadAt<std::int64_t>(b, i)));
    case DataType::Float32: {
      float r = floatOp(op, loadAt<float>(a, i), loadAt<float>(b, i));
      e.nan[i] = std::isnan(r);
      return storeAt(out, i, r);
    }
    case DataType::Float64: {
      double r = floatOp(op, loadAt<double>(a, i), loadAt<double>(b, i));
      e.nan[i] = std::isnan(r);
      return storeAt(out, i, r);
    }
    case DataType::Float16: {
      // Widening is exact, the op rounds once to fp32, the narrowing once to fp16.
      float r = floatOp(op, static_cast<float>(halfValue(loadAt<std::uint16_t>(a, i))),
                        static_cast<float>(halfValue(loadAt<std::uint16_t>(b, i))));
      e.nan[i] = std::isnan(r);
      return storeAt(out, i, roundToHalf(r));
    }
    case DataType::BFloat16: {
      float r = floatOp(op, static_cast<float>(bf16Value(loadAt<std::uint16_t>(a, i))),
                        static_cast<float>(bf16Value(loadAt<std::uint16_t>(b, i))));
      e.nan[i] = std::isnan(r);
      return storeAt(out, i, roundToBf16(r));
    }
    case DataType::Int16:
      return storeAt(out, i,
                     intOp<std::int16_t, std::uint16_t>(op, loadAt<std::int16_t>(a, i),
                                                        loadAt<std::int16_t>(b, i)));
    case DataType::Uint16:
      return storeAt(out, i,
                     intOp<std::uint16_t, std::uint16_t>(op, loadAt<std::uint16_t>(a, i),
                                                         loadAt<std::uint16_t>(b, i)));
    case DataType::Uint32:
      return storeAt(out, i,
                     intOp<std::uint32_t, std::uint32_t>(op, loadAt<std::uint32_t>(a, i),
                                                         loadAt<std::uint32_t>(b, i)));
    case DataType::Uint64:
      return storeAt(out, i,
                     intOp<std::uint64_t, std::uint64_t>(op, loadAt<std::uint64_t>(a, i),
                                                         loadAt<std::uint64_t>(b, i)));
    case DataType::Bool: {
      // Any non-zero byte is true; results are 0 or 1 (torch: sum/max or, prod/min and).
      const bool x = loadAt<std::uint8_t>(a, i) != 0, y = loadAt<std::uint8_t>(b, i) != 0;
      bool r = false;
      switch (op) {
        case ReduceOp::Prod:
        case ReduceOp::Min:
        case ReduceOp::BAnd:
          r = x && y;
          break;
        case ReduceOp::BXor:
          r = x != y;
          break;
        default:
          r = x || y;
      }
      return storeAt(out, i, static_cast<std::uint8_t>(r ? 1 : 0));
    }
    case DataType::Float8E4M3Fn: {
      float r = floatOp(op, static_cast<float>(e4m3Value(loadAt<std::uint8_t>(a, i))),
                        static_cast<float>(e4m3Value(loadAt<std::uint8_t>(b, i))));
      e.nan[i] = std::isnan(r);
      return storeAt(out, i, roundToE4m3(r));
    }
    case DataType::Float8E5M2: {
      float r = floatOp(op, static_cast<float>(e5m2Value(loadAt<std::uint8_t>(a, i))),
                        static_cast<float>(e5m2Value(loadAt<std::uint8_t>(b, i))));
      e.nan[i] = std::isnan(r);
      return storeAt(out, i, roundToE5m2(r));
    }
    case DataType::Complex64:
      return complexElement<float>(op, a, b, i, e);
    case DataType::Complex128:
      return complexElement<double>(op, a, b, i, e);
  }
}

// ---- inputs: the edge cases of each dtype, paired every way, then random bit patterns --------

std::vector<std::uint64_t> specialPatterns(DataType t) {
  switch (t) {
    case DataType::Float16:
      // 0, -0, min/max subnormal, min normal, 1, 1+ulp, 2^-11 (half an ulp of 1), 3*2^-11,
      // 2048, 1, 3, 2050, 65504 (max), 16, 8, 32, inf, -inf, NaN, -65504, 2^-14+2^-24, 0.5
      return {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x1000, 0x1600,
              0x6800, 0x3c00, 0x4200, 0x6801, 0x7bff, 0x4c00, 0x4800, 0x5000, 0x7c00,
              0xfc00, 0x7e00, 0xfbff, 0x0401, 0x3800, 0x8001, 0x83ff, 0xbc00};
    case DataType::BFloat16:
      // 0, -0, min/max subnormal, min normal, 1, 1+ulp, 2^-8 (half an ulp of 1), 3*2^-8,
      // 256, 1, 3, 258, max, 2^120, inf, -inf, NaN, -max, 0.5, 2^-126 * 1.5
      return {0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x3f80, 0x3f81, 0x3b80, 0x3c40,
              0x4380, 0x3f80, 0x4040, 0x4381, 0x7f7f, 0x7b80, 0x7f80, 0xff80, 0x7fc0,
              0xff7f, 0x3f00, 0x00c0, 0x8001, 0x807f, 0xbf80, 0x0040};
    case DataType::Float32: {
      std::vector<std::uint64_t> v;
      for (float f : {0.0f, -0.0f, 1.0f, -1.0f, 1.5f, 0.1f, 3.0e38f, -3.0e38f, 1.0e-45f,
                      1.17549435e-38f, 5.9e-39f, 16777216.0f, 1.0f + 1.0f / 8388608.0f, INFINITY,
                      -INFINITY, NAN, 2.0f, 1.8e19f, 1.9e19f}) {
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        v.push_back(u);
      }
      return v;
    }
    case DataType::Float64: {
      std::vector<std::uint64_t> v;
      for (double f :
           {0.0, -0.0, 1.0, -1.0, 1.5, 0.1, 1.7e308, -1.7e308, 5e-324, 2.2250738585072014e-308,
            9007199254740992.0, 1.0e154, 1.4e154, static_cast<double>(INFINITY),
            -static_cast<double>(INFINITY), static_cast<double>(NAN)}) {
        std::uint64_t u;
        std::memcpy(&u, &f, 8);
        v.push_back(u);
      }
      return v;
    }
    case DataType::Int8:
    case DataType::Uint8:
      return {0, 1, 2, 0x7f, 0x80, 0xff, 0x10, 0x81};
    case DataType::Int32:
      return {0, 1, 2, 0x7fffffff, 0x80000000, 0xffffffff, 0x10000, 0x8001};
    case DataType::Int64:
    case DataType::Uint64:
      return {0,
              1,
              2,
              0x7fffffffffffffff,
              0x8000000000000000,
              0xffffffffffffffff,
              0x100000000,
              0x80000001,
              0xffffffff};
    case DataType::Int16:
    case DataType::Uint16:
      return {0, 1, 2, 0x7fff, 0x8000, 0xffff, 0x100, 0x8001, 0xff};
    case DataType::Uint32:
      return {0, 1, 2, 0x7fffffff, 0x80000000, 0xffffffff, 0x10000, 0x8001};
    case DataType::Bool:
      return {0, 1, 2, 0xff, 0x80};  // any non-zero byte is true
    case DataType::Float8E4M3Fn:
      // 0, -0, min/max subnormal, min normal, 1, 1+ulp, 448 (max), -448, NaN, -NaN, 16, 1, 2,
      // 256, 0.5, 2^-7 (tie material), 240
      return {0x00, 0x80, 0x01, 0x07, 0x08, 0x38, 0x39, 0x7e, 0xfe, 0x7f,
              0xff, 0x58, 0x38, 0x40, 0x78, 0x30, 0x08, 0x77, 0x81, 0xb8};
    case DataType::Float8E5M2:
      // 0, -0, min/max subnormal, min normal, 1, 1+ulp, 57344 (max), inf, -inf, NaN, 2, 8,
      // 0.5, -1, 32768
      return {0x00, 0x80, 0x01, 0x03, 0x04, 0x3c, 0x3d, 0x7b, 0x7c, 0xfc,
              0x7f, 0x40, 0x48, 0x38, 0xbc, 0x78, 0xfb, 0x81, 0x7d};
    case DataType::Complex64:
    case DataType::Complex128:
      return {};  // makeInputs draws the components as fp32 / fp64 values
  }
  return {};
}

// a[i], b[i]: first every ordered pair of specials, then random bit patterns.
void makeInputs(DataType t, std::size_t n, std::vector<std::uint8_t>& a,
                std::vector<std::uint8_t>& b) {
  const std::size_t es = dataTypeSize(t);
  a.assign(n * es, 0);
  b.assign(n * es, 0);
  std::mt19937_64 rng(0x5eed + static_cast<unsigned>(t) * 7919 + n);
  if (isComplex(t)) {
    // Each component from the fp32 / fp64 inputs (their specials, then random values).
    const DataType part = t == DataType::Complex64 ? DataType::Float32 : DataType::Float64;
    std::vector<std::uint8_t> ra, rb, ia, ib;
    makeInputs(part, n, ra, rb);
    makeInputs(part, n + 1, ia, ib);
    const std::size_t ps = es / 2;
    for (std::size_t i = 0; i < n; ++i) {
      // Imaginary parts from a differently seeded, shifted sequence: every pairing differs.
      const std::size_t j = (i * 7 + 3) % (n + 1);
      std::memcpy(a.data() + i * es, ra.data() + i * ps, ps);
      std::memcpy(a.data() + i * es + ps, ia.data() + j * ps, ps);
      std::memcpy(b.data() + i * es, rb.data() + i * ps, ps);
      std::memcpy(b.data() + i * es + ps, ib.data() + j * ps, ps);
    }
    return;
  }
  const auto sp = specialPatterns(t);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t x, y;
    if (i < sp.size() * sp.size()) {
      x = sp[i / sp.size()];
      y = sp[i % sp.size()];
    } else {
      x = rng();
      y = rng();
      // Floats: half of the random pairs share the exponent's high bits so that sums round
      // (and tie) instead of one operand swallowing the other.
      if ((t == DataType::Float16 || t == DataType::BFloat16) && (i & 1))
        y = (y & 0x81ff) | (x & 0x7e00);
      if (t == DataType::Float32 && (i & 1)) y = (y & 0x80ffffffu) | (x & 0x7f000000u);
      if (t == DataType::Float64 && (i & 1))
        y = (y & 0x801fffffffffffffULL) | (x & 0x7fe0000000000000ULL);
      if (t == DataType::Float8E4M3Fn && (i & 1)) y = (y & 0x87) | (x & 0x70);
      if (t == DataType::Float8E5M2 && (i & 1)) y = (y & 0x83) | (x & 0x78);
    }
    std::memcpy(a.data() + i * es, &x, es);  // little endian: the low bytes
    std::memcpy(b.data() + i * es, &y, es);
  }
}

// ---- the sweep ----------------------------------------------------------------------------

enum class Form { Distinct, DstIsA, DstIsB, Into };
const char* formName(Form f) {
  switch (f) {
    case Form::Distinct:
      return "dst distinct";
    case Form::DstIsA:
      return "dst==a";
    case Form::DstIsB:
      return "dst==b";
    case Form::Into:
      return "reduceInto";
  }
  return "?";
}

// A byte region at a chosen offset from a 64-byte boundary, with guard bytes on both sides.
class Region {
 public:
  Region(std::size_t bytes, std::size_t offset)
      : storage_(bytes + offset + 2 * kGuard + 64, kFill), bytes_(bytes) {
    auto base = reinterpret_cast<std::uintptr_t>(storage_.data()) + kGuard;
    base = (base + 63) & ~std::uintptr_t{63};
    data_ = reinterpret_cast<std::uint8_t*>(base) + offset;
  }
  std::uint8_t* data() { return data_; }
  bool guardsIntact() const {
    for (const std::uint8_t* p = storage_.data(); p < data_; ++p)
      if (*p != kFill) return false;
    for (const std::uint8_t* p = data_ + bytes_; p < storage_.data() + storage_.size(); ++p)
      if (*p != kFill) return false;
    return true;
  }

 private:
  static constexpr std::size_t kGuard = 64;
  static constexpr std::uint8_t kFill = 0xa5;
  std::vector<std::uint8_t> storage_;
  std::uint8_t* data_;
  std::size_t bytes_;
};

std::string describe(Isa isa, DataType t, ReduceOp op, std::size_t n, Form f, StoreMode m,
                     std::size_t offA, std::size_t offB, std::size_t offD) {
  return std::string(kernels::toString(isa)) + " " + toString(t) + " " + toString(op) +
         " n=" + std::to_string(n) + " " + formName(f) +
         (m == StoreMode::Streaming ? " streaming"
          : m == StoreMode::Cached  ? " cached"
                                    : " auto") +
         " offsets a/b/d=" + std::to_string(offA) + "/" + std::to_string(offB) + "/" +
         std::to_string(offD);
}

// A complex element with a NaN part: each NaN part only has to be a NaN, the others exact.
template <class F>
bool complexNanOk(const std::uint8_t* got, const std::uint8_t* want) {
  for (int k = 0; k < 2; ++k) {
    const F g = loadAt<F>(got, k), w = loadAt<F>(want, k);
    if (std::isnan(w) ? !std::isnan(g) : std::memcmp(&g, &w, sizeof(F)) != 0) return false;
  }
  return true;
}

// Returns "" or a description of the first mismatch.
std::string check(DataType t, const std::uint8_t* got, const Expected& e, std::size_t n) {
  const std::size_t es = dataTypeSize(t);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* g = got + i * es;
    const std::uint8_t* x = e.bytes.data() + i * es;
    bool ok;
    if (e.nan[i]) {
      switch (t) {
        case DataType::Float16:
          ok = std::isnan(halfValue(loadAt<std::uint16_t>(got, i)));
          break;
        case DataType::BFloat16:
          ok = std::isnan(bf16Value(loadAt<std::uint16_t>(got, i)));
          break;
        case DataType::Float32:
          ok = std::isnan(loadAt<float>(got, i));
          break;
        case DataType::Float8E4M3Fn:
          ok = std::isnan(e4m3Value(loadAt<std::uint8_t>(got, i)));
          break;
        case DataType::Float8E5M2:
          ok = std::isnan(e5m2Value(loadAt<std::uint8_t>(got, i)));
          break;
        case DataType::Complex64:
          ok = complexNanOk<float>(g, x);
          break;
        case DataType::Complex128:
          ok = complexNanOk<double>(g, x);
          break;
        default:
          ok = std::isnan(loadAt<double>(got, i));
          break;
      }
    } else {
      ok = std::memcmp(g, x, es) == 0;
    }
    if (!ok) {
      std::uint64_t gv = 0, xv = 0;
      std::memcpy(&gv, g, std::min<std::size_t>(es, 8));  // complex128: the real part
      std::memcpy(&xv, x, std::min<std::size_t>(es, 8));
      char buf[128];
      std::snprintf(buf, sizeof buf, "element %zu: got 0x%llx, expected 0x%llx%s", i,
                    static_cast<unsigned long long>(gv), static_cast<unsigned long long>(xv),
                    e.nan[i] ? " (a NaN)" : "");
      return buf;
    }
  }
  return "";
}

void runOne(Isa isa, DataType t, ReduceOp op, std::size_t n, Form form, StoreMode mode,
            std::size_t offA, std::size_t offB, const std::vector<std::uint8_t>& a,
            const std::vector<std::uint8_t>& b, const Expected& e) {
  const std::size_t bytes = n * dataTypeSize(t);
  Region ra(bytes, offA), rb(bytes, offB), rd(bytes, (offA + offB) % 64);
  if (bytes) {
    std::memcpy(ra.data(), a.data(), bytes);
    std::memcpy(rb.data(), b.data(), bytes);
  }
  std::uint8_t* result = nullptr;
  std::size_t offD = 0;
  switch (form) {
    case Form::Distinct:
      kernels::reduce3(isa, t, op, rd.data(), ra.data(), rb.data(), n, mode);
      result = rd.data();
      offD = (offA + offB) % 64;
      break;
    case Form::DstIsA:
      kernels::reduce3(isa, t, op, ra.data(), ra.data(), rb.data(), n, mode);
      result = ra.data();
      offD = offA;
      break;
    case Form::DstIsB:
      kernels::reduce3(isa, t, op, rb.data(), ra.data(), rb.data(), n, mode);
      result = rb.data();
      offD = offB;
      break;
    case Form::Into:
      kernels::reduceInto(isa, t, op, ra.data(), rb.data(), n, mode);
      result = ra.data();
      offD = offA;
      break;
  }
  const std::string what = describe(isa, t, op, n, form, mode, offA, offB, offD);
  ASSERT_TRUE(ra.guardsIntact() && rb.guardsIntact() && rd.guardsIntact())
      << what << ": wrote outside the buffer";
  if (form != Form::DstIsA && form != Form::Into && bytes) {
    ASSERT_EQ(std::memcmp(ra.data(), a.data(), bytes), 0) << what << ": input a changed";
  }
  if (form != Form::DstIsB && bytes) {
    ASSERT_EQ(std::memcmp(rb.data(), b.data(), bytes), 0) << what << ": input b changed";
  }
  const std::string bad = check(t, result, e, n);
  ASSERT_TRUE(bad.empty()) << what << ": " << bad;
}

class KernelSweep : public ::testing::TestWithParam<DataType> {};

TEST_P(KernelSweep, EveryIsaOpLengthOffsetAndAliasingMatchesReference) {
  const DataType t = GetParam();
  const std::size_t es = dataTypeSize(t);
  const auto isas = kernels::supportedIsas();
  std::string levels;
  for (Isa isa : isas) levels += std::string(" ") + kernels::toString(isa);
  RecordProperty("levels", levels);
  std::printf("[ levels   ]%s\n", levels.c_str());
  // Offsets in bytes from a 64-byte boundary: aligned, one element, odd bytes (misaligned
  // elements), mixed.
  std::vector<std::pair<std::size_t, std::size_t>> offsets = {{0, 0}, {es, es}, {0, 3 * es}};
  if (es > 1) offsets.push_back({1, 3});
  const std::size_t lengths[] = {0,  1,  2,  3,   7,   8,   9,   15,  16,  17,   31,   32,     33,
                                 63, 64, 65, 127, 128, 129, 255, 257, 700, 1000, 4099, 1000003};
  std::vector<std::uint8_t> a, b;
  const bool added = std::find(std::begin(kExtendedDataTypes), std::end(kExtendedDataTypes), t) !=
                     std::end(kExtendedDataTypes);
  for (std::size_t n : lengths) {
    makeInputs(t, n, a, b);
    for (ReduceOp op : kEveryReduceOp) {
      // Every op the dtype supports; PremulSum's kernel is Sum (the premultiplication:
      // ScaleMatchesReferenceAtEveryIsa). The added dtypes and ops skip the longest length.
      if (!isSupported(t, op) || op == ReduceOp::PremulSum) continue;
      const bool addedOp = op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
      if ((added || addedOp) && n > 5000) continue;
      Expected e{std::vector<std::uint8_t>(n * es), std::vector<bool>(n, false)};
      for (std::size_t i = 0; i < n; ++i) expectElement(t, op, a.data(), b.data(), i, e);
      const bool big = n > 5000;
      for (Isa isa : isas)
        for (Form form : {Form::Distinct, Form::DstIsA, Form::DstIsB, Form::Into})
          for (StoreMode mode : {StoreMode::Cached, StoreMode::Streaming, StoreMode::Auto}) {
            if (big && (mode == StoreMode::Auto || form == Form::DstIsB)) continue;
            for (std::size_t k = 0; k < offsets.size(); ++k) {
              if (big && k != 0 && k != offsets.size() - 1) continue;
              runOne(isa, t, op, n, form, mode, offsets[k].first, offsets[k].second, a, b, e);
              if (HasFatalFailure()) return;
            }
          }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, KernelSweep, ::testing::ValuesIn(kAllDataTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(toString(info.param));
                         });
INSTANTIATE_TEST_SUITE_P(AddedDtypes, KernelSweep, ::testing::ValuesIn(kExtendedDataTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(toString(info.param));
                         });

// Avg completion: every level divides like p / float(divisor) rounded once (integers: C++
// truncating division).
TEST(Kernels, DivideMatchesReferenceAtEveryIsa) {
  for (int ti = 0; ti < kNumDataTypes; ++ti) {
    const auto t = static_cast<DataType>(ti);
    if (t == DataType::Bool) continue;  // Avg is not defined on bool
    const std::size_t es = dataTypeSize(t);
    for (std::size_t n : {0, 1, 7, 15, 16, 17, 33, 65, 1001}) {
      std::vector<std::uint8_t> a, b;
      makeInputs(t, n, a, b);
      for (int divisor : {1, 2, 3, 7, 200}) {
        Expected e{std::vector<std::uint8_t>(n * es), std::vector<bool>(n, false)};
        for (std::size_t i = 0; i < n; ++i) {
          std::uint8_t* out = e.bytes.data();
          switch (t) {
            case DataType::Int8:
              storeAt(out, i, static_cast<std::int8_t>(loadAt<std::int8_t>(a.data(), i) / divisor));
              break;
            case DataType::Uint8:
              storeAt(out, i,
                      static_cast<std::uint8_t>(loadAt<std::uint8_t>(a.data(), i) / divisor));
              break;
            case DataType::Int32:
              storeAt(out, i,
                      static_cast<std::int32_t>(loadAt<std::int32_t>(a.data(), i) / divisor));
              break;
            case DataType::Int64:
              storeAt(out, i,
                      static_cast<std::int64_t>(loadAt<std::int64_t>(a.data(), i) / divisor));
              break;
            case DataType::Float32: {
              float r = loadAt<float>(a.data(), i) / static_cast<float>(divisor);
              e.nan[i] = std::isnan(r);
              storeAt(out, i, r);
              break;
            }
            case DataType::Float64: {
              double r = loadAt<double>(a.data(), i) / divisor;
              e.nan[i] = std::isnan(r);
              storeAt(out, i, r);
              break;
            }
            case DataType::Float16: {
              float r = static_cast<float>(halfValue(loadAt<std::uint16_t>(a.data(), i))) /
                        static_cast<float>(divisor);
              e.nan[i] = std::isnan(r);
              storeAt(out, i, roundToHalf(r));
              break;
            }
            case DataType::BFloat16: {
              float r = static_cast<float>(bf16Value(loadAt<std::uint16_t>(a.data(), i))) /
                        static_cast<float>(divisor);
              e.nan[i] = std::isnan(r);
              storeAt(out, i, roundToBf16(r));
              break;
            }
            case DataType::Int16:
              storeAt(out, i,
                      static_cast<std::int16_t>(loadAt<std::int16_t>(a.data(), i) / divisor));
              break;
            case DataType::Uint16:
              storeAt(out, i,
                      static_cast<std::uint16_t>(loadAt<std::uint16_t>(a.data(), i) / divisor));
              break;
            case DataType::Uint32:
              storeAt(out, i,
                      static_cast<std::uint32_t>(loadAt<std::uint32_t>(a.data(), i) /
                                                 static_cast<std::uint32_t>(divisor)));
              break;
            case DataType::Uint64:
              storeAt(out, i,
                      static_cast<std::uint64_t>(loadAt<std::uint64_t>(a.data(), i) /
                                                 static_cast<std::uint64_t>(divisor)));
              break;
            case DataType::Float8E4M3Fn: {
              float r = static_cast<float>(e4m3Value(loadAt<std::uint8_t>(a.data(), i))) /
                        static_cast<float>(divisor);
              e.nan[i] = std::isnan(r);
              storeAt(out, i, roundToE4m3(r));
              break;
            }
            case DataType::Float8E5M2: {
              float r = static_cast<float>(e5m2Value(loadAt<std::uint8_t>(a.data(), i))) /
                        static_cast<float>(divisor);
              e.nan[i] = std::isnan(r);
              storeAt(out, i, roundToE5m2(r));
              break;
            }
            case DataType::Complex64:
            case DataType::Complex128: {
              const bool c64 = t == DataType::Complex64;
              for (std::size_t k = 2 * i; k < 2 * i + 2; ++k) {
                if (c64) {
                  float r = loadAt<float>(a.data(), k) / static_cast<float>(divisor);
                  if (std::isnan(r)) e.nan[i] = true;
                  storeAt(out, k, r);
                } else {
                  double r = loadAt<double>(a.data(), k) / divisor;
                  if (std::isnan(r)) e.nan[i] = true;
                  storeAt(out, k, r);
                }
              }
              break;
            }
            case DataType::Bool:
              break;
          }
        }
        for (Isa isa : kernels::supportedIsas()) {
          std::vector<std::uint8_t> buf = a;
          kernels::divideBy(isa, t, buf.data(), n, divisor);
          const std::string bad = check(t, buf.data(), e, n);
          ASSERT_TRUE(bad.empty()) << kernels::toString(isa) << " " << toString(t) << " n=" << n
                                   << " divisor=" << divisor << ": " << bad;
        }
      }
    }
  }
}

TEST(Kernels, IsaSelectionAndNames) {
  for (Isa isa : kernels::kAllIsas) EXPECT_EQ(kernels::parseIsa(kernels::toString(isa)), isa);
  EXPECT_EQ(kernels::parseIsa("AVX2"), Isa::Avx2);
  EXPECT_FALSE(kernels::parseIsa("sse9").has_value());
  EXPECT_TRUE(kernels::isaSupported(Isa::Scalar));
  EXPECT_TRUE(kernels::isaSupported(kernels::bestIsa()));
  // auto takes the highest supported level (src/kernels/reduce.cpp).
  Isa highest = Isa::Scalar;
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16})
    if (kernels::isaSupported(isa)) highest = isa;
  EXPECT_EQ(kernels::bestIsa(), highest);
  const Isa before = kernels::activeIsa();
  for (Isa isa : kernels::kAllIsas) {
    if (kernels::isaSupported(isa)) {
      kernels::setActiveIsa(isa);
      EXPECT_EQ(kernels::activeIsa(), isa);
      EXPECT_STREQ(kernels::selectedIsa(), kernels::toString(isa));
      float x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
      kernels::reduceInto(DataType::Float32, ReduceOp::Sum, x, y, 3);
      EXPECT_EQ(x[2], 9.0f);
    } else {
      try {
        kernels::setActiveIsa(isa);
        ADD_FAILURE() << "unsupported " << kernels::toString(isa) << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find(kernels::toString(isa)), std::string::npos);
      }
      float x = 1, y = 2;
      EXPECT_THROW(kernels::reduceInto(isa, DataType::Float32, ReduceOp::Sum, &x, &y, 1), Error);
    }
  }
  kernels::setActiveIsa(before);
}

TEST(Kernels, CommunicatorAppliesKernelIsaOption) {
  const Isa before = kernels::activeIsa();
  Options o;
  o.kernelIsa = "scalar";
  {
    auto comm = Comm::create(LaunchInfo{}, o);
    EXPECT_EQ(kernels::activeIsa(), Isa::Scalar);
  }
  o.kernelIsa = "sse9";
  try {
    Comm::create(LaunchInfo{}, o);
    ADD_FAILURE() << "kernelIsa 'sse9' accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("BRAID_KERNEL_ISA"), std::string::npos);
  }
  kernels::setActiveIsa(before);
}

TEST(Kernels, MinMaxPropagateNanFromEitherOperand) {
  for (Isa isa : kernels::supportedIsas()) {
    float a[17], b[17], d[17];
    for (int i = 0; i < 17; ++i) a[i] = b[i] = static_cast<float>(i);
    a[3] = NAN;
    b[16] = NAN;
    for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
      kernels::reduce3(isa, DataType::Float32, op, d, a, b, 17);
      EXPECT_TRUE(std::isnan(d[3])) << kernels::toString(isa);
      EXPECT_TRUE(std::isnan(d[16])) << kernels::toString(isa);
      EXPECT_EQ(d[4], 4.0f);
      kernels::reduce3(isa, DataType::Float32, op, d, b, a, 17);
      EXPECT_TRUE(std::isnan(d[3]) && std::isnan(d[16])) << kernels::toString(isa);
    }
  }
}

// ---- the original checks, on the default (best) level --------------------------------------

TEST(Kernels, EveryDtypeAndOpMatchesReference) {
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
      for (std::size_t n : {0, 1, 3, 15, 16, 17, 63, 64, 65, 1000, 4099}) {
        Buffer a(t, n), b(t, n), d(t, n);
        for (std::size_t i = 0; i < n; ++i) {
          a.set(i, testValue(t, op, 1, i));
          b.set(i, testValue(t, op, 2, i));
        }
        kernels::reduce3(t, op, d.data(), a.data(), b.data(), n);
        kernels::reduceInto(t, op, a.data(), b.data(), n);  // aliasing form
        for (std::size_t i = 0; i < n; ++i) {
          double e = expectedReduce(
              t, op, {roundTrip(t, testValue(t, op, 1, i)), roundTrip(t, testValue(t, op, 2, i))});
          ASSERT_EQ(d.get(i), e) << toString(t) << " " << toString(op) << " n=" << n << " i=" << i;
          ASSERT_EQ(a.get(i), e) << toString(t) << " " << toString(op) << " in place";
        }
      }
    }
  }
}

// Whether the element at p is a NaN (complex: either part).
bool isNanElement(DataType t, const std::uint8_t* p) {
  switch (t) {
    case DataType::Float16:
      return std::isnan(halfValue(loadAt<std::uint16_t>(p, 0)));
    case DataType::BFloat16:
      return std::isnan(bf16Value(loadAt<std::uint16_t>(p, 0)));
    case DataType::Float32:
      return std::isnan(loadAt<float>(p, 0));
    case DataType::Float64:
      return std::isnan(loadAt<double>(p, 0));
    case DataType::Float8E4M3Fn:
      return std::isnan(e4m3Value(loadAt<std::uint8_t>(p, 0)));
    case DataType::Float8E5M2:
      return std::isnan(e5m2Value(loadAt<std::uint8_t>(p, 0)));
    case DataType::Complex64:
      return std::isnan(loadAt<float>(p, 0)) || std::isnan(loadAt<float>(p, 1));
    case DataType::Complex128:
      return std::isnan(loadAt<double>(p, 0)) || std::isnan(loadAt<double>(p, 1));
    default:
      return false;
  }
}

// A few elements take the portable level's loop whatever level is active (reduce.cpp): the
// default entry points must give exactly the active level's bits around that boundary, NaNs
// (any NaN) and misaligned buffers included, for every dtype and op.
TEST(Kernels, FewElementsGiveTheActiveLevelsBits) {
  const Isa active = kernels::activeIsa();
  std::mt19937 rng(7);
  std::vector<DataType> types(std::begin(kAllDataTypes), std::end(kAllDataTypes));
  types.insert(types.end(), std::begin(kExtendedDataTypes), std::end(kExtendedDataTypes));
  for (DataType t : types) {
    const std::size_t es = dataTypeSize(t);
    for (ReduceOp op : kEveryReduceOp) {
      if (!isSupported(t, op) || op == ReduceOp::PremulSum) continue;
      for (std::size_t n = 1; n <= 17; ++n) {
        for (int trial = 0; trial < 4; ++trial) {
          // Random bytes (NaNs and infinities among them), one byte off alignment.
          std::vector<std::uint8_t> a(n * es + 1), b(n * es + 1), want(n * es + 1), got(n * es + 1),
              into(n * es + 1);
          for (auto* v : {&a, &b})
            for (auto& x : *v) x = static_cast<std::uint8_t>(rng());
          kernels::reduce3(active, t, op, want.data() + 1, a.data() + 1, b.data() + 1, n,
                           kernels::StoreMode::Cached);
          kernels::reduce3(t, op, got.data() + 1, a.data() + 1, b.data() + 1, n);
          into = a;
          kernels::reduceInto(t, op, into.data() + 1, b.data() + 1, n);
          Expected e{std::vector<std::uint8_t>(want.begin() + 1, want.end()),
                     std::vector<bool>(n, false)};
          for (std::size_t i = 0; i < n; ++i) {
            // Where the active level made a NaN, any NaN will do.
            std::vector<std::uint8_t> one(
                want.begin() + 1 + static_cast<std::ptrdiff_t>(i * es),
                want.begin() + 1 + static_cast<std::ptrdiff_t>((i + 1) * es));
            e.nan[i] = isNanElement(t, one.data());
          }
          const std::string what =
              std::string(toString(t)) + " " + toString(op) + " n=" + std::to_string(n);
          const std::string bad3 = check(t, got.data() + 1, e, n);
          ASSERT_TRUE(bad3.empty()) << what << " reduce3: " << bad3;
          const std::string badInto = check(t, into.data() + 1, e, n);
          ASSERT_TRUE(badInto.empty()) << what << " reduceInto: " << badInto;
        }
      }
    }
  }
}

TEST(Kernels, IntegerSumsWrapLikeTwosComplement) {
  std::int8_t a[3] = {127, -128, 100}, b[3] = {1, -1, 100};
  kernels::reduceInto(DataType::Int8, ReduceOp::Sum, a, b, 3);
  EXPECT_EQ(a[0], -128);
  EXPECT_EQ(a[1], 127);
  EXPECT_EQ(a[2], static_cast<std::int8_t>(200));
}

TEST(Kernels, HalfPrecisionAccumulatesInFloat) {
  // 2048 + 1 is not representable in fp16 (rounds to 2048); the kernel rounds once per step.
  std::uint16_t a = kernels::floatToHalf(2048.0f), b = kernels::floatToHalf(1.0f);
  kernels::reduceInto(DataType::Float16, ReduceOp::Sum, &a, &b, 1);
  EXPECT_EQ(kernels::halfToFloat(a), 2048.0f);
  std::uint16_t x = kernels::floatToBf16(1.5f), y = kernels::floatToBf16(2.25f);
  kernels::reduceInto(DataType::BFloat16, ReduceOp::Prod, &x, &y, 1);
  EXPECT_EQ(kernels::bf16ToFloat(x), 3.375f);
  EXPECT_TRUE(std::isnan(kernels::bf16ToFloat(kernels::floatToBf16(NAN))));
}

TEST(Kernels, ScalarConversionsMatchReferenceForEveryPattern) {
  for (std::uint32_t p = 0; p < 0x10000; ++p) {
    const auto h = static_cast<std::uint16_t>(p);
    const double hv = halfValue(h), bv = bf16Value(h);
    if (std::isnan(hv)) {
      EXPECT_TRUE(std::isnan(kernels::halfToFloat(h)));
    } else {
      ASSERT_EQ(kernels::halfToFloat(h), hv) << p;
      ASSERT_EQ(kernels::floatToHalf(static_cast<float>(hv)), h) << p;
    }
    if (!std::isnan(bv)) {
      ASSERT_EQ(kernels::floatToBf16(static_cast<float>(bv)), h) << p;
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(kernels::floatToHalf(f), roundToHalf(f)) << std::hex << u;
    ASSERT_EQ(kernels::floatToBf16(f), roundToBf16(f)) << std::hex << u;
  }
}

TEST(Kernels, DivideCompletesAverage) {
  std::int32_t i[2] = {7, -7};
  kernels::divideBy(DataType::Int32, i, 2, 2);
  EXPECT_EQ(i[0], 3);
  EXPECT_EQ(i[1], -3);
  float f[1] = {7.0f};
  kernels::divideBy(DataType::Float32, f, 1, 2);
  EXPECT_EQ(f[0], 3.5f);
  std::int8_t c[1] = {100};
  kernels::divideBy(DataType::Int8, c, 1, 200);  // divisor beyond int8
  EXPECT_EQ(c[0], 0);
}

// Non-temporal stores start at half the last-level cache: the one BRAID_LLC_SIZE sets (the test
// main applies it), else machine::lastLevelCache()'s bounded reading (machine_test covers the
// readings VMs give).
TEST(Kernels, StreamingThresholdIsHalfTheBoundedCache) {
  // The rule without a measured threshold: a communicator created earlier in this process (when
  // the whole binary runs in one process, as scripts/test_machines.sh does) may have applied
  // the machine profile's (CopyProfile.KernelsTakeTheMeasuredThresholdBelowTheOverride covers that
  // order).
  kernels::setMeasuredStreamingThreshold(0);
  const std::size_t threshold = kernels::streamingThresholdBytes();
  const std::size_t forced = Options::fromEnv().llcBytes;
  if (forced != 0)
    EXPECT_EQ(threshold, forced / 2) << "BRAID_LLC_SIZE";
  else
    EXPECT_EQ(threshold, machine::lastLevelCache().bytes / 2);
  EXPECT_GE(threshold, forced != 0 ? forced / 2 : machine::kMinLlcBytes / 2);
  EXPECT_LE(threshold, forced != 0 ? forced / 2 : machine::kMaxLlcBytes / 2);
}

// Run with BRAID_KERNEL_ISA (as .ci/run does), every call without an explicit level must use
// that level, so a forced run never passes on another one.
TEST(Kernels, RunsAtTheLevelTheEnvironmentForces) {
  const std::string forced = Options::fromEnv().kernelIsa;
  if (forced.empty())
    GTEST_SKIP() << "BRAID_KERNEL_ISA is not set; the default level is "
                 << kernels::toString(kernels::bestIsa());
  EXPECT_EQ(std::string(kernels::selectedIsa()), forced);
  EXPECT_EQ(kernels::activeIsa(), *kernels::parseIsa(forced));
}

// Every level by name: tested here, or skipped saying the CPU lacks it, so that a log shows
// which levels a machine did not test (the sweep above silently covers only supported ones).
class KernelLevel : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelLevel, IsTestedHereOrSkippedByName) {
  const Isa isa = GetParam();
  if (!kernels::isaSupported(isa))
    GTEST_SKIP() << "this CPU lacks " << kernels::toString(isa)
                 << ": its kernels are not tested on this machine";
  constexpr std::size_t n = 1031;
  std::vector<float> a(n), b(n), d(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(3 * i + 1);
  }
  kernels::reduce3(isa, DataType::Float32, ReduceOp::Sum, d.data(), a.data(), b.data(), n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], static_cast<float>(4 * i + 1)) << i;
}

INSTANTIATE_TEST_SUITE_P(Levels, KernelLevel, ::testing::ValuesIn(kernels::kAllIsas),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(kernels::toString(info.param));
                         });

// PremulSum's premultiplication: x * factor in the compute type (fp32 for the 16- and 8-bit
// floats, fp32, complex64; fp64 for fp64, complex128), rounded once; integers wrap.
template <class T, class U>
void scaleIntRef(const std::vector<std::uint8_t>& a, std::size_t n, double f, Expected& e) {
  const auto k = static_cast<U>(static_cast<std::int64_t>(f));
  for (std::size_t i = 0; i < n; ++i)
    storeAt(e.bytes.data(), i,
            static_cast<T>(static_cast<U>(static_cast<U>(loadAt<T>(a.data(), i)) * k)));
}

TEST(Kernels, ScaleMatchesReferenceAtEveryIsa) {
  for (int ti = 0; ti < kNumDataTypes; ++ti) {
    const auto t = static_cast<DataType>(ti);
    if (t == DataType::Bool) continue;
    const std::size_t es = dataTypeSize(t);
    const std::vector<double> factors =
        isInteger(t) ? std::vector<double>{0, 1, -1, 3, -2, 1099511627776.0}
                     : std::vector<double>{1, -2, 0.1, 0.3333333333333333, 1e-3, 3e5};
    for (std::size_t n : {0, 1, 7, 16, 33, 1001}) {
      std::vector<std::uint8_t> a, b;
      makeInputs(t, n, a, b);
      for (double f : factors) {
        Expected e{std::vector<std::uint8_t>(n * es), std::vector<bool>(n, false)};
        const auto ff = static_cast<float>(f);
        switch (t) {
          case DataType::Int8:
            scaleIntRef<std::int8_t, std::uint8_t>(a, n, f, e);
            break;
          case DataType::Uint8:
            scaleIntRef<std::uint8_t, std::uint8_t>(a, n, f, e);
            break;
          case DataType::Int16:
            scaleIntRef<std::int16_t, std::uint16_t>(a, n, f, e);
            break;
          case DataType::Uint16:
            scaleIntRef<std::uint16_t, std::uint16_t>(a, n, f, e);
            break;
          case DataType::Int32:
            scaleIntRef<std::int32_t, std::uint32_t>(a, n, f, e);
            break;
          case DataType::Uint32:
            scaleIntRef<std::uint32_t, std::uint32_t>(a, n, f, e);
            break;
          case DataType::Int64:
            scaleIntRef<std::int64_t, std::uint64_t>(a, n, f, e);
            break;
          case DataType::Uint64:
            scaleIntRef<std::uint64_t, std::uint64_t>(a, n, f, e);
            break;
          default:
            for (std::size_t i = 0; i < n; ++i) {
              std::uint8_t* out = e.bytes.data();
              float r = 0;
              switch (t) {
                case DataType::Float16:
                  r = static_cast<float>(halfValue(loadAt<std::uint16_t>(a.data(), i))) * ff;
                  storeAt(out, i, roundToHalf(r));
                  break;
                case DataType::BFloat16:
                  r = static_cast<float>(bf16Value(loadAt<std::uint16_t>(a.data(), i))) * ff;
                  storeAt(out, i, roundToBf16(r));
                  break;
                case DataType::Float8E4M3Fn:
                  r = static_cast<float>(e4m3Value(loadAt<std::uint8_t>(a.data(), i))) * ff;
                  storeAt(out, i, roundToE4m3(r));
                  break;
                case DataType::Float8E5M2:
                  r = static_cast<float>(e5m2Value(loadAt<std::uint8_t>(a.data(), i))) * ff;
                  storeAt(out, i, roundToE5m2(r));
                  break;
                case DataType::Float32:
                  r = loadAt<float>(a.data(), i) * ff;
                  storeAt(out, i, r);
                  break;
                case DataType::Float64: {
                  const double d = loadAt<double>(a.data(), i) * f;
                  storeAt(out, i, d);
                  r = static_cast<float>(d);
                  break;
                }
                case DataType::Complex64:
                  for (std::size_t k = 2 * i; k < 2 * i + 2; ++k) {
                    const float c = loadAt<float>(a.data(), k) * ff;
                    if (std::isnan(c)) r = NAN;
                    storeAt(out, k, c);
                  }
                  break;
                case DataType::Complex128:
                  for (std::size_t k = 2 * i; k < 2 * i + 2; ++k) {
                    const double c = loadAt<double>(a.data(), k) * f;
                    if (std::isnan(c)) r = NAN;
                    storeAt(out, k, c);
                  }
                  break;
                default:
                  break;
              }
              e.nan[i] = std::isnan(r);
            }
        }
        for (Isa isa : kernels::supportedIsas()) {
          std::vector<std::uint8_t> dst(n * es + 1, 0xa5), inplace = a;
          kernels::scaleBy(isa, t, dst.data(), a.data(), n, f);
          std::string bad = check(t, dst.data(), e, n);
          ASSERT_TRUE(bad.empty()) << kernels::toString(isa) << " " << toString(t) << " n=" << n
                                   << " factor=" << f << ": " << bad;
          ASSERT_EQ(dst[n * es], 0xa5) << "wrote past the end";
          kernels::scaleBy(isa, t, inplace.data(), inplace.data(), n, f);
          bad = check(t, inplace.data(), e, n);
          ASSERT_TRUE(bad.empty()) << kernels::toString(isa) << " " << toString(t)
                                   << " in place n=" << n << " factor=" << f << ": " << bad;
        }
      }
    }
  }
}

TEST(Kernels, Float8ConversionsMatchReferenceForEveryPattern) {
  for (unsigned p = 0; p < 256; ++p) {
    const auto b = static_cast<std::uint8_t>(p);
    const double v4 = e4m3Value(b), v5 = e5m2Value(b);
    if (std::isnan(v4)) {
      EXPECT_TRUE(std::isnan(kernels::e4m3ToFloat(b))) << p;
    } else {
      ASSERT_EQ(kernels::e4m3ToFloat(b), v4) << p;
      ASSERT_EQ(kernels::floatToE4m3(static_cast<float>(v4)), b) << p;
    }
    if (std::isnan(v5)) {
      EXPECT_TRUE(std::isnan(kernels::e5m2ToFloat(b))) << p;
    } else {
      ASSERT_EQ(kernels::e5m2ToFloat(b), v5) << p;
      ASSERT_EQ(kernels::floatToE5m2(static_cast<float>(v5)), b) << p;
    }
  }
  // Every fp32 exponent, random mantissas and signs, NaN included: torch's NaN rules are exact
  // (0x7f with the input's sign).
  std::mt19937 rng(11);
  for (int i = 0; i < 300000; ++i) {
    std::uint32_t u = rng();
    if (i < 512) u = (u & 0x807fffffu) | (static_cast<std::uint32_t>(i % 256) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    ASSERT_EQ(kernels::floatToE4m3(f), roundToE4m3(f)) << std::hex << u;
    ASSERT_EQ(kernels::floatToE5m2(f), roundToE5m2(f)) << std::hex << u;
  }
  // Midpoints and their neighbours, where rounding decides.
  for (unsigned p = 0; p < 0x7f; ++p) {
    for (double (*val)(std::uint8_t) : {&e4m3Value, &e5m2Value}) {
      const double lo = val(static_cast<std::uint8_t>(p)),
                   hi = val(static_cast<std::uint8_t>(p + 1));
      if (std::isnan(lo) || std::isnan(hi) || std::isinf(hi)) continue;
      const float mid = static_cast<float>((lo + hi) / 2);
      for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid}) {
        ASSERT_EQ(kernels::floatToE4m3(f), roundToE4m3(f)) << f;
        ASSERT_EQ(kernels::floatToE5m2(f), roundToE5m2(f)) << f;
      }
    }
  }
}

TEST(Kernels, Float8AccumulatesInFloatAndRoundsOncePerStep) {
  for (Isa isa : kernels::supportedIsas()) {
    // e4m3: 16 + 1 = 17 is a tie between 16 and 18: rounds to 16 at each step.
    std::uint8_t a = roundToE4m3(16.0f), one = roundToE4m3(1.0f);
    kernels::reduceInto(isa, DataType::Float8E4M3Fn, ReduceOp::Sum, &a, &one, 1);
    kernels::reduceInto(isa, DataType::Float8E4M3Fn, ReduceOp::Sum, &a, &one, 1);
    EXPECT_EQ(kernels::e4m3ToFloat(a), 16.0f) << kernels::toString(isa);
    // 1.125 * 1.125 = 1.265625 is exact in fp32, rounds to 1.25 once.
    std::uint8_t x = roundToE4m3(1.125f), y = roundToE4m3(1.125f);
    kernels::reduceInto(isa, DataType::Float8E4M3Fn, ReduceOp::Prod, &x, &y, 1);
    EXPECT_EQ(kernels::e4m3ToFloat(x), 1.25f);
    // Overflow: e4m3fn has no infinity (NaN), e5m2 saturates to infinity.
    std::uint8_t big = roundToE4m3(448.0f), big2 = roundToE4m3(448.0f);
    kernels::reduceInto(isa, DataType::Float8E4M3Fn, ReduceOp::Sum, &big, &big2, 1);
    EXPECT_EQ(big, 0x7f);
    std::uint8_t h = roundToE5m2(57344.0f), h2 = roundToE5m2(57344.0f);
    kernels::reduceInto(isa, DataType::Float8E5M2, ReduceOp::Sum, &h, &h2, 1);
    EXPECT_EQ(h, 0x7c);
  }
}

TEST(Kernels, EveryLevelHasAKernelForEverySupportedPairAndNoOther) {
  for (Isa isa : kernels::supportedIsas()) {
    for (int ti = 0; ti < kNumDataTypes; ++ti) {
      const auto t = static_cast<DataType>(ti);
      for (ReduceOp op : kEveryReduceOp) {
        EXPECT_EQ(kernels::hasKernel(isa, t, op), isSupported(t, op))
            << kernels::toString(isa) << " " << toString(t) << " " << toString(op);
        if (!isSupported(t, op) && op != ReduceOp::Avg && op != ReduceOp::PremulSum) {
          std::uint8_t buf[32] = {};
          try {
            kernels::reduce3(isa, t, op, buf, buf, buf, 1);
            ADD_FAILURE() << toString(t) << " " << toString(op) << " accepted";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(toString(op)), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(toString(t)), std::string::npos) << e.what();
          }
        }
      }
    }
  }
  std::uint8_t x = 1;
  EXPECT_THROW(kernels::scaleBy(DataType::Bool, &x, &x, 1, 2.0), Error);
  EXPECT_THROW(kernels::divideBy(DataType::Bool, &x, 1, 2), Error);
}

TEST(Kernels, ReportsTheIsaItDispatchesTo) {
  EXPECT_NE(std::string(kernels::selectedIsa()).size(), 0u);
}

}  // namespace
}  // namespace braid::test
