#include "tuning/rules.hpp"

#include <algorithm>
#include <braid/error.hpp>
#include <charconv>

#include "algo/algorithm.hpp"
#include "common/trim.hpp"
#include "tuning/cost_model.hpp"

namespace braid::tuning {
namespace {

using text::trim;

bool hasAlgorithm(std::optional<Collective> coll, std::string_view name) {
  for (const auto& a : algo::registry()) {
    if (name == a.name && (!coll || *coll == a.coll)) return true;
  }
  return false;
}

// "shm_direct, rank_ordered": the rank-ordered algorithms of `coll`.
std::string rankOrderedNames(Collective coll) {
  std::string names;
  for (const auto& a : algo::registry())
    if (a.coll == coll && a.rankOrdered) names += (names.empty() ? "" : ", ") + std::string(a.name);
  return names;
}

Error notRankOrdered(Collective coll, std::string_view algorithm, std::string_view origin) {
  return Error(ErrorCode::InvalidArgument,
               "BRAID_DETERMINISTIC=1, but " + std::string(origin) + " selects algorithm '" +
                   std::string(algorithm) + "' for " + toString(coll) +
                   ", which does not reduce in rank order (rank-ordered algorithms for " +
                   toString(coll) + ": " + rankOrderedNames(coll) + ")");
}

}  // namespace

bool isReduction(Collective c) noexcept {
  return c == Collective::Allreduce || c == Collective::Reduce || c == Collective::ReduceScatter ||
         c == Collective::ReduceScatterv;
}

void checkDeterministicRules(const std::vector<Rule>& rules, std::string_view source) {
  for (const auto& r : rules)
    for (const auto& a : algo::registry())
      if (isReduction(a.coll) && !a.rankOrdered && r.algorithm == a.name &&
          (!r.coll || *r.coll == a.coll))
        throw notRankOrdered(a.coll, a.name,
                             std::string(source) + " rule '" +
                                 (r.coll ? std::string(toString(*r.coll)) + ":" : std::string()) +
                                 r.algorithm + "'");
}

std::optional<std::size_t> parseSize(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  std::size_t mult = 1;
  char last = s.back();
  if (last == 'K' || last == 'k') mult = 1ull << 10;
  if (last == 'M' || last == 'm') mult = 1ull << 20;
  if (last == 'G' || last == 'g') mult = 1ull << 30;
  if (mult != 1) s.remove_suffix(1);
  std::size_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  if (v != 0 && mult > static_cast<std::size_t>(-1) / v) return std::nullopt;
  return v * mult;
}

std::vector<Rule> parseRules(std::string_view text, std::string_view source) {
  std::vector<Rule> rules;
  auto bad = [&](std::string_view rule, const std::string& why) {
    return Error(ErrorCode::InvalidArgument,
                 std::string(source) + ": rule '" + std::string(rule) + "' " + why);
  };
  while (!text.empty()) {
    auto semi = text.find(';');
    std::string_view rule = trim(text.substr(0, semi));
    text = semi == std::string_view::npos ? std::string_view() : text.substr(semi + 1);
    if (rule.empty()) continue;
    std::vector<std::string_view> parts;
    std::string_view rest = rule;
    while (true) {
      auto c = rest.find(':');
      parts.push_back(trim(rest.substr(0, c)));
      if (c == std::string_view::npos) break;
      rest = rest.substr(c + 1);
    }
    if (parts.size() > 3) throw bad(rule, "has more than 3 ':'-separated fields");
    Rule r;
    r.algorithm = std::string(parts.back());
    std::size_t i = 0;
    if (parts.size() >= 2) {
      auto c = parseCollective(parts[0]);
      if (c) {
        r.coll = c;
        i = 1;
      } else if (parts.size() == 3) {
        throw bad(rule, "names unknown collective '" + std::string(parts[0]) + "'");
      }
    }
    if (i + 1 < parts.size()) {
      std::string_view range = parts[i];
      auto dash = range.find('-');
      if (dash == std::string_view::npos) throw bad(rule, "has a size range without '-'");
      auto lo = parseSize(range.substr(0, dash));
      auto hi = parseSize(range.substr(dash + 1));
      if (!lo || !hi || *lo > *hi) throw bad(rule, "has a malformed size range");
      r.minBytes = *lo;
      r.maxBytes = *hi;
    }
    if (!hasAlgorithm(r.coll, r.algorithm))
      throw bad(rule, "names algorithm '" + r.algorithm + "', which " +
                          (r.coll ? std::string(toString(*r.coll)) + " does not have"
                                  : std::string("no collective has")) +
                          " (braid-info lists them)");
    rules.push_back(std::move(r));
  }
  return rules;
}

std::string selectAlgorithm(const std::vector<Rule>& rules, const SelectionInputs& in) {
  for (const auto& r : rules) {
    if (r.coll && *r.coll != in.coll) continue;
    if (in.bytes < r.minBytes || in.bytes >= r.maxBytes) continue;
    const algo::AlgoInfo* a = algo::findAlgorithm(in.coll, r.algorithm);
    if (a == nullptr) continue;
    if (in.deterministic && isReduction(in.coll) && !a->rankOrdered)
      throw notRankOrdered(in.coll, r.algorithm, "a BRAID_ALGO rule");
    return r.algorithm;
  }
  if (in.deterministic && isReduction(in.coll))
    return in.sharedMemory && in.coll != Collective::ReduceScatterv ? "shm_direct" : "rank_ordered";
  if (in.sharedMemory) {
    // Tiny messages: one cache line per rank (shm_ll); the rest through the staging areas.
    constexpr std::size_t kLine = transport::SharedMemoryGroup::kLineBytes;
    const auto ranks = static_cast<std::size_t>(std::max(1, in.worldSize));
    switch (in.coll) {
      case Collective::Allreduce:
      case Collective::Broadcast:
      case Collective::Reduce:
      case Collective::ReduceScatter:
      case Collective::Alltoall:
        return in.bytes <= kLine ? "shm_ll" : "shm_direct";
      case Collective::Allgather:
        return in.bytes <= kLine * ranks ? "shm_ll" : "shm_direct";
      case Collective::Barrier:
        return "shm_ll";
      case Collective::Alltoallv:
      case Collective::Allgatherv:
      case Collective::ReduceScatterv:
        return "shm_direct";
      default:
        break;
    }
  }
  if (in.model != nullptr && in.model->decides()) {
    if (auto choice = in.model->choose(in.coll, in.bytes)) return *choice;
  }
  switch (in.coll) {
    case Collective::Allreduce:
      return in.bytes <= in.smallMessageBytes ? "recursive_doubling" : "ring";
    case Collective::Reduce:
    case Collective::Broadcast:
      return "binomial_tree";
    // Small messages are latency-bound: Bruck and recursive halving take log2(N) steps instead
    // of ring's N-1 and send the same bytes (halving only when N is a power of two; otherwise
    // its folding sends more).
    case Collective::Allgather:
      return in.bytes <= in.smallMessageBytes ? "bruck" : "ring";
    case Collective::ReduceScatter:
      return in.bytes <= in.smallMessageBytes && in.worldSize > 0 &&
                     (in.worldSize & (in.worldSize - 1)) == 0
                 ? "halving_doubling"
                 : "ring";
    case Collective::Allgatherv:
    case Collective::ReduceScatterv:
      return "ring";
    case Collective::Gather:
    case Collective::Scatter:
      return "linear";
    case Collective::Alltoall:
    case Collective::Alltoallv:
      return "pairwise";
    case Collective::Barrier:
      return "dissemination";
    case Collective::Send:
    case Collective::Recv:
      return "direct";
  }
  return "direct";
}

}  // namespace braid::tuning
