// Helpers of the store tests (tests/unit/store_*_test.cpp): clients of a test server with
// short timeouts, elapsed time, and little-endian wire bytes for hand-made frames.
#pragma once

#include <braid/store.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace braid::test {

using StoreClock = std::chrono::steady_clock;

inline constexpr std::chrono::milliseconds kConnect{2000};
inline constexpr std::chrono::milliseconds kLong{5000};

inline std::chrono::milliseconds since(StoreClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(StoreClock::now() - t);
}

inline std::unique_ptr<TcpStore> connectTo(
    const TcpStoreServer& server,
    std::chrono::milliseconds opTimeout = std::chrono::milliseconds(5000)) {
  return std::make_unique<TcpStore>("127.0.0.1", server.port(), kConnect, opTimeout);
}

inline std::vector<std::uint8_t> le32(std::uint32_t v) {
  return {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
          static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
}

inline std::vector<std::uint8_t> operator+(std::vector<std::uint8_t> a,
                                           const std::vector<std::uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace braid::test
