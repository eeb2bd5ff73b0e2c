// Pure arithmetic of braid-check's pair measurements: which ranks meet in which round (a
// round-robin tournament, so all N(N-1)/2 pairs are covered in N-1 rounds for even N and N
// rounds for odd N, with every rank in at most one pair per round), and the outlier rule
// applied to the measured matrices. Header-only so tests can check it without a job.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace braid::check {

/// Rounds of the tournament among n ranks: n - 1 for even n, n for odd n (a rank sits out each
/// round), 0 for n < 2.
inline int tournamentRounds(int n) {
  if (n < 2) return 0;
  return n % 2 == 0 ? n - 1 : n;
}

/// The rank that `rank` meets in `round` (0 <= round < tournamentRounds(n)), or -1 when it sits
/// out. The circle method: positions 0..m-2 rotate around position m-1 (m = n rounded up to
/// even; position n, when m > n, is the empty seat).
inline int tournamentPartner(int n, int round, int rank) {
  if (n < 2 || rank < 0 || rank >= n) return -1;
  const int m = n % 2 == 0 ? n : n + 1;
  const int ring = m - 1;  // positions rotating around the fixed one
  int partner;
  if (rank == m - 1) {
    partner = round % ring;
  } else if (rank == round % ring) {
    partner = m - 1;
  } else {
    // rank and partner sit symmetrically around `round`: rank + partner == 2 * round (mod ring).
    partner = ((2 * round - rank) % ring + ring) % ring;
  }
  return partner >= n ? -1 : partner;
}

/// The outlier rule: among the values of pairs of one link class (shm pairs are compared with
/// shm pairs, tcp with tcp), a latency above kLatencyOutlierFactor x their median, or a
/// bandwidth below their median / kBandwidthOutlierFactor, is flagged.
inline constexpr double kLatencyOutlierFactor = 3.0;
inline constexpr double kBandwidthOutlierFactor = 3.0;

/// Median of the values (mean of the middle two for an even count); 0 when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

inline bool isLatencyOutlier(double latency, double classMedian) {
  return classMedian > 0 && latency > kLatencyOutlierFactor * classMedian;
}

inline bool isBandwidthOutlier(double bandwidth, double classMedian) {
  return classMedian > 0 && bandwidth < classMedian / kBandwidthOutlierFactor;
}

}  // namespace braid::check
