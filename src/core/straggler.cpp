#include "core/straggler.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>

namespace braid::core {

namespace {

constexpr std::uint32_t kMagic = 0x57414954;    // "WAIT"
constexpr std::size_t kHeader = 4 + 8 + 4;      // magic, round, count
constexpr std::size_t kRecord = 8 + 8 + 8 + 1;  // seq, start, finish, collective

template <typename T>
void put(std::vector<std::uint8_t>& out, T v) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

template <typename T>
T take(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string micros(std::int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f us", static_cast<double>(ns) / 1e3);
  return buf;
}

}  // namespace

std::vector<std::uint8_t> encodeWaits(std::uint64_t round, const std::vector<WaitSample>& s) {
  std::vector<std::uint8_t> out;
  out.reserve(kHeader + kRecord * s.size());
  put(out, kMagic);
  put(out, round);
  put(out, static_cast<std::uint32_t>(s.size()));
  for (const WaitSample& w : s) {
    put(out, w.seq);
    put(out, w.startNs);
    put(out, w.finishNs);
    put(out, w.coll);
  }
  return out;
}

std::optional<std::pair<std::uint64_t, std::vector<WaitSample>>> decodeWaits(
    const std::vector<std::uint8_t>& bytes) {
  if (bytes.size() < kHeader || take<std::uint32_t>(bytes.data()) != kMagic) return std::nullopt;
  const auto round = take<std::uint64_t>(bytes.data() + 4);
  const auto n = take<std::uint32_t>(bytes.data() + 12);
  if (bytes.size() != kHeader + kRecord * static_cast<std::size_t>(n)) return std::nullopt;
  std::vector<WaitSample> s(n);
  const std::uint8_t* p = bytes.data() + kHeader;
  for (WaitSample& w : s) {
    w.seq = take<std::uint64_t>(p);
    w.startNs = take<std::int64_t>(p + 8);
    w.finishNs = take<std::int64_t>(p + 16);
    w.coll = p[24];
    p += kRecord;
  }
  return std::make_pair(round, std::move(s));
}

StragglerStats::StragglerStats(int size, std::uint64_t every)
    : size_(size),
      every_(every == 0 ? 1 : every),
      last_(size),
      lateSum_(size),
      lateMax_(size),
      peerWait_(size) {}

namespace {

// Multiples of `every` in [from, upper].
std::uint64_t sampledIn(std::uint64_t from, std::uint64_t upper, std::uint64_t every) {
  return upper / every - (from == 0 ? 0 : (from - 1) / every) + (from == 0 ? 1 : 0);
}

}  // namespace

bool StragglerStats::synchronizing(Collective c) {
  switch (c) {
    case Collective::Allreduce:
    case Collective::Allgather:
    case Collective::Allgatherv:
    case Collective::ReduceScatter:
    case Collective::ReduceScatterv:
    case Collective::Alltoall:
    case Collective::Alltoallv:
    case Collective::Barrier:
      return true;
    default:
      return false;
  }
}

namespace {

std::int64_t median(std::vector<std::int64_t>& v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

void StragglerStats::analyze(const std::vector<std::optional<std::vector<WaitSample>>>& windows,
                             const std::function<void(const StragglerVerdict&)>& verdict) {
  if (size_ < 2 || static_cast<int>(windows.size()) != size_) return;
  // Up to the smallest "newest" sequence number: beyond it some rank has not finished yet.
  std::uint64_t upper = ~std::uint64_t{0};
  for (const auto& w : windows) {
    if (!w || w->empty()) return;
    std::uint64_t newest = 0;
    for (const WaitSample& s : *w) newest = std::max(newest, s.seq);
    upper = std::min(upper, newest);
  }
  const std::uint64_t from = any_ ? lastSeq_ + 1 : 0;
  if (upper < from) return;
  // seq -> every rank's stamps (all of the window up to `upper`: older rows still help the
  // clock offsets).
  struct Row {
    std::vector<std::int64_t> start, finish;
    int have = 0;
    std::uint8_t coll = 0;
  };
  std::unordered_map<std::uint64_t, Row> rows;
  for (int r = 0; r < size_; ++r)
    for (const WaitSample& s : *windows[r]) {
      if (s.seq > upper) continue;
      Row& row = rows[s.seq];
      if (row.start.empty()) {
        row.start.assign(size_, 0);
        row.finish.assign(size_, 0);
        row.coll = s.coll;
      }
      if (row.coll != s.coll) continue;  // not the same call (a mismatch): never joined
      row.have += row.finish[r] == 0 && row.start[r] == 0;
      row.start[r] = s.startNs;
      row.finish[r] = s.finishNs;
    }
  std::vector<std::uint64_t> complete;
  for (const auto& [seq, row] : rows)
    if (row.have == size_) complete.push_back(seq);
  std::sort(complete.begin(), complete.end());
  if (complete.empty()) {
    missed_ += sampledIn(from, upper, every_);
    lastSeq_ = upper;
    any_ = true;
    return;
  }
  // Clock offsets against rank 0, from the finishes of synchronizing collectives (else all).
  bool anySync = false;
  for (std::uint64_t seq : complete)
    anySync = anySync || synchronizing(static_cast<Collective>(rows[seq].coll));
  std::vector<std::int64_t> offset(size_, 0), diffs;
  for (int r = 1; r < size_; ++r) {
    diffs.clear();
    for (std::uint64_t seq : complete) {
      const Row& row = rows[seq];
      if (!anySync || synchronizing(static_cast<Collective>(row.coll)))
        diffs.push_back(row.finish[r] - row.finish[0]);
    }
    offset[r] = median(diffs);
  }
  std::vector<std::int64_t> arrival(size_), others;
  std::uint64_t analyzedNow = 0;
  for (std::uint64_t seq : complete) {
    if (seq < from) continue;
    const Row& row = rows[seq];
    int last = 0;
    for (int r = 0; r < size_; ++r) {
      arrival[r] = row.start[r] - offset[r];
      if (arrival[r] > arrival[last]) last = r;
    }
    others.clear();
    for (int r = 0; r < size_; ++r)
      if (r != last) others.push_back(arrival[r]);
    const std::int64_t late = std::max<std::int64_t>(arrival[last] - median(others), 0);
    ++last_[last];
    lateSum_[last] += late;
    lateMax_[last] = std::max(lateMax_[last], late);
    for (int r = 0; r < size_; ++r) peerWait_[r] += arrival[last] - arrival[r];
    StragglerVerdict v{seq, static_cast<Collective>(row.coll), last, late};
    latest_ = v;
    if (verdict) verdict(v);
    ++analyzedNow;
  }
  analyzed_ += analyzedNow;
  missed_ += sampledIn(from, upper, every_) - std::min(analyzedNow, sampledIn(from, upper, every_));
  lastSeq_ = upper;
  any_ = true;
}

int StragglerStats::topRank() const {
  int top = -1;
  for (int r = 0; r < size_; ++r)
    if (last_[r] > 0 && (top < 0 || last_[r] > last_[top])) top = r;
  return top;
}

std::int64_t StragglerStats::meanLateNs(int rank) const {
  return last_[rank] == 0 ? 0 : lateSum_[rank] / static_cast<std::int64_t>(last_[rank]);
}

std::string StragglerStats::report(const std::string& commId) const {
  std::string out = "straggler report, communicator " + commId + ", " + std::to_string(size_) +
                    " ranks: " + std::to_string(analyzed_) + " collectives analyzed";
  if (missed_ > 0)
    out += " (" + std::to_string(missed_) + " left some rank's flight recorder before an exchange)";
  out += "\n";
  if (analyzed_ == 0) return out + "  nothing to attribute yet\n";
  std::vector<int> order;
  for (int r = 0; r < size_; ++r)
    if (last_[r] > 0) order.push_back(r);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return last_[a] != last_[b] ? last_[a] > last_[b] : a < b; });
  for (int r : order) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f%%",
                  100.0 * static_cast<double>(last_[r]) / static_cast<double>(analyzed_));
    out += "  rank " + std::to_string(r) + " arrived last in " + std::to_string(last_[r]) + " of " +
           std::to_string(analyzed_) + " (" + pct + "), late by " + micros(meanLateNs(r)) +
           " on average (max " + micros(lateMax_[r]) + ")\n";
  }
  out += "  waited for the last rank:";
  for (int r = 0; r < size_; ++r) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s rank %d %.3f ms", r == 0 ? "" : ",", r,
                  static_cast<double>(peerWait_[r]) / 1e6);
    out += buf;
  }
  return out + "\n";
}

}  // namespace braid::core
