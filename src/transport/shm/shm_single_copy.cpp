#include "transport/shm/shm_single_copy.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace braid::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 5;  // after one warm-up round

std::string sizeText(std::size_t b) {
  return b >= (1 << 20) ? std::to_string(b >> 20) + "M" : std::to_string(b >> 10) + "K";
}

}  // namespace

SingleCopyChoice measureSingleCopy(SharedMemoryGroup& g, std::uint64_t tag, Deadline deadline) {
  const auto start = Clock::now();
  const int me = g.rank();
  const int n = g.size();
  const int next = (me + 1) % n;
  const std::size_t half = g.stagingBytes() / 2;
  std::size_t sizes = 0;
  while (sizes < std::size(kSingleCopyProbeSizes) && kSingleCopyProbeSizes[sizes] <= half) ++sizes;
  const std::size_t largest = kSingleCopyProbeSizes[sizes - 1];
  // Private memory on both sides, touched first (no page faults in the timings).
  std::vector<std::uint8_t> src(largest, static_cast<std::uint8_t>(me + 1)), dst(largest, 0);
  // Per size: this rank's fastest staged and single-copy rounds, in nanoseconds.
  std::vector<std::uint64_t> mine(2 * sizes, UINT64_MAX);
  auto ns = [](Clock::time_point t0) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  };
  for (std::size_t i = 0; i < sizes; ++i) {
    const std::size_t s = kSingleCopyProbeSizes[i];
    for (int round = 0; round <= kRounds; ++round) {
      auto t0 = Clock::now();
      std::size_t h = g.beginStep();
      std::memcpy(g.staging(me) + h, src.data(), s);
      g.barrier(tag, deadline);
      std::memcpy(dst.data(), g.staging(next) + h, s);
      const std::uint64_t staged = ns(t0);
      t0 = Clock::now();
      h = g.beginStep();
      const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(src.data()));
      std::memcpy(g.staging(me) + h, &address, sizeof address);
      g.barrier(tag, deadline);
      std::uint64_t theirs = 0;
      std::memcpy(&theirs, g.staging(next) + h, sizeof theirs);
      g.readPeer(next, theirs, dst.data(), s);
      g.barrier(tag, deadline);
      const std::uint64_t single = ns(t0);
      if (round == 0) continue;  // warm-up
      mine[2 * i] = std::min(mine[2 * i], staged);
      mine[2 * i + 1] = std::min(mine[2 * i + 1], single);
    }
  }
  // Every rank's figures to every rank; per size the slowest rank's, the same on all ranks.
  const std::size_t h = g.beginStep();
  std::memcpy(g.staging(me) + h, mine.data(), mine.size() * sizeof(std::uint64_t));
  g.barrier(tag, deadline);
  std::vector<std::uint64_t> slowest(2 * sizes, 0);
  for (int p = 0; p < n; ++p) {
    std::vector<std::uint64_t> theirs(2 * sizes);
    std::memcpy(theirs.data(), g.staging(p) + h, theirs.size() * sizeof(std::uint64_t));
    for (std::size_t k = 0; k < theirs.size(); ++k) slowest[k] = std::max(slowest[k], theirs[k]);
  }
  // The step that most measured sizes agree with: single copy from size k on scores one per
  // size >= k where it won, minus one where it lost; the lowest score wins, never (score 0) on
  // ties. A size whose every round lost its CPU to another process misleads one vote only.
  SingleCopyChoice c;
  int score = 0, best = 0;
  for (std::size_t i = sizes; i-- > 0;) {
    score += slowest[2 * i + 1] < slowest[2 * i] ? -1 : 1;
    if (score < best) {
      best = score;
      c.bytes = kSingleCopyProbeSizes[i];
    }
  }
  std::string figures;
  for (std::size_t i = 0; i < sizes; ++i) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.1f/%.1f", i ? ", " : "",
                  sizeText(kSingleCopyProbeSizes[i]).c_str(),
                  static_cast<double>(slowest[2 * i]) / 1e3,
                  static_cast<double>(slowest[2 * i + 1]) / 1e3);
    figures += buf;
  }
  char took[32];
  std::snprintf(took, sizeof took, "%.1f ms", static_cast<double>(ns(start)) / 1e6);
  c.why = std::string("measured at creation in ") + took + " (" + std::to_string(n) +
          " ranks; us staged/single copy per block: " + figures + ")";
  return c;
}

std::string singleCopyEntry(std::size_t ranks) {
  return "shm_single_copy." + std::to_string(ranks) + "ranks";
}

SingleCopyChoice cachedOrMeasuredSingleCopy(SharedMemoryGroup& g, std::uint64_t tag,
                                            Deadline deadline, const std::string& path,
                                            const machine::TuneKey& key) {
  const std::string name = singleCopyEntry(static_cast<std::size_t>(g.size()));
  // What group rank 0 found, through its staging half: every rank must reach the same answer,
  // since measuring is collective, and only one reading of a file that another job may be
  // rewriting is the same for all.
  struct Found {
    std::uint64_t present = 0;
    std::uint64_t bytes = 0;
    char date[24] = {};
  };
  static_assert(sizeof(Found) <= 4096);
  std::string problem;  // rank 0: why the file had nothing to use
  const std::size_t h = g.beginStep();
  if (g.rank() == 0) {
    Found f;
    const machine::TuneCache c = machine::readTuneCache(path, key);
    if (const machine::TuneEntry* e = c.find(name)) {
      f.present = 1;
      f.bytes = e->value;
      std::snprintf(f.date, sizeof f.date, "%s", e->date.c_str());
    } else if (c.state == machine::TuneCache::State::Corrupt) {
      problem = "; " + path + " was corrupt (" + c.problem + "), measured over";
    } else if (c.state == machine::TuneCache::State::OtherMachine) {
      problem = "; " + path + " was another machine's (" + c.problem + "), measured over";
    }
    std::memcpy(g.staging(0) + h, &f, sizeof f);
  }
  g.barrier(tag, deadline);
  Found f;
  std::memcpy(&f, g.staging(0) + h, sizeof f);
  SingleCopyChoice c;
  if (f.present != 0) {
    c.bytes = f.bytes == machine::kTuneNever ? SIZE_MAX : static_cast<std::size_t>(f.bytes);
    c.why = "cached in " + path + " (measured " + std::string(f.date) + ", " +
            std::to_string(g.size()) + " ranks)";
    return c;
  }
  c = measureSingleCopy(g, tag, deadline);
  if (g.rank() == 0 && !path.empty()) {
    machine::TuneEntry e;
    e.value = c.bytes == SIZE_MAX ? machine::kTuneNever : c.bytes;
    e.date = machine::tuneDateNow();
    e.detail = c.why;
    // Under the file's lock: a process measuring the copy profile at the same time rewrites
    // the file too, and each writer merges into what it read.
    const machine::TuneCacheLock lock(path, 1000);
    const std::string failed = machine::writeTuneCache(path, key, {{name, e}});
    c.why += failed.empty() ? "; kept in " + path : "; not kept: " + failed;
  }
  c.why += problem;
  return c;
}

}  // namespace braid::transport::shm
