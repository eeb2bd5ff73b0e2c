#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/text.hpp"

namespace braid::check {

using tools::jsonString;

const char* toString(Status s) {
  switch (s) {
    case Status::Pass:
      return "PASS";
    case Status::Warn:
      return "WARN";
    case Status::Fail:
      return "FAIL";
    case Status::Skipped:
      return "SKIP";
  }
  return "?";
}

PairInfo* CheckReport::pair(int a, int b) {
  if (a > b) std::swap(a, b);
  const auto it = std::find_if(pairs.begin(), pairs.end(),
                               [&](const PairInfo& p) { return p.a == a && p.b == b; });
  return it == pairs.end() ? nullptr : &*it;
}

const PairInfo* CheckReport::pair(int a, int b) const {
  return const_cast<CheckReport*>(this)->pair(a, b);
}

void printMatrix(std::ostream& os, const CheckReport& r, const char* title, bool latency) {
  os << "  " << title << " (row, column: ranks; ! = outlier)\n";
  char cell[64];
  std::snprintf(cell, sizeof cell, "  %6s", "");
  os << cell;
  for (int c = 0; c < r.nranks; ++c) {
    std::snprintf(cell, sizeof cell, " %9d", c);
    os << cell;
  }
  os << "\n";
  for (int row = 0; row < r.nranks; ++row) {
    std::snprintf(cell, sizeof cell, "  %6d", row);
    os << cell;
    for (int c = 0; c < r.nranks; ++c) {
      const PairInfo* p = row == c ? nullptr : r.pair(row, c);
      const double v = p == nullptr ? -1 : (latency ? p->latencyUs : p->bandwidthGBps);
      if (v < 0) {
        std::snprintf(cell, sizeof cell, " %9s", "-");
      } else {
        const bool outlier = latency ? p->latencyOutlier : p->bandwidthOutlier;
        std::snprintf(cell, sizeof cell, " %8.*f%c", latency ? 1 : 3, v, outlier ? '!' : ' ');
      }
      os << cell;
    }
    os << "\n";
  }
}

namespace {

std::string number(double v, int precision = 3) {
  if (v < 0) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string stringList(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + jsonString(v[i]);
  return out + "]";
}

}  // namespace

void writeJson(std::ostream& os, const CheckReport& r) {
  os << "{\n  \"tool\": \"braid-check\",\n  \"version\": " << jsonString(r.version)
     << ",\n  \"passed\": " << (r.exitCode == 0 ? "true" : "false")
     << ",\n  \"exit_code\": " << r.exitCode << ",\n  \"nranks\": " << r.nranks
     << ",\n  \"launch\": " << jsonString(r.launch) << ",\n  \"store\": " << jsonString(r.store)
     << ",\n  \"timeout_s\": " << number(r.timeoutS)
     << ",\n  \"probe\": {\"latency_bytes\": " << r.latencyBytes
     << ", \"latency_iters\": " << r.latencyIters << ", \"bandwidth_bytes\": " << r.bandwidthBytes
     << ", \"bandwidth_iters\": " << r.bandwidthIters
     << ", \"collective_bytes\": " << r.collectiveBytes << "},\n  \"stages\": [";
  for (std::size_t i = 0; i < r.stages.size(); ++i)
    os << (i ? ",\n    " : "\n    ") << "{\"name\": " << jsonString(r.stages[i].name)
       << ", \"status\": " << jsonString(toString(r.stages[i].status))
       << ", \"detail\": " << jsonString(r.stages[i].detail) << "}";
  os << "\n  ],\n  \"ranks\": [";
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const RankInfo& k = r.ranks[i];
    os << (i ? ",\n    " : "\n    ") << "{\"rank\": " << i
       << ", \"joined\": " << (k.joined ? "true" : "false") << ", \"host\": " << jsonString(k.host)
       << ", \"address\": " << jsonString(k.address) << ", \"pid\": " << k.pid
       << ", \"store_connect_ms\": " << number(k.joined ? k.storeConnectMs : -1) << "}";
  }
  os << "\n  ],\n  \"pairs\": [";
  for (std::size_t i = 0; i < r.pairs.size(); ++i) {
    const PairInfo& p = r.pairs[i];
    os << (i ? ",\n    " : "\n    ") << "{\"a\": " << p.a << ", \"b\": " << p.b
       << ", \"path\": " << jsonString(p.path) << ", \"endpoint_a\": " << jsonString(p.endpointA)
       << ", \"endpoint_b\": " << jsonString(p.endpointB)
       << ", \"status\": " << jsonString(toString(p.status))
       << ", \"error\": " << jsonString(p.error) << ", \"rtt_us\": " << number(p.rttUs)
       << ", \"latency_us\": " << number(p.latencyUs)
       << ", \"bandwidth_gbps\": " << number(p.bandwidthGBps, 6)
       << ", \"latency_outlier\": " << (p.latencyOutlier ? "true" : "false")
       << ", \"bandwidth_outlier\": " << (p.bandwidthOutlier ? "true" : "false") << "}";
  }
  os << "\n  ],\n";
  // Matrices indexed [row][column], symmetric, null on the diagonal and where not measured.
  auto matrix = [&](const char* name, auto value) {
    os << "  \"" << name << "\": [";
    for (int row = 0; row < r.nranks; ++row) {
      os << (row ? ",\n    [" : "\n    [");
      for (int c = 0; c < r.nranks; ++c) {
        const PairInfo* p = row == c ? nullptr : r.pair(row, c);
        os << (c ? ", " : "") << (p == nullptr ? std::string("null") : value(*p));
      }
      os << "]";
    }
    os << "\n  ],\n";
  };
  matrix("latency_us", [](const PairInfo& p) { return number(p.latencyUs); });
  matrix("bandwidth_gbps", [](const PairInfo& p) { return number(p.bandwidthGBps, 6); });
  matrix("paths", [](const PairInfo& p) { return jsonString(p.path); });
  os << "  \"collectives\": [";
  for (std::size_t i = 0; i < r.collectives.size(); ++i) {
    const CollectiveInfo& c = r.collectives[i];
    os << (i ? ",\n    " : "\n    ") << "{\"name\": " << jsonString(c.name)
       << ", \"algo\": " << jsonString(c.algo) << ", \"bytes\": " << c.bytes
       << ", \"time_us\": " << number(c.timeUs) << ", \"wrong\": " << c.wrong
       << ", \"status\": " << jsonString(toString(c.status))
       << ", \"error\": " << jsonString(c.error) << "}";
  }
  os << "\n  ],\n  \"failures\": " << stringList(r.failures)
     << ",\n  \"warnings\": " << stringList(r.warnings)
     << ",\n  \"straggler\": " << jsonString(r.straggler) << "\n}\n";
}

}  // namespace braid::check
