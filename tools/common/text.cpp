#include "common/text.hpp"

#include <charconv>
#include <cstdio>
#include <limits>
#include <string_view>

namespace braid::tools {

std::optional<std::size_t> parseByteSize(const std::string& text) {
  std::string_view s = text;
  if (!s.empty() && (s.back() == 'B' || s.back() == 'b')) s.remove_suffix(1);
  std::size_t multiplier = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k':
        multiplier = std::size_t{1} << 10;
        break;
      case 'M':
      case 'm':
        multiplier = std::size_t{1} << 20;
        break;
      case 'G':
      case 'g':
        multiplier = std::size_t{1} << 30;
        break;
      default:
        break;
    }
    if (multiplier != 1) s.remove_suffix(1);
  }
  std::size_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  if (v > std::numeric_limits<std::size_t>::max() / multiplier) return std::nullopt;
  return v * multiplier;
}

std::string formatBytes(std::size_t b) {
  if (b >= (std::size_t{1} << 30) && b % (std::size_t{1} << 30) == 0)
    return std::to_string(b >> 30) + "G";
  if (b >= (std::size_t{1} << 20) && b % (std::size_t{1} << 20) == 0)
    return std::to_string(b >> 20) + "M";
  if (b >= (std::size_t{1} << 10) && b % (std::size_t{1} << 10) == 0)
    return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace braid::tools
