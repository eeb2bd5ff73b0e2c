// Codec kernels of the compressed collectives (src/train/compress.cpp): per-block int8
// quantisation, 1-bit signs with a per-block scale, top-k selection and shared-seed index
// sampling. Plain loops the compiler vectorises; fp32 only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid::kernels {

/// Blocks of `block` elements covering n (the last one may be shorter).
inline std::size_t numBlocks(std::size_t n, std::size_t block) noexcept {
  return (n + block - 1) / block;
}

/// Per block b: m = max |x|, scales[b] = m / 127, q = round-to-nearest(x * 127 / m) in
/// [-127, 127] (m == 0: scale 0, q 0). |x - q * scale| <= scale / 2 (+ fp32 rounding).
void quantizeInt8(const float* x, std::size_t n, std::size_t block, float* scales,
                  std::int8_t* q) noexcept;
/// out[i] = q[i] * scales[i / block] (accumulate: out[i] += ...).
void dequantizeInt8(const float* scales, const std::int8_t* q, std::size_t n, std::size_t block,
                    float* out, bool accumulate) noexcept;

/// Per block b: scales[b] = mean |x| over the block; bit i set when x[i] >= 0 (bit i % 8 of
/// byte i / 8). Decoded value: +scale when the bit is set, else -scale.
void encodeSign(const float* x, std::size_t n, std::size_t block, float* scales,
                std::uint8_t* bits) noexcept;
/// out[i] (+)= (bit i ? +1 : -1) * scales[i / block].
void decodeSign(const float* scales, const std::uint8_t* bits, std::size_t n, std::size_t block,
                float* out, bool accumulate) noexcept;

/// The k indices of the largest |x| (ties: the lower index wins), ascending, into idx[0..k).
/// x must be finite. `scratch` is resized to n.
void selectTopK(const float* x, std::size_t n, std::size_t k, std::uint32_t* idx,
                std::vector<float>& scratch);

/// splitmix64 (Steele, Lea, Flood 2014): the generator every rank and the Python hooks share.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) noexcept : state_(state) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

/// k distinct indices of [0, n), ascending, drawn with Floyd's algorithm from
/// SplitMix64(seed + step * 0x9E3779B97F4A7C15): for j = n-k .. n-1, t = next() % (j+1); take t,
/// or j when t was taken. The same (seed, step, n, k) gives the same indices everywhere.
/// `taken` is resized to n.
void sampleIndices(std::uint64_t seed, std::uint64_t step, std::size_t n, std::size_t k,
                   std::uint32_t* idx, std::vector<std::uint8_t>& taken);

}  // namespace braid::kernels
