// Unsigned 64-bit values in little-endian byte order, the order of braid's wire headers (TCP
// frames, UCX message headers): one load or store on a little-endian CPU.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace braid {

inline void storeLe64(std::uint8_t* out, std::uint64_t v) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, &v, 8);
  } else {
    for (int i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

inline std::uint64_t loadLe64(const std::uint8_t* in) noexcept {
  std::uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, in, 8);
  } else {
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  }
  return v;
}

}  // namespace braid
