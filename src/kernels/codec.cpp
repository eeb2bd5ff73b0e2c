#include "kernels/codec.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

namespace braid::kernels {

void quantizeInt8(const float* x, std::size_t n, std::size_t block, float* scales,
                  std::int8_t* q) noexcept {
  for (std::size_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const std::size_t len = std::min(block, n - b0);
    float m = 0.0f;
    for (std::size_t i = 0; i < len; ++i) m = std::max(m, std::fabs(x[b0 + i]));
    if (m == 0.0f) {
      scales[bi] = 0.0f;
      std::fill(q + b0, q + b0 + len, std::int8_t{0});
      continue;
    }
    scales[bi] = m / 127.0f;
    const float inv = 127.0f / m;
    // Round half to even by adding and subtracting 1.5 * 2^23 (exact for |v| < 2^22, and
    // |v| <= 127 here): the same as nearbyint in the default rounding mode, without a library
    // call per element, so the loop vectorises.
    constexpr float kRound = 12582912.0f;
    for (std::size_t i = 0; i < len; ++i) {
      const float v = std::clamp(x[b0 + i] * inv, -127.0f, 127.0f);
      q[b0 + i] = static_cast<std::int8_t>((v + kRound) - kRound);
    }
  }
}

void dequantizeInt8(const float* scales, const std::int8_t* q, std::size_t n, std::size_t block,
                    float* out, bool accumulate) noexcept {
  for (std::size_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const std::size_t len = std::min(block, n - b0);
    const float s = scales[bi];
    if (accumulate) {
      for (std::size_t i = 0; i < len; ++i) out[b0 + i] += static_cast<float>(q[b0 + i]) * s;
    } else {
      for (std::size_t i = 0; i < len; ++i) out[b0 + i] = static_cast<float>(q[b0 + i]) * s;
    }
  }
}

void encodeSign(const float* x, std::size_t n, std::size_t block, float* scales,
                std::uint8_t* bits) noexcept {
  std::fill(bits, bits + (n + 7) / 8, std::uint8_t{0});
  for (std::size_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const std::size_t len = std::min(block, n - b0);
    double l1 = 0;
    for (std::size_t i = 0; i < len; ++i) l1 += std::fabs(x[b0 + i]);
    scales[bi] = static_cast<float>(l1 / static_cast<double>(len));
  }
  for (std::size_t i = 0; i < n; ++i)
    if (x[i] >= 0.0f) bits[i / 8] |= static_cast<std::uint8_t>(1u << (i % 8));
}

namespace {
/// kSignTable[b][j] = +1 when bit j of b is set, else -1: one byte expands to 8 floats.
struct SignTable {
  float v[256][8];
  constexpr SignTable() : v{} {
    for (int b = 0; b < 256; ++b)
      for (int j = 0; j < 8; ++j) v[b][j] = ((b >> j) & 1) != 0 ? 1.0f : -1.0f;
  }
};
constexpr SignTable kSignTable;
}  // namespace

void decodeSign(const float* scales, const std::uint8_t* bits, std::size_t n, std::size_t block,
                float* out, bool accumulate) noexcept {
  for (std::size_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const std::size_t len = std::min(block, n - b0);
    const float s = scales[bi];
    std::size_t i = b0;
    if (b0 % 8 == 0) {  // whole bytes: 8 elements per table row (vectorises)
      for (; i + 8 <= b0 + len; i += 8) {
        const float* row = kSignTable.v[bits[i / 8]];
        float* o = out + i;
        if (accumulate) {
          for (int j = 0; j < 8; ++j) o[j] += s * row[j];
        } else {
          for (int j = 0; j < 8; ++j) o[j] = s * row[j];
        }
      }
    }
    for (; i < b0 + len; ++i) {
      const float v = ((bits[i / 8] >> (i % 8)) & 1u) != 0 ? s : -s;
      out[i] = accumulate ? out[i] + v : v;
    }
  }
}

void selectTopK(const float* x, std::size_t n, std::size_t k, std::uint32_t* idx,
                std::vector<float>& scratch) {
  k = std::min(k, n);
  if (k == 0) return;
  // The k-th largest magnitude t (nth_element over a copy of |x|, no indirection), then one pass
  // in index order: every |x| > t, and as many |x| == t as still fit (ties: lower index first).
  scratch.resize(n);
  for (std::size_t i = 0; i < n; ++i) scratch[i] = std::fabs(x[i]);
  std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), std::greater<>());
  const float t = scratch[k - 1];
  std::size_t above = 0;
  for (std::size_t i = 0; i < n; ++i) above += std::fabs(x[i]) > t ? 1 : 0;
  std::size_t ties = k - above;
  std::size_t out = 0;
  for (std::size_t i = 0; i < n && out < k; ++i) {
    const float a = std::fabs(x[i]);
    if (a > t || (a == t && ties > 0)) {
      if (a == t) --ties;
      idx[out++] = static_cast<std::uint32_t>(i);
    }
  }
}

void sampleIndices(std::uint64_t seed, std::uint64_t step, std::size_t n, std::size_t k,
                   std::uint32_t* idx, std::vector<std::uint8_t>& taken) {
  k = std::min(k, n);
  if (k == 0) return;
  taken.assign(n, 0);
  SplitMix64 rng(seed + step * 0x9E3779B97F4A7C15ull);
  for (std::size_t j = n - k; j < n; ++j) {
    const std::size_t t = static_cast<std::size_t>(rng.next() % (j + 1));
    if (taken[t] != 0)
      taken[j] = 1;
    else
      taken[t] = 1;
  }
  std::size_t out = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (taken[i] != 0) idx[out++] = static_cast<std::uint32_t>(i);
}

}  // namespace braid::kernels
