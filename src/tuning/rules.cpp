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

namespace {

// The default table: per collective, the rows in order of preference, each with a condition.
// The selector takes the first entry whose row can run (algo::cannotRun) and whose condition
// holds; Model is the cost model's choice where it decides. Constraints do the filtering:
// shm_ll holds only for messages that fit a line and shm_direct only with a shared group;
// deterministic mode leaves only the rank-ordered rows of a reduction.
enum class When : std::uint8_t {
  Always,
  Small,            // bytes <= smallMessageBytes: latency-bound, log2(N)-step algorithms
  SmallPowerOfTwo,  // ... and N a power of two (otherwise halving's folding sends more)
  Model,            // the cost model's choice, where it decides
};

struct DefaultEntry {
  Collective coll;
  const char* algorithm;  // nullptr for When::Model
  When when;
};

constexpr DefaultEntry kDefaults[] = {
    {Collective::Allreduce, "shm_ll", When::Always},
    {Collective::Allreduce, "shm_direct", When::Always},
    {Collective::Allreduce, nullptr, When::Model},
    {Collective::Allreduce, "recursive_doubling", When::Small},
    {Collective::Allreduce, "ring", When::Always},
    {Collective::Allreduce, "rank_ordered", When::Always},
    {Collective::Reduce, "shm_ll", When::Always},
    {Collective::Reduce, "shm_direct", When::Always},
    {Collective::Reduce, nullptr, When::Model},
    {Collective::Reduce, "binomial_tree", When::Always},
    {Collective::Reduce, "rank_ordered", When::Always},
    {Collective::Broadcast, "shm_ll", When::Always},
    {Collective::Broadcast, "shm_direct", When::Always},
    {Collective::Broadcast, nullptr, When::Model},
    {Collective::Broadcast, "binomial_tree", When::Always},
    {Collective::Allgather, "shm_ll", When::Always},
    {Collective::Allgather, "shm_direct", When::Always},
    {Collective::Allgather, nullptr, When::Model},
    {Collective::Allgather, "bruck", When::Small},
    {Collective::Allgather, "ring", When::Always},
    {Collective::Allgatherv, "shm_direct", When::Always},
    {Collective::Allgatherv, "ring", When::Always},
    {Collective::ReduceScatter, "shm_ll", When::Always},
    {Collective::ReduceScatter, "shm_direct", When::Always},
    {Collective::ReduceScatter, nullptr, When::Model},
    {Collective::ReduceScatter, "halving_doubling", When::SmallPowerOfTwo},
    {Collective::ReduceScatter, "ring", When::Always},
    {Collective::ReduceScatter, "rank_ordered", When::Always},
    {Collective::ReduceScatterv, "shm_direct", When::Always},
    {Collective::ReduceScatterv, "ring", When::Always},
    {Collective::ReduceScatterv, "rank_ordered", When::Always},
    {Collective::Gather, "linear", When::Always},
    {Collective::Scatter, "linear", When::Always},
    {Collective::Alltoall, "shm_ll", When::Always},
    {Collective::Alltoall, "shm_direct", When::Always},
    {Collective::Alltoall, nullptr, When::Model},
    {Collective::Alltoall, "pairwise", When::Always},
    {Collective::Alltoallv, "shm_direct", When::Always},
    {Collective::Alltoallv, "pairwise", When::Always},
    {Collective::Barrier, "shm_ll", When::Always},
    {Collective::Barrier, "dissemination", When::Always},
};

bool holds(When when, const SelectionInputs& in) {
  switch (when) {
    case When::Always:
    case When::Model:
      return true;
    case When::Small:
      return in.bytes <= in.smallMessageBytes;
    case When::SmallPowerOfTwo:
      return in.bytes <= in.smallMessageBytes && in.worldSize > 0 &&
             (in.worldSize & (in.worldSize - 1)) == 0;
  }
  return false;
}

Error cannotRunError(const algo::AlgoInfo& row, algo::Constraint why, const SelectionInputs& in) {
  return Error(ErrorCode::InvalidArgument,
               "the forced algorithm '" + std::string(row.name) + "' cannot run " +
                   toString(in.coll) + " of " + std::to_string(in.bytes) + " bytes on " +
                   std::to_string(in.worldSize) + " ranks: it " + algo::describe(why, row) +
                   " (BRAID_ALGO_FORCE=1 / braid-perf --algo runs nothing else in its place)");
}

}  // namespace

algo::Setting settingOf(const SelectionInputs& in) noexcept {
  return {in.worldSize, in.bytes, in.sharedMemory, in.topo, in.deterministic};
}

Selection select(const std::vector<Rule>& rules, const SelectionInputs& in) {
  Selection out;
  const algo::Setting setting = settingOf(in);
  for (const auto& r : rules) {
    if (r.coll && *r.coll != in.coll) continue;
    if (in.bytes < r.minBytes || in.bytes >= r.maxBytes) continue;
    const algo::AlgoInfo* a = algo::findAlgorithm(in.coll, r.algorithm);
    if (a == nullptr) continue;
    if (in.deterministic && isReduction(in.coll) && !a->rankOrdered)
      throw notRankOrdered(in.coll, r.algorithm, "a BRAID_ALGO rule");
    const algo::Constraint why = algo::cannotRun(*a, setting);
    if (why == algo::Constraint::None) {
      out.algorithm = a;
      out.reason = Selection::Reason::Rule;
      return out;
    }
    if (in.forced) throw cannotRunError(*a, why, in);
    if (out.skippedRule == nullptr) {
      out.skippedRule = &r;
      out.skippedRow = a;
      out.skippedBecause = why;
    }
  }
  for (const DefaultEntry& e : kDefaults) {
    if (e.coll != in.coll || !holds(e.when, in)) continue;
    const algo::AlgoInfo* a = nullptr;
    if (e.when == When::Model) {
      if (in.model == nullptr || !in.model->decides()) continue;
      const auto choice = in.model->choose(in.coll, in.bytes);
      if (!choice) continue;
      a = algo::findAlgorithm(in.coll, *choice);
    } else {
      a = algo::findAlgorithm(in.coll, e.algorithm);
    }
    if (a == nullptr || algo::cannotRun(*a, setting) != algo::Constraint::None) continue;
    out.algorithm = a;
    out.reason = e.when == When::Model ? Selection::Reason::CostModel : Selection::Reason::Default;
    return out;
  }
  return out;  // send / recv: no rows
}

std::string selectAlgorithm(const std::vector<Rule>& rules, const SelectionInputs& in) {
  const Selection s = select(rules, in);
  return s.algorithm != nullptr ? s.algorithm->name : "direct";
}

}  // namespace braid::tuning
