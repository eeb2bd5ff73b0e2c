#include "transport/shm/shm_single_copy.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "common/machine.hpp"
#include "common/step_rule.hpp"

namespace braid::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 5;  // after one warm-up round

std::string sizeText(std::size_t b) {
  return b >= (1 << 20) ? std::to_string(b >> 20) + "M" : std::to_string(b >> 10) + "K";
}

}  // namespace

ChunkChoice chunkFromStaged(const std::uint64_t* stagedNs, std::size_t sizes) {
  ChunkChoice c;
  double best = 0;
  for (std::size_t i = 0; i < sizes; ++i) {
    if (kSingleCopyProbeSizes[i] < kMinMeasuredChunk || stagedNs[i] == 0) continue;
    const double perByte =
        static_cast<double>(stagedNs[i]) / static_cast<double>(kSingleCopyProbeSizes[i]);
    if (best == 0 || perByte < best) best = perByte;
  }
  if (best == 0) return c;
  std::string figures;
  for (std::size_t i = 0; i < sizes; ++i) {
    if (kSingleCopyProbeSizes[i] < kMinMeasuredChunk || stagedNs[i] == 0) continue;
    const double perByte =
        static_cast<double>(stagedNs[i]) / static_cast<double>(kSingleCopyProbeSizes[i]);
    if (c.bytes == 0 && perByte <= best * 1.1) c.bytes = kSingleCopyProbeSizes[i];
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.2f", figures.empty() ? "" : ", ",
                  sizeText(kSingleCopyProbeSizes[i]).c_str(), perByte * 1e3);
    figures += buf;
  }
  c.why =
      "the smallest staged block within 10% of the fastest per byte (ps per byte: " + figures + ")";
  return c;
}

DirectChoice measureDirect(SharedMemoryGroup& g, std::uint64_t tag, Deadline deadline,
                           bool singleCopy) {
  const auto start = Clock::now();
  const machine::CpuShare share;
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
      std::uint64_t single = 0;
      if (singleCopy) {
        t0 = Clock::now();
        h = g.beginStep();
        const auto address =
            static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(src.data()));
        std::memcpy(g.staging(me) + h, &address, sizeof address);
        g.barrier(tag, deadline);
        std::uint64_t theirs = 0;
        std::memcpy(&theirs, g.staging(next) + h, sizeof theirs);
        g.readPeer(next, theirs, dst.data(), s);
        g.barrier(tag, deadline);
        single = ns(t0);
      }
      if (round == 0) continue;  // warm-up
      mine[2 * i] = std::min(mine[2 * i], staged);
      mine[2 * i + 1] = std::min(mine[2 * i + 1], single);
    }
  }
  // Every rank's figures to every rank; per size the slowest rank's, the same on all ranks;
  // last, how long the rank was off its CPU (the worst rank's).
  mine.push_back(share.offCpuPermille());
  const std::size_t h = g.beginStep();
  std::memcpy(g.staging(me) + h, mine.data(), mine.size() * sizeof(std::uint64_t));
  g.barrier(tag, deadline);
  std::vector<std::uint64_t> slowest(mine.size(), 0);
  for (int p = 0; p < n; ++p) {
    std::vector<std::uint64_t> theirs(mine.size());
    std::memcpy(theirs.data(), g.staging(p) + h, theirs.size() * sizeof(std::uint64_t));
    for (std::size_t k = 0; k < theirs.size(); ++k) slowest[k] = std::max(slowest[k], theirs[k]);
  }
  char took[32];
  std::snprintf(took, sizeof took, "%.1f ms", static_cast<double>(ns(start)) / 1e6);
  const std::string at =
      std::string("measured at creation in ") + took + " (" + std::to_string(n) + " ranks; ";
  DirectChoice d;
  d.offCpuPermille = slowest.back();
  std::vector<std::uint64_t> staged(sizes);
  for (std::size_t i = 0; i < sizes; ++i) staged[i] = slowest[2 * i];
  d.chunk = chunkFromStaged(staged.data(), sizes);
  if (d.chunk.bytes != 0)
    d.chunk.why = std::string("measured at creation in ") + took + " (" + std::to_string(n) +
                  " ranks): " + d.chunk.why;
  if (!singleCopy) return d;
  // The step that most measured sizes agree with, leading by two (common/step_rule.hpp): a
  // size whose every round lost its CPU to another process misleads one vote only.
  SingleCopyChoice& c = d.single;
  std::vector<bool> wins;
  for (std::size_t i = 0; i < sizes; ++i) wins.push_back(slowest[2 * i + 1] < slowest[2 * i]);
  if (const std::size_t k = stepMostSizesAgreeWith(wins); k < sizes)
    c.bytes = kSingleCopyProbeSizes[k];
  std::string figures;
  for (std::size_t i = 0; i < sizes; ++i) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.1f/%.1f", i ? ", " : "",
                  sizeText(kSingleCopyProbeSizes[i]).c_str(),
                  static_cast<double>(slowest[2 * i]) / 1e3,
                  static_cast<double>(slowest[2 * i + 1]) / 1e3);
    figures += buf;
  }
  c.why = at + "us staged/single copy per block: " + figures + ")";
  return d;
}

std::string singleCopyEntry(std::size_t ranks) {
  return "shm_single_copy." + std::to_string(ranks) + "ranks";
}

std::string chunkEntry(std::size_t ranks) {
  return "shm_chunk." + std::to_string(ranks) + "ranks";
}

DirectChoice cachedOrMeasuredDirect(SharedMemoryGroup& g, std::uint64_t tag, Deadline deadline,
                                    const std::string& path, const machine::TuneKey& key,
                                    bool single, bool chunk, bool streaming, std::size_t cacheBytes,
                                    std::uint64_t maxOffCpuPermille) {
  const std::size_t ranks = static_cast<std::size_t>(g.size());
  // What group rank 0 found, through its staging half: every rank must reach the same answer,
  // since measuring is collective, and only one reading of a file that another job may be
  // rewriting is the same for all.
  struct Found {
    std::uint64_t present = 0;           // every entry of the staged probe asked for is there
    std::uint64_t streamingPresent = 0;  // the streaming entry is there (when asked)
    std::uint64_t single = 0;
    std::uint64_t chunk = 0;
    std::uint64_t streaming = 0;
    char singleDate[24] = {};
    char chunkDate[24] = {};
    char streamingDate[24] = {};
  };
  static_assert(sizeof(Found) <= 4096);
  std::string problem;  // rank 0: why the file had nothing to use
  const std::size_t h = g.beginStep();
  if (g.rank() == 0) {
    Found f;
    const machine::TuneCache c = machine::readTuneCache(path, key);
    const machine::TuneEntry* s = single ? c.find(singleCopyEntry(ranks)) : nullptr;
    const machine::TuneEntry* k = chunk ? c.find(chunkEntry(ranks)) : nullptr;
    const machine::TuneEntry* st = streaming ? c.find(streamingEntry(ranks)) : nullptr;
    // A chunk entry is a size a staging half of this group can hold; another is re-measured.
    const bool chunkOk = k != nullptr && k->value != 0 && k->value != machine::kTuneNever &&
                         k->value <= g.stagingBytes() / 2;
    if ((!single || s != nullptr) && (!chunk || chunkOk)) {
      f.present = 1;
      if (s != nullptr) {
        f.single = s->value;
        std::snprintf(f.singleDate, sizeof f.singleDate, "%s", s->date.c_str());
      }
      if (k != nullptr) {
        f.chunk = k->value;
        std::snprintf(f.chunkDate, sizeof f.chunkDate, "%s", k->date.c_str());
      }
    }
    if (st != nullptr && st->value != 0) {
      f.streamingPresent = 1;
      f.streaming = st->value;
      std::snprintf(f.streamingDate, sizeof f.streamingDate, "%s", st->date.c_str());
    }
    if (c.state == machine::TuneCache::State::Corrupt) {
      problem = "; " + path + " was corrupt (" + c.problem + "), measured over";
    } else if (c.state == machine::TuneCache::State::OtherMachine) {
      problem = "; " + path + " was another machine's (" + c.problem + "), measured over";
    }
    std::memcpy(g.staging(0) + h, &f, sizeof f);
  }
  g.barrier(tag, deadline);
  Found f;
  std::memcpy(&f, g.staging(0) + h, sizeof f);
  DirectChoice d;
  const std::string of = ", " + std::to_string(ranks) + " ranks)";
  const bool measureStaged = (single || chunk) && f.present == 0;
  const bool measureStreams = streaming && f.streamingPresent == 0;
  if (measureStaged) {
    d = measureDirect(g, tag, deadline, single);
    if (!single) d.single = {};
    if (!chunk) d.chunk = {};
  } else {
    if (single) {
      d.single.bytes =
          f.single == machine::kTuneNever ? SIZE_MAX : static_cast<std::size_t>(f.single);
      d.single.why = "cached in " + path + " (measured " + std::string(f.singleDate) + of;
    }
    if (chunk) {
      d.chunk.bytes = static_cast<std::size_t>(f.chunk);
      d.chunk.why = "cached in " + path + " (measured " + std::string(f.chunkDate) + of;
    }
  }
  if (measureStreams) {
    d.streaming = measureStreaming(g, tag, deadline, cacheBytes);
  } else if (streaming) {
    d.streaming.bytes =
        f.streaming == machine::kTuneNever ? SIZE_MAX : static_cast<std::size_t>(f.streaming);
    d.streaming.why = "cached in " + path + " (measured " + std::string(f.streamingDate) + of;
  }
  if (!measureStaged && !measureStreams) return d;
  std::string kept;
  // Every rank knows the worst rank's time off its CPU: a probe timed while other work held the
  // CPUs is used now and measured again by the next communicator instead of being kept.
  const std::uint64_t offCpu = std::max(measureStaged ? d.offCpuPermille : 0,
                                        measureStreams ? d.streaming.offCpuPermille : 0);
  if (offCpu > maxOffCpuPermille) {
    if (!path.empty())
      kept = "; not kept: the machine was busy (a rank was off its CPU for " +
             machine::permilleText(offCpu) + " of it, BRAID_TUNE_MAX_BUSY " +
             machine::permilleText(maxOffCpuPermille) + "); measured again next time";
  } else if (g.rank() == 0 && !path.empty()) {
    std::map<std::string, machine::TuneEntry> entries;
    const std::string date = machine::tuneDateNow();
    if (measureStaged && single)
      entries[singleCopyEntry(ranks)] = {
          d.single.bytes == SIZE_MAX ? machine::kTuneNever : d.single.bytes, date, d.single.why};
    if (measureStaged && chunk && d.chunk.bytes != 0)
      entries[chunkEntry(ranks)] = {d.chunk.bytes, date, d.chunk.why};
    if (measureStreams && d.streaming.bytes != 0)
      entries[streamingEntry(ranks)] = {
          d.streaming.bytes == SIZE_MAX ? machine::kTuneNever : d.streaming.bytes, date,
          d.streaming.why};
    // Under the file's lock: a process measuring the copy profile at the same time rewrites
    // the file too, and each writer merges into what it read.
    const machine::TuneCacheLock lock(path, 1000);
    const std::string failed = machine::writeTuneCache(path, key, entries);
    kept = failed.empty() ? "; kept in " + path : "; not kept: " + failed;
  }
  if (measureStaged && single) d.single.why += kept + problem;
  if (measureStaged && chunk && d.chunk.bytes != 0) d.chunk.why += kept + problem;
  if (measureStreams && d.streaming.bytes != 0) d.streaming.why += kept + problem;
  return d;
}

}  // namespace braid::transport::shm
