#include "bootstrap/slurm.hpp"

#include <braid/error.hpp>
#include <charconv>

namespace braid::bootstrap {
namespace {

Error bad(std::string_view what, std::string_view list, std::size_t at, const std::string& why) {
  return Error(ErrorCode::InvalidArgument, std::string(what) + "='" + std::string(list) +
                                               "': " + why + " at character " +
                                               std::to_string(at + 1) + " (Slurm host list)");
}

// One bracket's content "01-03,07" as the strings it stands for, at most `limit` of them (every
// range is still checked).
std::vector<std::string> expandRanges(std::string_view ranges, std::string_view what,
                                      std::string_view list, std::size_t offset,
                                      std::size_t limit) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= ranges.size()) {
    std::size_t end = ranges.find(',', start);
    if (end == std::string_view::npos) end = ranges.size();
    const std::string_view item = ranges.substr(start, end - start);
    if (item.empty()) throw bad(what, list, offset + start, "empty range");
    const std::size_t dash = item.find('-');
    const std::string_view lo = item.substr(0, dash);
    const std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    auto number = [&](std::string_view s, std::size_t at) {
      std::uint64_t v = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v > 999999999)
        throw bad(what, list, offset + start + at, "'" + std::string(s) + "' is not a number");
      return v;
    };
    const std::uint64_t a = number(lo, 0);
    const std::uint64_t b = number(hi, dash == std::string_view::npos ? 0 : dash + 1);
    if (b < a)
      throw bad(what, list, offset + start, "range " + std::string(item) + " ends below its start");
    for (std::uint64_t v = a; v <= b && out.size() < limit; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out.push_back(std::move(s));
    }
    start = end + 1;
  }
  return out;
}

// One name with brackets ("rack[1-2]-n[1-2]"): the cartesian product, left to right, up to
// `limit` names appended to `out`.
void expandName(std::string_view name, std::string_view what, std::string_view list,
                std::size_t offset, std::size_t limit, std::vector<std::string>& out) {
  std::vector<std::string> partial{""};
  std::size_t i = 0;
  while (i < name.size()) {
    const std::size_t open = name.find('[', i);
    const std::size_t closeBefore = name.find(']', i);
    if (closeBefore != std::string_view::npos && closeBefore < open)
      throw bad(what, list, offset + closeBefore, "']' without '['");
    const std::string_view text = name.substr(i, open - i);
    for (auto& p : partial) p.append(text);
    if (open == std::string_view::npos) break;
    const std::size_t close = name.find(']', open);
    if (close == std::string_view::npos) throw bad(what, list, offset + open, "'[' without ']'");
    const auto values =
        expandRanges(name.substr(open + 1, close - open - 1), what, list, offset + open + 1, limit);
    std::vector<std::string> next;
    for (const auto& p : partial) {
      for (const auto& v : values) {
        if (next.size() >= limit) break;
        next.push_back(p + v);
      }
    }
    partial = std::move(next);
    i = close + 1;
  }
  for (auto& p : partial) {
    if (out.size() >= limit) return;
    out.push_back(std::move(p));
  }
}

}  // namespace

std::vector<std::string> expandHostList(std::string_view list, std::string_view what,
                                        std::size_t limit) {
  std::vector<std::string> out;
  std::size_t start = 0, depth = 0;
  for (std::size_t i = 0; i <= list.size() && out.size() < limit; ++i) {
    if (i < list.size() && list[i] == '[') {
      if (depth > 0) throw bad(what, list, i, "nested '['");
      ++depth;
    } else if (i < list.size() && list[i] == ']') {
      if (depth == 0) throw bad(what, list, i, "']' without '['");
      --depth;
    } else if (i == list.size() || (list[i] == ',' && depth == 0)) {
      if (depth > 0) throw bad(what, list, i, "'[' without ']'");
      const std::string_view name = list.substr(start, i - start);
      if (name.empty()) throw bad(what, list, start, "empty host name");
      expandName(name, what, list, start, limit, out);
      start = i + 1;
    }
  }
  return out;
}

std::uint16_t slurmStorePort(std::uint64_t jobId, std::uint64_t stepId) {
  static_assert(kSlurmPortLow + 625 * 16 - 1 == kSlurmPortHigh);
  return static_cast<std::uint16_t>(kSlurmPortLow + (jobId % 625) * 16 + (stepId % 16));
}

}  // namespace braid::bootstrap
