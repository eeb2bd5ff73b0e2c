#include "transport/shm/shm_streaming.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/machine.hpp"
#include "common/step_rule.hpp"
#include "kernels/copy.hpp"

namespace braid::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 3;  // after one warm-up round

std::string mib(std::size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%gM", static_cast<double>(b) / (1 << 20));
  return buf;
}

}  // namespace

std::size_t streamingProbeLimit(std::size_t cacheBytes) {
  return std::clamp(2 * cacheBytes, std::size_t{8} << 20, std::size_t{128} << 20);
}

StreamingChoice streamingFromTimings(const std::size_t* totalBytes, const std::uint64_t* cachedNs,
                                     const std::uint64_t* streamedNs, std::size_t sizes) {
  StreamingChoice c;
  if (sizes == 0) return c;
  std::string figures;
  for (std::size_t i = 0; i < sizes; ++i) {
    if (cachedNs[i] == 0 || streamedNs[i] == 0) return c;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.0f/%.0f", i ? ", " : "", mib(totalBytes[i]).c_str(),
                  static_cast<double>(cachedNs[i]) / 1e3, static_cast<double>(streamedNs[i]) / 1e3);
    figures += buf;
  }
  std::vector<bool> wins;
  for (std::size_t i = 0; i < sizes; ++i) wins.push_back(streamedNs[i] < cachedNs[i]);
  const std::size_t k = stepMostSizesAgreeWith(wins);
  const std::size_t step = k < sizes ? totalBytes[k] : 0;
  if (step != 0) {
    c.bytes = step;
    c.why = "streaming stores win from " + mib(step) + " of outputs";
  } else {
    c.bytes = 2 * totalBytes[sizes - 1];
    c.why = "streaming stores lost up to " + mib(totalBytes[sizes - 1]) + " of outputs";
  }
  c.why += " (all ranks' outputs together; us cached/streamed: " + figures + ")";
  return c;
}

StreamingChoice measureStreaming(SharedMemoryGroup& g, std::uint64_t tag, Deadline deadline,
                                 std::size_t cacheBytes) {
  const auto start = Clock::now();
  const machine::CpuShare onCpu;
  const int me = g.rank();
  const int n = g.size();
  const std::size_t ranks = static_cast<std::size_t>(n);
  const std::size_t piece = g.stagingBytes() / 2;
  std::vector<std::size_t> totals;
  for (std::size_t t = kStreamingProbeFirst; t <= streamingProbeLimit(cacheBytes); t *= 2)
    totals.push_back(t);
  const std::size_t sizes = totals.size();
  // Each rank's share of a size, whole cache lines.
  auto share = [&](std::size_t total) {
    return std::max<std::size_t>(64, total / ranks / 64 * 64);
  };
  // The source: the next rank's staging half, filled once; the output: private, touched first
  // (no page faults in the timings).
  std::size_t h = g.beginStep();
  std::memset(g.staging(me) + h, me + 1, piece);
  std::vector<std::uint8_t> out(share(totals.back()), 0);
  g.barrier(tag, deadline);
  const std::uint8_t* src = g.staging((me + 1) % n) + h;
  std::vector<std::uint64_t> mine(2 * sizes, UINT64_MAX);
  for (std::size_t i = 0; i < sizes; ++i) {
    const std::size_t bytes = share(totals[i]);
    for (int round = 0; round <= kRounds; ++round) {
      for (int k = 0; k < 2; ++k) {
        const bool streaming = (k == 0) == ((round + static_cast<int>(i)) % 2 == 1);
        g.barrier(tag, deadline);  // every rank writes its output at the same time
        const auto t0 = Clock::now();
        for (std::size_t off = 0; off < bytes; off += piece) {
          const std::size_t b = std::min(piece, bytes - off);
          if (streaming)
            kernels::copyStreaming(out.data() + off, src, b);
          else
            std::memcpy(out.data() + off, src, b);
        }
        const auto ns = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
        std::uint64_t& best = mine[2 * i + (streaming ? 1 : 0)];
        if (round > 0) best = std::min(best, std::max<std::uint64_t>(ns, 1));
      }
    }
  }
  // Every rank's figures to every rank; per size the slowest rank's, the same on all ranks;
  // last, how long the rank was off its CPU (the worst rank's).
  // The other half: a peer may still be copying this rank's source half.
  mine.push_back(onCpu.offCpuPermille());
  h = g.beginStep();
  std::memcpy(g.staging(me) + h, mine.data(), mine.size() * sizeof(std::uint64_t));
  g.barrier(tag, deadline);
  std::vector<std::uint64_t> cached(sizes, 0), streamed(sizes, 0);
  std::uint64_t offCpu = 0;
  for (int p = 0; p < n; ++p) {
    std::vector<std::uint64_t> theirs(mine.size());
    std::memcpy(theirs.data(), g.staging(p) + h, theirs.size() * sizeof(std::uint64_t));
    for (std::size_t i = 0; i < sizes; ++i) {
      cached[i] = std::max(cached[i], theirs[2 * i]);
      streamed[i] = std::max(streamed[i], theirs[2 * i + 1]);
    }
    offCpu = std::max(offCpu, theirs.back());
  }
  StreamingChoice c = streamingFromTimings(totals.data(), cached.data(), streamed.data(), sizes);
  c.offCpuPermille = offCpu;
  char took[32];
  std::snprintf(took, sizeof took, "%.1f ms",
                std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  c.why = std::string("measured at creation in ") + took + " (" + std::to_string(n) +
          " ranks): " + c.why;
  return c;
}

std::string streamingEntry(std::size_t ranks) {
  return "shm_streaming." + std::to_string(ranks) + "ranks";
}

}  // namespace braid::transport::shm
