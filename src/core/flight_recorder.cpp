#include "core/flight_recorder.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace braid::core {

const char* toString(OpState s) noexcept {
  switch (s) {
    case OpState::Queued:
      return "queued";
    case OpState::Running:
      return "running";
    case OpState::Done:
      return "done";
    case OpState::Failed:
      return "failed";
  }
  return "?";
}

bool hasRoot(Collective c) noexcept {
  return c == Collective::Reduce || c == Collective::Broadcast || c == Collective::Gather ||
         c == Collective::Scatter;
}
bool isReduction(Collective c) noexcept {
  return c == Collective::Allreduce || c == Collective::Reduce || c == Collective::ReduceScatter ||
         c == Collective::ReduceScatterv;
}

std::string callText(const OpDesc& d, bool withOp) {
  std::string s = std::string(toString(d.coll)) + "(";
  if (d.coll == Collective::Barrier) return s + ")";
  s += toString(d.dtype);
  if (d.coll == Collective::Allgatherv || d.coll == Collective::ReduceScatterv) {
    char hash[32];
    std::snprintf(hash, sizeof hash, "%06" PRIx64, d.countKey & 0xffffff);
    s += ", total count=" + std::to_string(d.count) + ", counts hash=" + hash;
  } else if (d.coll == Collective::Alltoallv) {
    s += ", send count=" + std::to_string(d.count);
  } else {
    s += ", count=" + std::to_string(d.count);
  }
  if (hasRoot(d.coll)) s += ", root=" + std::to_string(d.root);
  if (withOp && isReduction(d.coll)) s += std::string(", op=") + toString(d.op);
  if (d.coll == Collective::Send) s += ", to rank " + std::to_string(d.peer);
  if (d.coll == Collective::Recv) s += ", from rank " + std::to_string(d.peer);
  if (isPointToPoint(d.coll)) s += ", tag " + std::to_string(d.userTag);
  return s + ")";
}

FlightRecorder::FlightRecorder(std::size_t capacity, Clock::time_point origin)
    : ring_(capacity), origin_(origin) {
  if (capacity > 0 && (capacity & (capacity - 1)) == 0) mask_ = capacity - 1;
}

namespace {

// The first bytes of a failed operation's error; out of line, so finished() saves no registers
// for it on the per-operation path.
[[gnu::cold, gnu::noinline]] void keepError(FlightEntry& e, const char* error) {
  std::strncpy(e.error.data(), error, e.error.size() - 1);
  e.error.back() = '\0';
}

}  // namespace

std::uint64_t FlightRecorder::issued(const OpDesc& d, std::uint64_t bytes, Clock::time_point at) {
  std::lock_guard<SpinLock> lk(mu_);
  const std::uint64_t serial = next_++;
  if (!ring_.empty()) {
    FlightEntry& e = ring_[indexOf(serial)];
    e.serial = serial;
    e.desc = d;
    e.bytes = bytes;
    e.algorithm = nullptr;
    e.state = OpState::Queued;
    e.issued = at;
    e.started = e.finished = Clock::time_point{};
    e.lastRank = -1;
    e.error[0] = '\0';
  }
  return serial;
}

std::uint64_t FlightRecorder::begin(const OpDesc& d, std::uint64_t bytes, const char* algorithm,
                                    Clock::time_point at) {
  std::lock_guard<SpinLock> lk(mu_);
  const std::uint64_t serial = next_++;
  FlightEntry* e = ring_.empty() ? nullptr : &ring_[indexOf(serial)];
  if (e != nullptr) {
    e->serial = serial;
    e->desc = d;
    e->bytes = bytes;
    e->issued = at;
    e->finished = Clock::time_point{};
    e->lastRank = -1;
    e->error[0] = '\0';
  }
  markStarted(e, serial, d, algorithm, at);
  return serial;
}

void FlightRecorder::started(std::uint64_t serial, const OpDesc& d, const char* algorithm,
                             Clock::time_point at) {
  std::lock_guard<SpinLock> lk(mu_);
  markStarted(slot(serial), serial, d, algorithm, at);
}

void FlightRecorder::rename(std::uint64_t serial, const char* algorithm) {
  std::lock_guard<SpinLock> lk(mu_);
  if (FlightEntry* e = slot(serial)) e->algorithm = algorithm;
}

void FlightRecorder::markStarted(FlightEntry* e, std::uint64_t serial, const OpDesc& d,
                                 const char* algorithm, Clock::time_point at) {
  if (e != nullptr) {  // null: no ring, or overwritten by a newer operation
    e->algorithm = algorithm;
    e->state = OpState::Running;
    e->started = at;
  }
  if (!isPointToPoint(d.coll)) {
    position_.any = true;
    position_.desc = d;
    position_.state = OpState::Running;
    position_.started = at;
    position_.finished = Clock::time_point{};
    positionSerial_ = serial;
  }
}

void FlightRecorder::finished(std::uint64_t serial, const OpDesc& d, const char* error,
                              Clock::time_point at) {
  std::lock_guard<SpinLock> lk(mu_);
  const OpState state = error != nullptr ? OpState::Failed : OpState::Done;
  if (FlightEntry* e = slot(serial)) {
    e->state = state;
    e->finished = at;
    if (error != nullptr) [[unlikely]]
      keepError(*e, error);
  }
  if (serial == positionSerial_) {
    position_.state = state;
    position_.finished = at;
  }
}

FlightRecorder::Position FlightRecorder::position() const {
  std::lock_guard<SpinLock> lk(mu_);
  return position_;
}

std::vector<OpDesc> FlightRecorder::recentCollectives(std::size_t n) const {
  std::lock_guard<SpinLock> lk(mu_);
  std::vector<OpDesc> out;
  for (std::uint64_t s = next_ - 1; s >= 1 && out.size() < n; --s) {
    const FlightEntry* e = ring_.empty() ? nullptr : &ring_[indexOf(s)];
    if (e == nullptr || e->serial != s) break;
    if (!isPointToPoint(e->desc.coll)) out.push_back(e->desc);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<WaitSample> FlightRecorder::waits() const {
  std::vector<WaitSample> out;
  std::lock_guard<SpinLock> lk(mu_);
  if (ring_.empty() || preciseEvery_ == 0) return out;
  out.reserve(ring_.size());
  const std::uint64_t total = next_ - 1;
  const std::uint64_t first = total >= ring_.size() ? total - ring_.size() + 1 : 1;
  for (std::uint64_t s = first; s <= total; ++s) {
    const FlightEntry& e = ring_[indexOf(s)];
    if (e.serial != s || e.state != OpState::Done || isPointToPoint(e.desc.coll) ||
        e.desc.seq % preciseEvery_ != 0)
      continue;
    out.push_back({e.desc.seq, std::chrono::nanoseconds(e.started.time_since_epoch()).count(),
                   std::chrono::nanoseconds(e.finished.time_since_epoch()).count(),
                   static_cast<std::uint8_t>(e.desc.coll)});
  }
  return out;
}

void FlightRecorder::annotate(const std::vector<StragglerVerdict>& verdicts,
                              std::vector<Clock::time_point>* started) {
  if (started != nullptr) started->assign(verdicts.size(), Clock::time_point{});
  if (verdicts.empty()) return;
  std::lock_guard<SpinLock> lk(mu_);
  if (ring_.empty()) return;
  // Collectives enter the ring in sequence order, as the verdicts come: one merge pass.
  const std::uint64_t total = next_ - 1;
  const std::uint64_t first = total >= ring_.size() ? total - ring_.size() + 1 : 1;
  std::size_t v = 0;
  for (std::uint64_t s = first; s <= total && v < verdicts.size(); ++s) {
    FlightEntry& e = ring_[indexOf(s)];
    if (e.serial != s || isPointToPoint(e.desc.coll)) continue;
    while (v < verdicts.size() && verdicts[v].seq < e.desc.seq) ++v;
    if (v < verdicts.size() && verdicts[v].seq == e.desc.seq) {
      e.lastRank = verdicts[v].lastRank;
      e.lateNs = verdicts[v].lateNs;
      if (started != nullptr) (*started)[v] = e.started;
    }
  }
}

std::string FlightRecorder::dump(const std::string& title) const {
  // Copy under the lock, format without it (operations keep recording meanwhile).
  std::vector<FlightEntry> ring;
  std::uint64_t next = 0;
  {
    std::lock_guard<SpinLock> lk(mu_);
    ring = ring_;
    next = next_;
  }
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - origin_).count();
  };
  const auto now = Clock::now();
  const std::uint64_t total = next - 1;
  const std::uint64_t cap = ring.size();
  const std::uint64_t first = cap == 0 ? total + 1 : (total >= cap ? total - cap + 1 : 1);
  char line[1024];
  std::string out = "=== braid flight recorder: " + title + " ===\n";
  std::snprintf(line, sizeof line,
                "last %" PRIu64 " of %" PRIu64
                " operations (capacity %zu); times in ms since the communicator was created, "
                "now %.3f\n",
                total + 1 - first, total, ring.size(), ms(now));
  out += line;
  if (ring.empty()) out += "(BRAID_FLIGHT_RECORDER=0: no operations kept)\n";
  for (std::uint64_t s = first; s <= total; ++s) {
    const FlightEntry& e = ring[s % ring.size()];
    std::string what =
        isPointToPoint(e.desc.coll) ? std::string("p2p   ") : "op #" + std::to_string(e.desc.seq);
    std::string call = callText(e.desc, true);
    int n = std::snprintf(
        line, sizeof line, "  [%" PRIu64 "] %-8s %-44s %10" PRIu64 " B  %-20s %-7s issued %.3f",
        e.serial, what.c_str(), call.c_str(), e.bytes, e.algorithm != nullptr ? e.algorithm : "-",
        toString(e.state), ms(e.issued));
    std::string row(line, static_cast<std::size_t>(std::max(0, std::min<int>(n, sizeof line - 1))));
    if (e.state != OpState::Queued || e.started != Clock::time_point{}) {
      if (e.started != Clock::time_point{}) {
        std::snprintf(line, sizeof line, "  started %.3f", ms(e.started));
        row += line;
      }
      if (e.state == OpState::Running) {
        std::snprintf(line, sizeof line, "  (running for %.1f ms)",
                      std::chrono::duration<double, std::milli>(now - e.started).count());
        row += line;
      } else if (e.finished != Clock::time_point{}) {
        std::snprintf(line, sizeof line, "  finished %.3f (%.3f ms)", ms(e.finished),
                      std::chrono::duration<double, std::milli>(
                          e.finished - (e.started != Clock::time_point{} ? e.started : e.issued))
                          .count());
        row += line;
      }
      if (e.state == OpState::Done && preciseEvery_ != 0 && !isPointToPoint(e.desc.coll) &&
          e.desc.seq % preciseEvery_ == 0) {
        if (e.lastRank >= 0)
          std::snprintf(line, sizeof line, "  last: rank %d (+%.1f us)", e.lastRank,
                        static_cast<double>(e.lateNs) / 1e3);
        else
          std::snprintf(line, sizeof line, "  last: not exchanged yet");
        row += line;
      }
    } else {
      std::snprintf(line, sizeof line, "  (queued for %.1f ms)",
                    std::chrono::duration<double, std::milli>(now - e.issued).count());
      row += line;
    }
    if (e.state == OpState::Failed && e.error[0] != '\0')
      row += std::string("\n      error: ") + e.error.data();
    out += row + "\n";
  }
  out += "=== end of flight recorder: " + title + " ===\n";
  return out;
}

}  // namespace braid::core
