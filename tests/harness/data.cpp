#include "harness/data.hpp"

#include "kernels/reduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace braid::test {

void Buffer::set(std::size_t i, double v) {
  void* p = at(i);
  switch (t_) {
    case DataType::Int8: { auto x = static_cast<std::int8_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 1); break; }
    case DataType::Uint8: { auto x = static_cast<std::uint8_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 1); break; }
    case DataType::Int32: { auto x = static_cast<std::int32_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 4); break; }
    case DataType::Int64: { auto x = static_cast<std::int64_t>(v); std::memcpy(p, &x, 8); break; }
    case DataType::Float16: { auto x = kernels::floatToHalf(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case DataType::BFloat16: { auto x = kernels::floatToBf16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case DataType::Float32: { auto x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case DataType::Float64: std::memcpy(p, &v, 8); break;
    case DataType::Bool: { std::uint8_t x = v != 0 ? 1 : 0; std::memcpy(p, &x, 1); break; }
    case DataType::Int16: { auto x = static_cast<std::int16_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 2); break; }
    case DataType::Uint16: { auto x = static_cast<std::uint16_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 2); break; }
    case DataType::Uint32: { auto x = static_cast<std::uint32_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 4); break; }
    case DataType::Uint64: { auto x = static_cast<std::uint64_t>(static_cast<std::int64_t>(v)); std::memcpy(p, &x, 8); break; }
    case DataType::Float8E4M3Fn: { std::uint8_t x = encodeE4m3(static_cast<float>(v)); std::memcpy(p, &x, 1); break; }
    case DataType::Float8E5M2: { std::uint8_t x = encodeE5m2(static_cast<float>(v)); std::memcpy(p, &x, 1); break; }
    case DataType::Complex64: { float x[2] = {static_cast<float>(v), 0.0f}; std::memcpy(p, x, 8); break; }
    case DataType::Complex128: { double x[2] = {v, 0.0}; std::memcpy(p, x, 16); break; }
  }
}

double Buffer::get(std::size_t i) const {
  const void* p = bytes_.data() + i * dataTypeSize(t_);
  switch (t_) {
    case DataType::Int8: { std::int8_t x; std::memcpy(&x, p, 1); return x; }
    case DataType::Uint8: { std::uint8_t x; std::memcpy(&x, p, 1); return x; }
    case DataType::Int32: { std::int32_t x; std::memcpy(&x, p, 4); return x; }
    case DataType::Int64: { std::int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DataType::Float16: { std::uint16_t x; std::memcpy(&x, p, 2); return kernels::halfToFloat(x); }
    case DataType::BFloat16: { std::uint16_t x; std::memcpy(&x, p, 2); return kernels::bf16ToFloat(x); }
    case DataType::Float32: { float x; std::memcpy(&x, p, 4); return x; }
    case DataType::Float64: { double x; std::memcpy(&x, p, 8); return x; }
    case DataType::Bool: { std::uint8_t x; std::memcpy(&x, p, 1); return x; }
    case DataType::Int16: { std::int16_t x; std::memcpy(&x, p, 2); return x; }
    case DataType::Uint16: { std::uint16_t x; std::memcpy(&x, p, 2); return x; }
    case DataType::Uint32: { std::uint32_t x; std::memcpy(&x, p, 4); return x; }
    case DataType::Uint64: { std::uint64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DataType::Float8E4M3Fn: { std::uint8_t x; std::memcpy(&x, p, 1); return e4m3Value(x); }
    case DataType::Float8E5M2: { std::uint8_t x; std::memcpy(&x, p, 1); return e5m2Value(x); }
    case DataType::Complex64: { float x[2]; std::memcpy(x, p, 8); return x[0]; }  // real part
    case DataType::Complex128: { double x[2]; std::memcpy(x, p, 16); return x[0]; }
  }
  return 0;
}

double roundTrip(DataType t, double v) {
  Buffer b(t, 1);
  b.set(0, v);
  return b.get(0);
}

double testValue(DataType t, ReduceOp op, int rank, std::size_t i) {
  const bool isUnsigned = t == DataType::Uint8 || t == DataType::Uint16 ||
                          t == DataType::Uint32 || t == DataType::Uint64 || t == DataType::Bool;
  if (op == ReduceOp::Prod) {
    // Products of up to 8 ranks of values in {1, 2} (or {-1, 1, 2} when signed) stay exact
    // (2^8 = 256 needs int16+; keep at most three 2s per index for int8/uint8).
    std::size_t k = (i * 7 + static_cast<std::size_t>(rank) * 3) % 11;
    if (rank >= 3) return (isUnsigned || k % 2) ? 1 : -1;
    return k < 4 ? 2 : (isUnsigned || k % 3) ? 1 : -1;
  }
  // Sums of 8 values of magnitude <= 12 stay within int8 and are exact in every float type.
  auto v = static_cast<double>((i * 5 + static_cast<std::size_t>(rank) * 3) % 13);
  if (!isUnsigned && (i + static_cast<std::size_t>(rank)) % 3 == 0) v = -v;
  return v;
}

double expectedReduce(DataType t, ReduceOp op, const std::vector<double>& v) {
  double acc = v.at(0);
  for (std::size_t k = 1; k < v.size(); ++k) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc += v[k]; break;
      case ReduceOp::Prod: acc *= v[k]; break;
      case ReduceOp::Min: acc = std::min(acc, v[k]); break;
      case ReduceOp::Max: acc = std::max(acc, v[k]); break;
      default: break;  // the added ops: extendedExpected
    }
  }
  if (op == ReduceOp::Avg) {
    const double n = static_cast<double>(v.size());
    const bool integer = isInteger(t);
    acc = integer ? std::trunc(acc / n) : roundTrip(t, acc) / n;
  }
  return roundTrip(t, acc);
}

// ---- float8, independently of braid's kernels ----------------------------------------------

double e4m3Value(std::uint8_t p) {
  const int e = (p >> 3) & 15, m = p & 7;
  double v;
  if ((p & 0x7f) == 0x7f) return NAN;
  v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (p & 0x80) ? -v : v;
}

double e5m2Value(std::uint8_t p) {
  const int e = (p >> 2) & 31, m = p & 3;
  double v;
  if (e == 31) {
    v = m != 0 ? NAN : INFINITY;
  } else {
    v = e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17);
  }
  return (p & 0x80) ? -v : v;
}

namespace {

// Nearest of the magnitudes of patterns 0..top (increasing), where `top` stands for
// `topValue` (the first step past the largest finite value); ties to the even pattern. A
// magnitude at or above topValue gives `top`.
template <class ValueFn>
std::uint8_t roundSearch(double x, unsigned top, double topValue, ValueFn value) {
  const unsigned sign = std::signbit(x) ? 0x80 : 0;
  x = std::fabs(x);
  if (x >= topValue) return static_cast<std::uint8_t>(sign | top);
  auto val = [&](unsigned p) { return p == top ? topValue : value(p); };
  unsigned best = 0;
  for (unsigned p = 1; p <= top; ++p) {
    const double d = std::fabs(val(p) - x), bd = std::fabs(val(best) - x);
    if (d < bd || (d == bd && (p & 1) == 0)) best = p;
  }
  return static_cast<std::uint8_t>(sign | best);
}

}  // namespace

std::uint8_t encodeE4m3(double x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  // 0x7f (NaN) stands for 480 = 1.875 * 2^8: reaching it (from above 464) gives NaN.
  return roundSearch(x, 0x7f, 480.0, [](unsigned p) { return e4m3Value(static_cast<std::uint8_t>(p)); });
}

std::uint8_t encodeE5m2(double x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  return roundSearch(x, 0x7c, 65536.0, [](unsigned p) { return e5m2Value(static_cast<std::uint8_t>(p)); });
}

// ---- the added dtypes and ops: inputs and expectations in raw bytes ------------------------

namespace {

std::uint64_t mixBits(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t hashOf(DataType t, ReduceOp op, int rank, std::size_t i) {
  return mixBits(i * 0x100000001b3ull ^ (static_cast<std::uint64_t>(rank) << 40) ^
                 (static_cast<std::uint64_t>(t) << 56) ^ (static_cast<std::uint64_t>(op) << 48));
}

bool isSignedInt(DataType t) {
  return t == DataType::Int8 || t == DataType::Int16 || t == DataType::Int32 ||
         t == DataType::Int64;
}

bool isFloat8(DataType t) {
  return t == DataType::Float8E4M3Fn || t == DataType::Float8E5M2;
}

// An integer element's bits (low dataTypeSize bytes) as a signed or unsigned 64-bit value.
std::int64_t asSigned(DataType t, std::uint64_t v) {
  const unsigned bits = static_cast<unsigned>(dataTypeSize(t)) * 8;
  if (bits == 64) return static_cast<std::int64_t>(v);
  v &= (1ull << bits) - 1;
  if (v >> (bits - 1)) v |= ~((1ull << bits) - 1);
  return static_cast<std::int64_t>(v);
}
std::uint64_t asUnsigned(DataType t, std::uint64_t v) {
  const unsigned bits = static_cast<unsigned>(dataTypeSize(t)) * 8;
  return bits == 64 ? v : v & ((1ull << bits) - 1);
}

// Bool: columns where every rank has 1, every rank 0, and mixed ones.
std::uint8_t boolInput(DataType t, ReduceOp op, int rank, std::size_t i) {
  if (i % 5 == 0) return 1;
  if (i % 5 == 1) return 0;
  return static_cast<std::uint8_t>(hashOf(t, op, rank, i) & 1);
}

// A real value exact in t whose reductions are exact in every order (see data.hpp).
double realInput(DataType t, ReduceOp op, int rank, std::size_t i, unsigned salt) {
  const std::uint64_t h = hashOf(t, op, rank, i) >> (salt * 8);
  switch (op) {
    case ReduceOp::Prod: {
      // At most three factors of 2 per index (ranks 0-2): |product| <= 8.
      const std::size_t k = (i * 7 + static_cast<std::size_t>(rank) * 3 + salt) % 11;
      if (rank >= 3) return k % 2 ? 1 : -1;
      return k < 4 ? 2 : (k % 3) ? 1 : -1;
    }
    case ReduceOp::Min:
    case ReduceOp::Max:
      if (isFloat8(t)) {
        // Any pattern but NaN and -0 (min(-0, 0) would depend on the order).
        std::uint8_t p = static_cast<std::uint8_t>(h);
        const double v = t == DataType::Float8E4M3Fn ? e4m3Value(p) : e5m2Value(p);
        return std::isnan(v) || p == 0x80 ? 0.0 : v;
      }
      return static_cast<double>(h % 41) - 20;
    default:
      return static_cast<double>(h % 3) - 1;  // {-1, 0, 1}: sums of 8 stay exact in float8
  }
}

void storeReal(DataType t, double v, std::uint8_t* out) {
  switch (t) {
    case DataType::Float8E4M3Fn: *out = encodeE4m3(v); break;
    case DataType::Float8E5M2: *out = encodeE5m2(v); break;
    default: {
      Buffer b(t, 1);
      b.set(0, v);
      std::memcpy(out, b.data(), dataTypeSize(t));
    }
  }
}

// Complex inputs: small integer parts. Prod: one of 2+i, -1+2i, -2-i, 1-2i, i.e. (2+i) times a
// power of i: every partial product is (2+i)^k i^m with k >= 1, whose parts are non-zero
// integers below 5^4 (exact, and no signed zero whose sign would depend on the order).
void complexInput(DataType t, ReduceOp op, int rank, std::size_t i, double& re, double& im) {
  const std::uint64_t h = hashOf(t, op, rank, i);
  if (op == ReduceOp::Prod) {
    static constexpr double kRe[] = {2, -1, -2, 1}, kIm[] = {1, 2, -1, -2};
    re = kRe[h % 4];
    im = kIm[h % 4];
  } else {
    re = static_cast<double>(h % 7) - 3;
    im = static_cast<double>((h >> 8) % 7) - 3;
  }
}

void storeComplex(DataType t, double re, double im, std::uint8_t* out) {
  if (t == DataType::Complex64) {
    const float x[2] = {static_cast<float>(re), static_cast<float>(im)};
    std::memcpy(out, x, 8);
  } else {
    const double x[2] = {re, im};
    std::memcpy(out, x, 16);
  }
}

}  // namespace

double premulFactor(DataType t, int rank) {
  return rank % 2 ? -2.0 : 2.0;
}

void extendedInput(DataType t, ReduceOp op, int rank, std::size_t i, std::uint8_t* out) {
  const std::size_t es = dataTypeSize(t);
  if (isInteger(t)) {
    const std::uint64_t v = hashOf(t, op, rank, i);
    std::memcpy(out, &v, es);  // little endian: the low bytes
  } else if (t == DataType::Bool) {
    *out = boolInput(t, op, rank, i);
  } else if (isComplex(t)) {
    double re, im;
    complexInput(t, op, rank, i, re, im);
    storeComplex(t, re, im, out);
  } else {
    storeReal(t, realInput(t, op, rank, i, 0), out);
  }
}

void extendedExpected(DataType t, ReduceOp op, int n, std::size_t i, std::uint8_t* out) {
  const std::size_t es = dataTypeSize(t);
  if (isInteger(t)) {
    std::uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      std::uint64_t x = hashOf(t, op, r, i);
      x = asUnsigned(t, x);
      if (op == ReduceOp::PremulSum)
        x *= static_cast<std::uint64_t>(static_cast<std::int64_t>(premulFactor(t, r)));
      if (r == 0) {
        acc = x;
        continue;
      }
      switch (op) {
        case ReduceOp::Prod: acc *= x; break;
        case ReduceOp::Min:
          acc = isSignedInt(t) ? (asSigned(t, x) < asSigned(t, acc) ? x : acc)
                               : (asUnsigned(t, x) < asUnsigned(t, acc) ? x : acc);
          break;
        case ReduceOp::Max:
          acc = isSignedInt(t) ? (asSigned(t, x) > asSigned(t, acc) ? x : acc)
                               : (asUnsigned(t, x) > asUnsigned(t, acc) ? x : acc);
          break;
        case ReduceOp::BAnd: acc &= x; break;
        case ReduceOp::BOr: acc |= x; break;
        case ReduceOp::BXor: acc ^= x; break;
        default: acc += x; break;  // Sum, Avg, PremulSum: wrap modulo 2^64, then 2^bits
      }
    }
    if (op == ReduceOp::Avg) {
      if (isSignedInt(t))
        acc = static_cast<std::uint64_t>(asSigned(t, acc) / n);
      else
        acc = asUnsigned(t, acc) / static_cast<std::uint64_t>(n);
    }
    std::memcpy(out, &acc, es);
    return;
  }
  if (t == DataType::Bool) {
    unsigned acc = boolInput(t, op, 0, i);
    for (int r = 1; r < n; ++r) {
      const unsigned x = boolInput(t, op, r, i);
      switch (op) {
        case ReduceOp::Prod:
        case ReduceOp::Min:
        case ReduceOp::BAnd: acc &= x; break;
        case ReduceOp::BXor: acc ^= x; break;
        default: acc |= x; break;  // Sum, Max, BOr: logical or
      }
    }
    *out = static_cast<std::uint8_t>(acc);
    return;
  }
  if (isComplex(t)) {
    double re = 0, im = 0;
    for (int r = 0; r < n; ++r) {
      double xr, xi;
      complexInput(t, op, r, i, xr, xi);
      if (op == ReduceOp::PremulSum) {
        xr *= premulFactor(t, r);
        xi *= premulFactor(t, r);
      }
      if (r == 0) {
        re = xr;
        im = xi;
      } else if (op == ReduceOp::Prod) {
        const double nr = re * xr - im * xi, ni = re * xi + im * xr;  // exact: small integers
        re = nr;
        im = ni;
      } else {
        re += xr;
        im += xi;
      }
    }
    if (op == ReduceOp::Avg) {
      if (t == DataType::Complex64) {
        re = static_cast<float>(re) / static_cast<float>(n);
        im = static_cast<float>(im) / static_cast<float>(n);
      } else {
        re /= n;
        im /= n;
      }
    }
    storeComplex(t, re, im, out);
    return;
  }
  // Real floating types: exact in double, then (Avg) one division in the compute type.
  double acc = 0;
  for (int r = 0; r < n; ++r) {
    double x = realInput(t, op, r, i, 0);
    if (op == ReduceOp::PremulSum) x *= premulFactor(t, r);
    if (r == 0) {
      acc = x;
      continue;
    }
    switch (op) {
      case ReduceOp::Prod: acc *= x; break;
      case ReduceOp::Min: acc = std::min(acc, x); break;
      case ReduceOp::Max: acc = std::max(acc, x); break;
      default: acc += x; break;
    }
  }
  if (op == ReduceOp::Avg)
    acc = t == DataType::Float64 ? acc / n
                                 : static_cast<double>(static_cast<float>(acc) /
                                                       static_cast<float>(n));
  storeReal(t, acc, out);
}

}  // namespace braid::test
