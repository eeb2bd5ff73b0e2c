// The cost model's parameters (tuning/cost_model.hpp): parsing bandwidths and latencies, the
// tuning-file format (BRAID_TUNE_FILE, docs/plan.md), and the text forms braid logs and
// braid-plan prints.
#include <braid/error.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/trim.hpp"
#include "tuning/cost_model.hpp"

namespace braid::tuning {
namespace {

using text::trim;

std::optional<double> parseNumber(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

bool endsWithNoCase(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i) {
    char a = s[s.size() - suffix.size() + i];
    char b = suffix[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Six significant digits: readable, and exact enough (every rank parses the same text, so
// they agree bitwise whatever the precision).
std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

// ---------------------------------------------------------------- parameters

std::optional<double> parseBandwidth(std::string_view s) {
  s = trim(s);
  double scale = 1e9;  // GB/s
  for (auto [suffix, mult] : {std::pair<std::string_view, double>{"gbit", 1e9 / 8},
                              {"mbit", 1e6 / 8},
                              {"gb/s", 1e9},
                              {"gbps", 1e9 / 8},
                              {"mb/s", 1e6},
                              {"gb", 1e9},
                              {"mb", 1e6}}) {
    if (endsWithNoCase(s, suffix)) {
      s.remove_suffix(suffix.size());
      scale = mult;
      break;
    }
  }
  auto v = parseNumber(s);
  if (!v || !(*v > 0)) return std::nullopt;
  return *v * scale;
}

std::optional<double> parseLatency(std::string_view s) {
  s = trim(s);
  double scale = 1e-6;  // us
  if (endsWithNoCase(s, "us")) {
    s.remove_suffix(2);
  } else if (endsWithNoCase(s, "ms")) {
    s.remove_suffix(2);
    scale = 1e-3;
  } else if (endsWithNoCase(s, "ns")) {
    s.remove_suffix(2);
    scale = 1e-9;
  }
  auto v = parseNumber(s);
  if (!v || !(*v >= 0)) return std::nullopt;
  return *v * scale;
}

std::string CostParams::format() const {
  std::string s = "# braid cost-model parameters (" + origin + "); BRAID_TUNE_FILE format\n";
  s += "shm.latency_us = " + exact(shm.alpha * 1e6) + "\n";
  s += "shm.bandwidth_GBps = " + exact(1.0 / shm.beta / 1e9) + "\n";
  s += "net.latency_us = " + exact(net.alpha * 1e6) + "\n";
  s += "net.bandwidth_GBps = " + exact(1.0 / net.beta / 1e9) + "\n";
  s += "reduce.bandwidth_GBps = " + exact(1.0 / gamma / 1e9) + "\n";
  return s;
}

std::string CostParams::summary() const {
  auto g = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return std::string(buf);
  };
  return "shm " + g(shm.alpha * 1e6) + " us " + g(1.0 / shm.beta / 1e9) + " GB/s, net " +
         g(net.alpha * 1e6) + " us " + g(1.0 / net.beta / 1e9) + " GB/s, reduce " +
         g(1.0 / gamma / 1e9) + " GB/s (" + origin + ")";
}

CostParams parseCostParams(std::string_view text, std::string_view source,
                           std::vector<Rule>* rules) {
  CostParams p;
  p.origin = std::string(source);
  int lineNo = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++lineNo;
    const std::string where = std::string(source) + ":" + std::to_string(lineNo);
    if (const auto hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    auto bad = [&](const std::string& why) {
      return Error(ErrorCode::InvalidArgument, where + ": '" + std::string(line) + "' " + why);
    };
    if (eq == std::string_view::npos) throw bad("is not 'key = value'");
    const std::string_view key = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    if (key == "algo") {
      auto parsed = parseRules(value, where);
      if (rules != nullptr) rules->insert(rules->end(), parsed.begin(), parsed.end());
      continue;
    }
    const bool latency = key == "shm.latency_us" || key == "net.latency_us";
    const bool bandwidth = key == "shm.bandwidth_GBps" || key == "net.bandwidth_GBps" ||
                           key == "reduce.bandwidth_GBps";
    if (!latency && !bandwidth)
      throw bad("has unknown key '" + std::string(key) +
                "' (known: shm.latency_us, shm.bandwidth_GBps, net.latency_us, "
                "net.bandwidth_GBps, reduce.bandwidth_GBps, algo)");
    const auto v = parseNumber(value);
    if (!v || (latency && *v < 0) || (bandwidth && !(*v > 0)))
      throw bad(latency ? "needs a latency in microseconds >= 0" : "needs a bandwidth in GB/s > 0");
    if (key == "shm.latency_us") p.shm.alpha = *v * 1e-6;
    if (key == "net.latency_us") p.net.alpha = *v * 1e-6;
    if (key == "shm.bandwidth_GBps") p.shm.beta = 1.0 / (*v * 1e9);
    if (key == "net.bandwidth_GBps") p.net.beta = 1.0 / (*v * 1e9);
    if (key == "reduce.bandwidth_GBps") p.gamma = 1.0 / (*v * 1e9);
  }
  return p;
}

CostParams loadCostParams(const std::string& file, std::string_view variable,
                          std::vector<Rule>* rules) {
  std::ifstream in(file);
  if (!in)
    throw Error(ErrorCode::InvalidArgument,
                std::string(variable) + "='" + file + "': cannot open the tuning file");
  std::stringstream ss;
  ss << in.rdbuf();
  CostParams p = parseCostParams(ss.str(), std::string(variable) + "=" + file, rules);
  p.origin = "file " + file;
  return p;
}

std::string formatSeconds(double s) {
  if (s < 1e-3) return fixed(s * 1e6, 1) + " us";
  if (s < 1.0) return fixed(s * 1e3, 2) + " ms";
  return fixed(s, 3) + " s";
}

}  // namespace braid::tuning
