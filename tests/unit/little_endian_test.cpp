// The wire's byte order: least significant byte first, whatever the CPU's.
#include "common/little_endian.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>

namespace braid {
namespace {

TEST(LittleEndian, StoresTheLeastSignificantByteFirstAndLoadsItBack) {
  std::array<std::uint8_t, 10> buf{};
  storeLe64(buf.data() + 1, 0x0807060504030201ull);  // unaligned on purpose
  EXPECT_EQ(buf, (std::array<std::uint8_t, 10>{0, 1, 2, 3, 4, 5, 6, 7, 8, 0}));
  EXPECT_EQ(loadLe64(buf.data() + 1), 0x0807060504030201ull);
  for (std::uint64_t v : {0ull, 1ull, ~0ull, 0x8000000000000000ull, 0x0123456789abcdefull}) {
    storeLe64(buf.data(), v);
    EXPECT_EQ(loadLe64(buf.data()), v);
  }
}

}  // namespace
}  // namespace braid
