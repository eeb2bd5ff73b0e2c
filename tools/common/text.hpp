// Small text helpers shared by the command-line tools: byte sizes as users type and read them,
// and JSON string literals.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace braid::tools {

/// "8", "64K", "4M", "1G" (binary multiples, optional trailing B). nullopt when malformed.
std::optional<std::size_t> parseByteSize(const std::string& text);

/// 1024 -> "1K", 3 << 20 -> "3M", 1000 -> "1000": the largest binary unit that divides exactly.
std::string formatBytes(std::size_t bytes);

/// s as a JSON string literal, quotes included (control characters escaped).
std::string jsonString(const std::string& s);

}  // namespace braid::tools
