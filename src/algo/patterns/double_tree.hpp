// Double binary tree (Sanders, Speck & Träff 2009; NCCL's ncclGetDtree): two binary trees over
// the same ranks such that a rank that is interior in one is (almost always) a leaf in the
// other, so each tree carries half the data and every rank's links are used about evenly.
// Pure functions.
//
// Tree 0 is NCCL's in-order binary tree: let b be the lowest set bit of rank r (r > 0); r's
// children are r - b/2 and r + b/2 (the latter shrunk to r + b/4, ... while past the end), its
// parent (r ^ b) | 2b, or r ^ b when that is past the end. Rank 0 is the root with one child,
// the largest power of two below N. Leaves are the odd ranks. Tree 1 mirrors tree 0
// (r -> N-1-r) when N is even and shifts it (r -> r-1 mod N) when N is odd, so the odd leaves
// of tree 0 become interior ranks of tree 1.
#pragma once

#include "algo/patterns/ring.hpp"

namespace braid::algo::patterns {

struct BinaryTreeLinks {
  int parent = -1;  // -1 at the root
  int numChildren = 0;
  int children[2] = {-1, -1};
};

/// Tree 0's links of `rank` among `size` ranks.
constexpr BinaryTreeLinks inOrderBinaryTree(int rank, int size) noexcept {
  BinaryTreeLinks t;
  int bit = 1;
  while (bit < size && (bit & rank) == 0) bit <<= 1;
  if (rank == 0) {
    if (size > 1) t.children[t.numChildren++] = bit >> 1;
    return t;
  }
  int up = (rank ^ bit) | (bit << 1);
  if (up >= size) up = rank ^ bit;
  t.parent = up;
  int low = bit >> 1;
  if (low > 0) t.children[t.numChildren++] = rank - low;
  while (low > 0 && rank + low >= size) low >>= 1;
  if (low > 0) t.children[t.numChildren++] = rank + low;
  return t;
}

/// The links of `rank` in tree `which` (0 or 1) of the double binary tree.
constexpr BinaryTreeLinks doubleBinaryTree(int rank, int size, int which) noexcept {
  if (which == 0) return inOrderBinaryTree(rank, size);
  const bool mirror = size % 2 == 0;
  auto to = [&](int r) { return mirror ? size - 1 - r : wrap(r - 1, size); };
  auto from = [&](int v) { return mirror ? size - 1 - v : wrap(v + 1, size); };
  BinaryTreeLinks t = inOrderBinaryTree(to(rank), size);
  if (t.parent >= 0) t.parent = from(t.parent);
  for (int i = 0; i < t.numChildren; ++i) t.children[i] = from(t.children[i]);
  return t;
}

/// The root of tree `which`.
constexpr int doubleBinaryTreeRoot(int size, int which) noexcept {
  if (which == 0) return 0;
  return size % 2 == 0 ? size - 1 : wrap(1, size);
}

}  // namespace braid::algo::patterns
