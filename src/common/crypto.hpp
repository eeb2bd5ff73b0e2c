// SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), a constant-time comparison and random bytes from
// the kernel (getrandom(2)): all braid's connection authentication needs, written here because
// the core library depends on nothing but the C++ standard library and Linux.
//
// Not a general crypto library: no secret is kept in a form that outlives its use, but buffers
// are not scrubbed either (the per-job key lives in the process environment anyway).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid::crypto {

inline constexpr std::size_t kSha256Bytes = 32;
inline constexpr std::size_t kSha256BlockBytes = 64;
using Digest = std::array<std::uint8_t, kSha256Bytes>;

/// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256() noexcept;
  void update(std::span<const std::uint8_t> data) noexcept;
  void update(std::string_view text) noexcept;
  /// The digest of everything updated so far; the object must not be updated afterwards.
  Digest finish() noexcept;

 private:
  void compress(const std::uint8_t* block) noexcept;

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, kSha256BlockBytes> block_{};
  std::size_t blockUsed_ = 0;
  std::uint64_t totalBytes_ = 0;
};

Digest sha256(std::span<const std::uint8_t> data) noexcept;

/// Incremental HMAC-SHA256 under one key.
class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const std::uint8_t> key) noexcept;
  explicit HmacSha256(std::string_view key) noexcept;
  void update(std::span<const std::uint8_t> data) noexcept { inner_.update(data); }
  void update(std::string_view text) noexcept { inner_.update(text); }
  Digest finish() noexcept;

 private:
  Sha256 inner_;
  std::array<std::uint8_t, kSha256BlockBytes> outerPad_{};
};

Digest hmacSha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data) noexcept;

/// True when a and b are equal; the time taken does not depend on where they differ.
bool equalConstantTime(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) noexcept;

/// Fills `out` from the kernel's CSPRNG (getrandom(2)). Throws Error(Internal) if that fails.
void randomBytes(std::span<std::uint8_t> out);

/// Lower-case hexadecimal text of `bytes`.
std::string toHex(std::span<const std::uint8_t> bytes);
/// The bytes of hexadecimal text (either case): false, with `out` cleared, for text of odd
/// length or with a character that is not a hex digit, and for empty text.
bool fromHex(std::string_view text, std::vector<std::uint8_t>& out);

}  // namespace braid::crypto
