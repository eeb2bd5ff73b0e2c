#include "topology/json.hpp"

#include <unistd.h>

#include <braid/error.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unordered_set>

namespace braid::topology::json {

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.bool_ = b;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::Number;
  v.number_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.string_ = std::move(s);
  return v;
}
Value Value::array() {
  Value v;
  v.kind_ = Kind::Array;
  return v;
}
Value Value::object() {
  Value v;
  v.kind_ = Kind::Object;
  return v;
}

Value& Value::push(Value v) {
  items_.push_back(std::move(v));
  return items_.back();
}

Value& Value::set(std::string key, Value v) {
  for (auto& m : members_)
    if (m.first == key) return m.second = std::move(v);
  members_.emplace_back(std::move(key), std::move(v));
  return members_.back().second;
}

Value& Value::append(std::string key, Value v) {
  members_.emplace_back(std::move(key), std::move(v));
  return members_.back().second;
}

const Value* Value::find(std::string_view key) const noexcept {
  for (const auto& m : members_)
    if (m.first == key) return &m.second;
  return nullptr;
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Value document() {
    if (text_.size() > kMaxTextBytes)
      fail("text of " + std::to_string(text_.size()) + " bytes exceeds the limit of " +
           std::to_string(kMaxTextBytes));
    skipSpace();
    Value v = value(0);
    skipSpace();
    if (pos_ != text_.size()) fail("unexpected text after the document");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    int line = 1;
    int column = 1;
    for (std::size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw Error(ErrorCode::InvalidArgument, std::string(source_) + ":" + std::to_string(line) +
                                                ":" + std::to_string(column) + ": " + what);
  }

  bool atEnd() const noexcept { return pos_ >= text_.size(); }
  char peek() const noexcept { return atEnd() ? '\0' : text_[pos_]; }

  void skipSpace() noexcept {
    while (!atEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                        text_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  // Line and column of pos_; values are located in document order (pre-order), so the scan
  // only moves forward and stays linear in the text size.
  void locate(int& line, int& column) {
    for (; scanPos_ < pos_; ++scanPos_) {
      if (text_[scanPos_] == '\n') {
        ++scanLine_;
        scanColumn_ = 1;
      } else {
        ++scanColumn_;
      }
    }
    line = scanLine_;
    column = scanColumn_;
  }

  Value value(int depth) {
    if (depth >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    Value v;
    int line = 0;
    int column = 0;
    locate(line, column);
    switch (peek()) {
      case '{':
        v = object(depth);
        break;
      case '[':
        v = array(depth);
        break;
      case '"':
        v = Value::string(string());
        break;
      case 't':
        literal("true");
        v = Value::boolean(true);
        break;
      case 'f':
        literal("false");
        v = Value::boolean(false);
        break;
      case 'n':
        literal("null");
        break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
          v = Value::number(number());
          break;
        }
        fail(atEnd() ? "unexpected end of text, expected a value" : "expected a value");
    }
    v.line = line;
    v.column = column;
    return v;
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("expected '" + std::string(word) + "'");
    pos_ += word.size();
  }

  double number() {
    const std::size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      fail("expected a digit");
    }
    if (peek() == '.') {
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit after '.'");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit in the exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    double d = 0;
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    auto [p, ec] = std::from_chars(first, last, d);
    if (ec != std::errc() || p != last || !std::isfinite(d)) {
      pos_ = start;
      fail("number out of range");
    }
    return d;
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      unsigned d = 0;
      if (c >= '0' && c <= '9')
        d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        d = static_cast<unsigned>(c - 'A' + 10);
      else
        fail("expected four hex digits after \\u");
      u = u * 16 + d;
      ++pos_;
    }
    return u;
  }

  static void appendUtf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (atEnd()) fail("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (text_.substr(pos_, 2) != "\\u") fail("unpaired surrogate in \\u escape");
            pos_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("unpaired surrogate in \\u escape");
          }
          appendUtf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("invalid escape in a string");
      }
    }
  }

  Value array(int depth) {
    expect('[');
    Value v = Value::array();
    skipSpace();
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    while (true) {
      skipSpace();
      v.push(value(depth + 1));
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      fail("expected ',' or ']'");
    }
  }

  Value object(int depth) {
    expect('{');
    Value v = Value::object();
    std::unordered_set<std::string> keys;  // duplicates in O(1), not a scan per member
    skipSpace();
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    while (true) {
      skipSpace();
      if (peek() != '"') fail("expected a member name in double quotes");
      const std::size_t keyPos = pos_;
      std::string key = string();
      if (!keys.insert(key).second) {
        pos_ = keyPos;
        fail("duplicate member \"" + key + "\"");
      }
      skipSpace();
      expect(':');
      skipSpace();
      v.append(std::move(key), value(depth + 1));
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      fail("expected ',' or '}'");
    }
  }

  std::string_view text_;
  std::string_view source_;
  std::size_t pos_ = 0;
  std::size_t scanPos_ = 0;
  int scanLine_ = 1;
  int scanColumn_ = 1;
};

void escape(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void writeNumber(std::string& out, double d) {
  char buf[32];
  if (std::nearbyint(d) == d && std::fabs(d) < 9.0e15) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(d));
  } else {
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf - 1, d);
    *p = '\0';
  }
  out += buf;
}

bool isScalar(const Value& v) {
  return v.kind() != Value::Kind::Array && v.kind() != Value::Kind::Object;
}

void writeValue(std::string& out, const Value& v, int indent) {
  const std::string pad(static_cast<std::size_t>(indent + 2), ' ');
  switch (v.kind()) {
    case Value::Kind::Null:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.asBool() ? "true" : "false";
      return;
    case Value::Kind::Number:
      writeNumber(out, v.asNumber());
      return;
    case Value::Kind::String:
      escape(out, v.asString());
      return;
    case Value::Kind::Array: {
      bool flat = true;
      for (const auto& i : v.items()) flat = flat && isScalar(i);
      out += '[';
      bool first = true;
      for (const auto& i : v.items()) {
        if (!first) out += flat ? ", " : ",";
        if (!flat) out += "\n" + pad;
        writeValue(out, i, indent + 2);
        first = false;
      }
      if (!flat && !v.items().empty())
        out += "\n" + std::string(static_cast<std::size_t>(indent), ' ');
      out += ']';
      return;
    }
    case Value::Kind::Object: {
      out += '{';
      bool first = true;
      for (const auto& [k, m] : v.members()) {
        out += first ? "\n" : ",\n";
        out += pad;
        escape(out, k);
        out += ": ";
        writeValue(out, m, indent + 2);
        first = false;
      }
      if (!v.members().empty()) out += "\n" + std::string(static_cast<std::size_t>(indent), ' ');
      out += '}';
      return;
    }
  }
}

}  // namespace

Value parse(std::string_view text, std::string_view source) {
  return Parser(text, source).document();
}

std::string write(const Value& v) {
  std::string out;
  writeValue(out, v, 0);
  out += '\n';
  return out;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorCode::InvalidArgument,
                "cannot open '" + path + "' for reading: " + std::strerror(errno));
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxTextBytes)
      throw Error(ErrorCode::InvalidArgument,
                  "'" + path + "' is larger than " + std::to_string(kMaxTextBytes) + " bytes");
  }
  if (in.bad()) throw Error(ErrorCode::InvalidArgument, "cannot read '" + path + "'");
  return text;
}

void writeFile(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw Error(ErrorCode::InvalidArgument,
                  "cannot open '" + tmp + "' for writing: " + std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      ::unlink(tmp.c_str());
      throw Error(ErrorCode::InvalidArgument, "cannot write '" + tmp + "'");
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::InvalidArgument,
                "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(e));
  }
}

}  // namespace braid::topology::json
