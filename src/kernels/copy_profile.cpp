#include "kernels/copy_profile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/step_rule.hpp"
#include "kernels/copy.hpp"

namespace braid::kernels {
namespace {

using Clock = std::chrono::steady_clock;

double fastest(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

std::string sizeText(std::size_t b) {
  if (b >= (std::size_t{1} << 20) && b % (std::size_t{1} << 20) == 0)
    return std::to_string(b >> 20) + "M";
  return std::to_string(b >> 10) + "K";
}

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

}  // namespace

std::vector<CopyTiming> measureCopies(double* elapsedMs) {
  const auto start = Clock::now();
  constexpr std::size_t kSizes = std::size(kCopyProbeSizes);
  const std::size_t largest = kCopyProbeSizes[kSizes - 1];
  std::unique_ptr<std::uint8_t, FreeDeleter> src(
      static_cast<std::uint8_t*>(std::aligned_alloc(64, largest)));
  std::unique_ptr<std::uint8_t, FreeDeleter> dst(
      static_cast<std::uint8_t*>(std::aligned_alloc(64, largest)));
  std::vector<CopyTiming> out;
  if (!src || !dst) return out;
  std::memset(src.get(), 0x5a, largest);  // touched: no page faults in the timings
  std::memset(dst.get(), 0, largest);
  std::vector<std::vector<double>> cached(kSizes), streamed(kSizes);
  auto time = [&](bool streaming, std::size_t bytes, int reps) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) {
      if (streaming)
        copyStreaming(dst.get(), src.get(), bytes);
      else
        copyCached(dst.get(), src.get(), bytes);
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    return ns / (static_cast<double>(bytes) * reps);
  };
  for (int round = 0; round <= kCopyRounds; ++round) {
    for (std::size_t i = 0; i < kSizes; ++i) {
      const std::size_t b = kCopyProbeSizes[i];
      const int reps = static_cast<int>(std::max<std::size_t>(1, (std::size_t{512} << 10) / b));
      // Up to 2 MiB an untimed copy of each kind first leaves the destination as that kind
      // leaves it (in cache, or written back); larger ones would not stay cached anyway.
      const bool streamFirst = (round + static_cast<int>(i)) % 2 == 1;
      for (int k = 0; k < 2; ++k) {
        const bool streaming = (k == 0) == streamFirst;
        if (b <= (std::size_t{2} << 20) && streaming)
          copyStreaming(dst.get(), src.get(), b);
        else if (b <= (std::size_t{2} << 20))
          copyCached(dst.get(), src.get(), b);
        const double t = time(streaming, b, reps);
        if (round > 0) (streaming ? streamed : cached)[i].push_back(t);
      }
    }
  }
  for (std::size_t i = 0; i < kSizes; ++i)
    out.push_back({kCopyProbeSizes[i], fastest(cached[i]), fastest(streamed[i])});
  if (elapsedMs != nullptr)
    *elapsedMs = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return out;
}

CopyDecision decideCopies(const std::vector<CopyTiming>& timings, std::size_t reportedCacheBytes,
                          std::size_t fallbackStreamingBytes) {
  CopyDecision d;
  std::string figures;
  bool plausible = !timings.empty();
  for (const CopyTiming& t : timings) {
    for (double x : {t.cachedNsPerByte, t.streamedNsPerByte})
      // 1 TB/s = 0.001 ns/B; 10 MB/s = 100 ns/B.
      if (!std::isfinite(x) || x < 0.001 || x > 100.0) plausible = false;
    char buf[80];
    std::snprintf(buf, sizeof buf, "%s%s %.1f/%.1f", figures.empty() ? "" : ", ",
                  sizeText(t.bytes).c_str(), t.cachedNsPerByte > 0 ? 1.0 / t.cachedNsPerByte : 0.0,
                  t.streamedNsPerByte > 0 ? 1.0 / t.streamedNsPerByte : 0.0);
    figures += buf;
  }
  const std::string table = "GB/s cached/streamed per copy size: " + figures;
  auto capped = [&](std::size_t cache) {
    return reportedCacheBytes != 0 ? std::min(cache, reportedCacheBytes) : cache;
  };
  if (!plausible) {
    d.streamingBytes = fallbackStreamingBytes;
    d.cacheBytes = capped(2 * fallbackStreamingBytes);
    d.why = "measurement implausible, the OS's cache report applies (" + table + ")";
    return d;
  }
  d.measured = true;
  std::vector<bool> wins;
  for (const CopyTiming& t : timings) wins.push_back(t.streamedNsPerByte < t.cachedNsPerByte);
  const std::size_t k = stepMostSizesAgreeWith(wins);
  const std::size_t step = k < timings.size() ? timings[k].bytes : 0;
  if (step != 0) {
    d.streamingBytes = step;
    d.why = "streaming stores win from " + sizeText(step);
  } else {
    d.streamingBytes = std::max(2 * timings.back().bytes, fallbackStreamingBytes);
    d.why = "streaming stores lost up to " + sizeText(timings.back().bytes);
  }
  d.cacheBytes = capped(2 * d.streamingBytes);
  if (reportedCacheBytes != 0 && 2 * d.streamingBytes > reportedCacheBytes)
    d.why += " (cache capped at the OS's " + sizeText(reportedCacheBytes) + ")";
  d.why += "; " + table;
  return d;
}

}  // namespace braid::kernels
