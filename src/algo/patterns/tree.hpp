// Binomial tree rank arithmetic relative to any root. Pure functions.
//
// Ranks are renumbered so the root is virtual rank 0 (v = (rank - root) mod size). The parent of
// v > 0 is v with its lowest set bit cleared; the children of v are v + 2^k for every 2^k below
// v's lowest set bit (every 2^k < size for the root) that is still < size. Child v + 2^k roots
// a subtree of at most 2^k ranks (fewer where size cuts it off). Children are listed by
// increasing 2^k: a reduction hears first from the subtrees that finish first, a broadcast
// serves them in reverse, deepest subtree first.
#pragma once

#include <array>

namespace braid::algo::patterns {

/// ceil(log2(n)) for n >= 1.
constexpr int ceilLog2(int n) noexcept {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

/// Largest power of two <= n, for n >= 1.
constexpr int floorPow2(int n) noexcept {
  int p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

inline constexpr int kMaxTreeChildren = 31;

struct TreeLinks {
  int parent = -1;  // -1 at the root
  int numChildren = 0;
  std::array<int, kMaxTreeChildren> children{};  // real ranks, by increasing 2^k
};

/// The binomial tree links of `rank` in a tree of `size` ranks rooted at `root`.
constexpr TreeLinks binomialTree(int rank, int size, int root) noexcept {
  TreeLinks t;
  const int v = (rank - root + size) % size;
  for (int mask = 1; mask < size; mask <<= 1) {
    if ((v & mask) != 0) {
      t.parent = (v - mask + root) % size;
      break;
    }
    if (v + mask < size) t.children[t.numChildren++] = (v + mask + root) % size;
  }
  return t;
}

}  // namespace braid::algo::patterns
