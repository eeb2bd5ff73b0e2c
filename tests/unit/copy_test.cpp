// kernels::copyStreaming (src/kernels/copy.cpp), the shared-memory collectives' copy for large
// outputs: byte-exact against the source, never a byte outside the destination.
#include "kernels/copy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace braid::test {
namespace {

// The non-temporal copy: every length around its 64-byte blocks and 16-byte peel, at every
// alignment of source and destination, between guard bytes that must stay untouched.
TEST(CopyKernels, StreamingCopyMatchesMemcpyAtEveryLengthAndAlignment) {
  std::vector<std::uint8_t> src(4096 + 64), dst(4096 + 64);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 37 + 11);
  for (std::size_t bytes : {0, 1, 15, 16, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 4001}) {
    for (std::size_t so = 0; so < 17; so += 3) {
      for (std::size_t d0 = 0; d0 < 17; ++d0) {
        std::fill(dst.begin(), dst.end(), std::uint8_t{0xA5});
        kernels::copyStreaming(dst.data() + d0, src.data() + so, bytes);
        for (std::size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= d0 && i < d0 + bytes;
          const std::uint8_t want = inside ? src[so + i - d0] : std::uint8_t{0xA5};
          ASSERT_EQ(dst[i], want) << "bytes " << bytes << ", source offset " << so
                                  << ", destination offset " << d0 << ", byte " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace braid::test
