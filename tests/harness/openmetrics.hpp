// A strict reader of the OpenMetrics text format (https://openmetrics.io, text exposition 1.0),
// written from the specification for the tests: metadata before samples, each family in one
// block, sample names as the family's type allows (counter: _total/_created; histogram:
// _bucket/_count/_sum/_created; gauge: the name itself), a UNIT that is the name's suffix,
// quoted and escaped label values without duplicates, numbers as floats, histogram buckets
// cumulative with ascending "le" ending in +Inf and _count equal to it, and "# EOF" as the
// last line. Throws std::runtime_error naming the line on anything else.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace braid::test {

struct OmSample {
  std::string family, name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct OmExposition {
  std::map<std::string, std::string> types;  // family -> type
  std::vector<OmSample> samples;
  /// Sum of the values of samples named `name` whose labels include `match`.
  double sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    double s = 0;
    for (const OmSample& x : samples) {
      if (x.name != name) continue;
      bool ok = true;
      for (const auto& [k, v] : match) {
        auto it = x.labels.find(k);
        ok = ok && it != x.labels.end() && it->second == v;
      }
      if (ok) s += x.value;
    }
    return s;
  }
  std::size_t count(const std::string& name) const {
    std::size_t n = 0;
    for (const OmSample& x : samples) n += x.name == name;
    return n;
  }
};

inline double omNumber(const std::string& t, const std::string& where) {
  if (t == "+Inf") return HUGE_VAL;
  if (t == "-Inf") return -HUGE_VAL;
  if (t == "NaN") return NAN;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || t.find_first_of("iInN") != std::string::npos)
    throw std::runtime_error(where + ": not a number: '" + t + "'");
  return v;
}

inline bool omName(const std::string& n) {
  if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_' || n[0] == ':'))
    return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':')) return false;
  return true;
}

inline OmExposition parseOpenMetrics(const std::string& text) {
  OmExposition out;
  if (text.empty() || text.back() != '\n') throw std::runtime_error("does not end with a newline");
  std::vector<std::string> lines;
  {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  if (lines.empty() || lines.back() != "# EOF") throw std::runtime_error("last line is not # EOF");
  std::set<std::string> closed;  // families whose block ended
  std::string current;           // the family of the block being read
  std::set<std::string> seenMeta;
  bool currentHasSamples = false;
  // Histogram checks per series (family + labels without le).
  struct Hist {
    double lastLe = -HUGE_VAL, lastCount = -1, inf = -1, count = -1;
    bool sum = false;
  };
  std::map<std::string, Hist> hists;
  auto startFamily = [&](const std::string& f, const std::string& where) {
    if (f == current) return;
    if (closed.count(f)) throw std::runtime_error(where + ": family " + f + " split in two blocks");
    if (!current.empty()) closed.insert(current);
    current = f;
    currentHasSamples = false;
    seenMeta.clear();
  };
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    const std::string& l = lines[i];
    const std::string where = "line " + std::to_string(i + 1) + " '" + l + "'";
    if (l.empty()) throw std::runtime_error(where + ": empty line");
    if (l[0] == '#') {
      std::istringstream in(l);
      std::string hash, kind, name;
      in >> hash >> kind >> name;
      if (hash != "#" || l.compare(0, 2, "# ") != 0)
        throw std::runtime_error(where + ": bad comment");
      if (kind != "TYPE" && kind != "UNIT" && kind != "HELP")
        throw std::runtime_error(where + ": unknown metadata");
      if (!omName(name)) throw std::runtime_error(where + ": bad metric name");
      startFamily(name, where);
      if (currentHasSamples) throw std::runtime_error(where + ": metadata after samples");
      if (!seenMeta.insert(kind).second) throw std::runtime_error(where + ": repeated " + kind);
      std::string rest;
      std::getline(in, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "TYPE") {
        static const std::set<std::string> kTypes = {"counter",        "gauge",    "histogram",
                                                     "gaugehistogram", "stateset", "info",
                                                     "summary",        "unknown"};
        if (!kTypes.count(rest)) throw std::runtime_error(where + ": unknown type");
        out.types[name] = rest;
      } else if (kind == "UNIT") {
        if (rest.empty() || name.size() <= rest.size() + 1 ||
            name.compare(name.size() - rest.size() - 1, std::string::npos, "_" + rest) != 0)
          throw std::runtime_error(where + ": the unit is not the name's suffix");
      }
      continue;
    }
    // A sample: name[{labels}] value
    std::size_t p = 0;
    while (p < l.size() && l[p] != '{' && l[p] != ' ') ++p;
    OmSample s;
    s.name = l.substr(0, p);
    if (!omName(s.name)) throw std::runtime_error(where + ": bad sample name");
    if (p < l.size() && l[p] == '{') {
      ++p;
      while (p < l.size() && l[p] != '}') {
        std::size_t eq = l.find('=', p);
        if (eq == std::string::npos) throw std::runtime_error(where + ": label without =");
        const std::string key = l.substr(p, eq - p);
        if (!omName(key) || key.find(':') != std::string::npos)
          throw std::runtime_error(where + ": bad label name");
        p = eq + 1;
        if (p >= l.size() || l[p] != '"') throw std::runtime_error(where + ": unquoted label");
        ++p;
        std::string value;
        for (;; ++p) {
          if (p >= l.size()) throw std::runtime_error(where + ": unterminated label value");
          if (l[p] == '"') break;
          if (l[p] == '\\') {
            ++p;
            if (p >= l.size()) throw std::runtime_error(where + ": bad escape");
            if (l[p] == 'n')
              value += '\n';
            else if (l[p] == '\\' || l[p] == '"')
              value += l[p];
            else
              throw std::runtime_error(where + ": bad escape");
          } else {
            value += l[p];
          }
        }
        ++p;
        if (!s.labels.emplace(key, value).second)
          throw std::runtime_error(where + ": duplicate label " + key);
        if (p < l.size() && l[p] == ',') ++p;
      }
      if (p >= l.size()) throw std::runtime_error(where + ": unterminated labels");
      ++p;
    }
    if (p >= l.size() || l[p] != ' ') throw std::runtime_error(where + ": no value");
    const std::string valueText = l.substr(p + 1);
    if (valueText.find(' ') != std::string::npos)
      throw std::runtime_error(where + ": timestamps/exemplars not expected");
    s.value = omNumber(valueText, where);
    // The family: the current one, with a suffix its type allows.
    const auto typeIt = out.types.find(current);
    if (current.empty() || typeIt == out.types.end())
      throw std::runtime_error(where + ": sample without # TYPE");
    const std::string& type = typeIt->second;
    const std::string suffix = s.name.compare(0, current.size(), current) == 0
                                   ? s.name.substr(current.size())
                                   : std::string("?");
    std::set<std::string> allowed;
    if (type == "counter") allowed = {"_total", "_created"};
    if (type == "gauge" || type == "unknown") allowed = {""};
    if (type == "histogram") allowed = {"_bucket", "_count", "_sum", "_created"};
    if (!allowed.count(suffix))
      throw std::runtime_error(where + ": sample name not allowed in " + type + " " + current);
    if (type == "counter" && suffix == "_total" && (s.value < 0 || std::isnan(s.value)))
      throw std::runtime_error(where + ": negative counter");
    if (type == "histogram") {
      auto labels = s.labels;
      labels.erase("le");
      std::string key = current;
      for (const auto& [k, v] : labels) key += "," + k + "=" + v;
      Hist& h = hists[key];
      if (suffix == "_bucket") {
        auto le = s.labels.find("le");
        if (le == s.labels.end()) throw std::runtime_error(where + ": bucket without le");
        const double bound = omNumber(le->second, where);
        if (bound <= h.lastLe) throw std::runtime_error(where + ": le not ascending");
        if (s.value < h.lastCount) throw std::runtime_error(where + ": buckets not cumulative");
        h.lastLe = bound;
        h.lastCount = s.value;
        if (std::isinf(bound)) h.inf = s.value;
      } else if (suffix == "_count") {
        h.count = s.value;
      } else if (suffix == "_sum") {
        h.sum = true;
      }
    }
    s.family = current;
    currentHasSamples = true;
    out.samples.push_back(std::move(s));
  }
  for (const auto& [key, h] : hists) {
    if (h.inf < 0) throw std::runtime_error("histogram " + key + " has no +Inf bucket");
    if (h.count != h.inf) throw std::runtime_error("histogram " + key + ": _count != +Inf bucket");
    if (!h.sum) throw std::runtime_error("histogram " + key + " has no _sum");
  }
  return out;
}

}  // namespace braid::test
