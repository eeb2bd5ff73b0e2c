// The rule behind braid's measured thresholds (the copy profile's streaming threshold, the
// shared-memory single-copy threshold, the direct collectives' streaming threshold): at sizes
// measured in ascending order a candidate (streaming stores, single copy) won or lost against
// the usual way. "The candidate from size k on" scores, over the sizes >= k, -1 for each win and
// +1 for each loss; the lowest score wins, the larger k on ties. A step must lead by two sizes
// at least (score <= -2), so that one size, the largest above all, whose rounds met a disturbed
// machine cannot decide alone (docs/benchmarks.md, "One size decides nothing").
#pragma once

#include <cstddef>
#include <vector>

namespace braid {

inline constexpr int kStepLead = 2;

/// The step's index into `wins` (the candidate from that size on), or wins.size() when no step
/// leads by kStepLead.
inline std::size_t stepMostSizesAgreeWith(const std::vector<bool>& wins) {
  int score = 0, best = 1 - kStepLead;
  std::size_t step = wins.size();
  for (std::size_t i = wins.size(); i-- > 0;) {
    score += wins[i] ? -1 : 1;
    if (score < best) {
      best = score;
      step = i;
    }
  }
  return step;
}

}  // namespace braid
