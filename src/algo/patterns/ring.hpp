// Ring rank arithmetic: neighbours and which segment each rank sends and receives at each step.
// Pure functions, unit-tested alone (tests/algo/patterns_test.cpp).
//
// The buffer is cut into size() segments. Reduce-scatter takes size()-1 steps; at step s rank r
// sends segment (r - s - 1) to its next neighbour and receives segment (r - s - 2) from its
// previous one, which it reduces and forwards at step s + 1. After the last step rank r holds
// the full reduction of segment r. Allgather then circulates the finished segments: at step s
// rank r sends segment (r - s) and receives segment (r - s - 1), forwarding it at step s + 1.
#pragma once

namespace braid::algo::patterns {

/// a mod n in [0, n) for any sign of a.
constexpr int wrap(int a, int n) noexcept {
  const int m = a % n;
  return m < 0 ? m + n : m;
}

constexpr int ringNext(int rank, int size) noexcept {
  return wrap(rank + 1, size);
}
constexpr int ringPrev(int rank, int size) noexcept {
  return wrap(rank - 1, size);
}

/// Segment rank sends to ringNext at reduce-scatter step `step` (0 .. size-2).
constexpr int ringReduceScatterSendSegment(int rank, int size, int step) noexcept {
  return wrap(rank - step - 1, size);
}
/// Segment rank receives from ringPrev (and reduces) at reduce-scatter step `step`.
constexpr int ringReduceScatterRecvSegment(int rank, int size, int step) noexcept {
  return wrap(rank - step - 2, size);
}
/// Segment rank sends to ringNext at allgather step `step` (0 .. size-2); step 0 sends its own.
constexpr int ringAllgatherSendSegment(int rank, int size, int step) noexcept {
  return wrap(rank - step, size);
}
/// Segment rank receives from ringPrev at allgather step `step`.
constexpr int ringAllgatherRecvSegment(int rank, int size, int step) noexcept {
  return wrap(rank - step - 1, size);
}

}  // namespace braid::algo::patterns
