// The copy measurements behind the machine profile (core/machine_profile.hpp): how fast this
// core copies with ordinary (cached) stores and with non-temporal (streaming) stores at sizes
// from 64 KiB to 4 MiB, and what follows from that: the size from which streaming stores win
// (the reduction kernels' and the copies' streaming threshold) and the cache that implies.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace braid::kernels {

/// The copy sizes measured, ascending (x2 steps).
inline constexpr std::size_t kCopyProbeSizes[] = {
    std::size_t{64} << 10, std::size_t{128} << 10, std::size_t{256} << 10, std::size_t{512} << 10,
    std::size_t{1} << 20,  std::size_t{2} << 20,   std::size_t{4} << 20};

struct CopyTiming {
  std::size_t bytes = 0;
  double cachedNsPerByte = 0;    // fastest round, ordinary stores
  double streamedNsPerByte = 0;  // fastest round, non-temporal stores (copyStreaming)
};

/// Times, per size of kCopyProbeSizes, repeated copies between the same two warm buffers with
/// ordinary stores and with copyStreaming's non-temporal stores, alternating which goes first,
/// one warm-up round then kCopyRounds rounds; each figure is the fastest of its rounds (another
/// process taking the CPU or the cache only ever slows a round down). Copies below
/// 512 KiB repeat to 512 KiB per timing; copies up to 2 MiB are preceded by an untimed copy of
/// the same kind (leaving the destination as that kind leaves it: cached, or written back).
/// `*elapsedMs` gets the time it took (docs/benchmarks.md, "Machine profile").
inline constexpr int kCopyRounds = 4;
std::vector<CopyTiming> measureCopies(double* elapsedMs = nullptr);

struct CopyDecision {
  std::size_t streamingBytes = 0;  // outputs from this size on are written with streaming stores
  std::size_t cacheBytes = 0;      // the effective cache: 2 x streamingBytes (a copy's source
                                   // and destination), capped by what the OS reports
  bool measured = false;           // false: the timings were implausible, the fallback applies
  std::string why;                 // the rule's outcome and the figures, one line
};

/// The decision, a pure function of the timings (tests feed made-up ones):
///   streaming threshold: the step (streaming from size k on) that agrees with the most
///     measured sizes, +1 for each size >= k where streaming was slower, -1 where it was faster;
///     the lowest score wins (common/step_rule.hpp: a step must lead by two sizes). No such
///     step: streaming lost up to the largest size, so the threshold is twice that, or
///     `fallbackStreamingBytes` if larger.
///   effective cache: 2 x the threshold, capped by `reportedCacheBytes` (0: no report).
///   sanity: a figure that is not positive and finite, or a rate beyond 1 TB/s or under
///     10 MB/s, makes the whole measurement implausible: fallbackStreamingBytes, measured false.
CopyDecision decideCopies(const std::vector<CopyTiming>& timings, std::size_t reportedCacheBytes,
                          std::size_t fallbackStreamingBytes);

}  // namespace braid::kernels
