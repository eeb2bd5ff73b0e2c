#include "common/crypto.hpp"

#include <sys/random.h>

#include <bit>
#include <braid/error.hpp>
#include <cerrno>
#include <cstring>

namespace braid::crypto {

namespace {

constexpr std::array<std::uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr std::array<std::uint32_t, 8> kInitialState = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

std::uint32_t loadBigEndian(const std::uint8_t* p) noexcept {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::span<const std::uint8_t> bytesOf(std::string_view text) noexcept {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

}  // namespace

Sha256::Sha256() noexcept : state_(kInitialState) {}

void Sha256::compress(const std::uint8_t* block) noexcept {
  std::array<std::uint32_t, 64> w;
  for (int i = 0; i < 16; ++i) w[i] = loadBigEndian(block + 4 * i);
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = std::rotr(w[i - 15], 7) ^ std::rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = std::rotr(w[i - 2], 17) ^ std::rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t s1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const std::uint32_t choose = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + s1 + choose + kRoundConstants[i] + w[i];
    const std::uint32_t s0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = s0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(std::span<const std::uint8_t> data) noexcept {
  if (data.empty()) return;  // data() may be null: memcpy must not see it
  totalBytes_ += data.size();
  std::size_t at = 0;
  if (blockUsed_ > 0) {
    const std::size_t take = std::min(data.size(), kSha256BlockBytes - blockUsed_);
    std::memcpy(block_.data() + blockUsed_, data.data(), take);
    blockUsed_ += take;
    at = take;
    if (blockUsed_ < kSha256BlockBytes) return;
    compress(block_.data());
    blockUsed_ = 0;
  }
  for (; data.size() - at >= kSha256BlockBytes; at += kSha256BlockBytes) compress(data.data() + at);
  blockUsed_ = data.size() - at;
  if (blockUsed_ > 0) std::memcpy(block_.data(), data.data() + at, blockUsed_);
}

void Sha256::update(std::string_view text) noexcept {
  update(bytesOf(text));
}

Digest Sha256::finish() noexcept {
  const std::uint64_t bits = totalBytes_ * 8;
  // Padding: 0x80, zeros up to 56 bytes into a block, then the message length in bits.
  std::array<std::uint8_t, kSha256BlockBytes + 8> pad{};
  pad[0] = 0x80;
  const std::size_t zeros = blockUsed_ < 56 ? 56 - blockUsed_ : kSha256BlockBytes + 56 - blockUsed_;
  for (int i = 0; i < 8; ++i) pad[zeros + i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
  update(std::span<const std::uint8_t>(pad.data(), zeros + 8));
  Digest out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j)
      out[4 * i + j] = static_cast<std::uint8_t>(state_[i] >> (24 - 8 * j));
  return out;
}

Digest sha256(std::span<const std::uint8_t> data) noexcept {
  Sha256 h;
  h.update(data);
  return h.finish();
}

HmacSha256::HmacSha256(std::span<const std::uint8_t> key) noexcept {
  // Keys longer than a block are hashed first (RFC 2104).
  std::array<std::uint8_t, kSha256BlockBytes> block{};
  if (key.size() > kSha256BlockBytes) {
    const Digest d = sha256(key);
    std::memcpy(block.data(), d.data(), d.size());
  } else if (!key.empty()) {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::array<std::uint8_t, kSha256BlockBytes> innerPad;
  for (std::size_t i = 0; i < kSha256BlockBytes; ++i) {
    innerPad[i] = block[i] ^ 0x36;
    outerPad_[i] = block[i] ^ 0x5c;
  }
  inner_.update(innerPad);
}

HmacSha256::HmacSha256(std::string_view key) noexcept : HmacSha256(bytesOf(key)) {}

Digest HmacSha256::finish() noexcept {
  const Digest innerDigest = inner_.finish();
  Sha256 outer;
  outer.update(outerPad_);
  outer.update(innerDigest);
  return outer.finish();
}

Digest hmacSha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data) noexcept {
  HmacSha256 mac(key);
  mac.update(data);
  return mac.finish();
}

bool equalConstantTime(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) noexcept {
  if (a.size() != b.size()) return false;  // sizes are public (fixed by the protocol)
  std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  // volatile: keep the compiler from turning the loop into an early-exit comparison.
  volatile std::uint8_t result = diff;
  return result == 0;
}

void randomBytes(std::span<std::uint8_t> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::Internal, std::string("getrandom failed: ") + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

std::string toHex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

bool fromHex(std::string_view text, std::vector<std::uint8_t>& out) {
  out.clear();
  if (text.empty() || text.size() % 2 != 0) return false;
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  out.reserve(text.size() / 2);
  for (std::size_t i = 0; i < text.size(); i += 2) {
    const int hi = digit(text[i]), lo = digit(text[i + 1]);
    if (hi < 0 || lo < 0) {
      out.clear();
      return false;
    }
    out.push_back(static_cast<std::uint8_t>(hi * 16 + lo));
  }
  return true;
}

}  // namespace braid::crypto
