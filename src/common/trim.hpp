// Small text helpers shared by the parsers of configuration (tuning files, BRAID_ALGO rules,
// address filters).
#pragma once

#include <string_view>

namespace braid::text {

/// `s` without leading and trailing spaces, tabs and carriage returns.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace braid::text
