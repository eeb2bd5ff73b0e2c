// Copies for the shared-memory collectives: memcpy, or non-temporal stores for an output that
// would not stay cached anyway (see copy.hpp).
#include "kernels/copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace braid::kernels {

#if defined(__x86_64__)
namespace {

// The loop both copies share: 64 bytes per step through four 16-byte registers (SSE2, the
// x86-64 baseline; memory, not the vector width, limits these copies), each register written
// by `store`. Returns the bytes copied (a multiple of 64); the caller copies the rest.
template <typename Store>
std::size_t copy64(std::uint8_t* d, const std::uint8_t* s, std::size_t bytes, Store store) {
  std::size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    store(reinterpret_cast<__m128i*>(d + i), a);
    store(reinterpret_cast<__m128i*>(d + i + 16), b);
    store(reinterpret_cast<__m128i*>(d + i + 32), c);
    store(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  return i;
}

}  // namespace
#endif

void copyStreaming(void* dst, const void* src, std::size_t bytes) noexcept {
#if defined(__x86_64__)
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  // Peel to a 16-byte aligned destination (movntdq needs it); the source may be unaligned.
  const std::size_t peel = (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16;
  if (bytes < peel + 64) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, peel);
  d += peel;
  s += peel;
  bytes -= peel;
  const std::size_t i = copy64(d, s, bytes, [](__m128i* p, __m128i v) { _mm_stream_si128(p, v); });
  _mm_sfence();
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void copyCached(void* dst, const void* src, std::size_t bytes) noexcept {
#if defined(__x86_64__)
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  const std::size_t i = copy64(d, s, bytes, [](__m128i* p, __m128i v) { _mm_storeu_si128(p, v); });
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace braid::kernels
