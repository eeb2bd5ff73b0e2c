// A small JSON reader and writer for braid's own files (topology dumps and fabricated
// topologies), so the core library needs no dependency. Objects keep their keys in file order.
// The parser is bounded (nesting depth, text size) and its errors name the source and the line
// and column of the offending character.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::topology::json {

class Value {
 public:
  enum class Kind : std::uint8_t { Null, Bool, Number, String, Array, Object };
  using Member = std::pair<std::string, Value>;

  Value() = default;
  static Value boolean(bool b);
  static Value number(double d);
  static Value string(std::string s);
  static Value array();
  static Value object();

  Kind kind() const noexcept { return kind_; }
  bool isNull() const noexcept { return kind_ == Kind::Null; }
  bool asBool() const noexcept { return bool_; }
  double asNumber() const noexcept { return number_; }
  const std::string& asString() const noexcept { return string_; }
  const std::vector<Value>& items() const noexcept { return items_; }
  const std::vector<Member>& members() const noexcept { return members_; }

  /// Appends to an array / sets a member of an object (replacing an existing key).
  Value& push(Value v);
  Value& set(std::string key, Value v);
  /// Appends a member without looking for an existing one (the caller knows the key is new).
  Value& append(std::string key, Value v);
  /// The member `key` of an object, or nullptr.
  const Value* find(std::string_view key) const noexcept;

  /// Where the value started in its source (1-based), for error messages; 0 when built in code.
  int line = 0;
  int column = 0;

 private:
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Value> items_;
  std::vector<Member> members_;
};

inline constexpr int kMaxDepth = 64;
inline constexpr std::size_t kMaxTextBytes = std::size_t{64} << 20;

/// Parses one JSON document (RFC 8259; \u escapes outside ASCII are written as UTF-8). Throws
/// Error(InvalidArgument) "SOURCE:LINE:COLUMN: what was expected" on malformed text, nesting
/// deeper than kMaxDepth or text larger than kMaxTextBytes.
Value parse(std::string_view text, std::string_view source);

/// Writes `v` indented by two spaces per level; arrays of scalars stay on one line.
std::string write(const Value& v);

/// Reads a whole file (at most kMaxTextBytes); throws Error(InvalidArgument) naming the file.
std::string readFile(const std::string& path);
/// Writes a whole file (through a temporary file and rename, so readers never see half of it);
/// throws Error(InvalidArgument) naming the file.
void writeFile(const std::string& path, std::string_view text);

}  // namespace braid::topology::json
