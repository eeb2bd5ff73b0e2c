// The rank arithmetic of the log-step algorithms checked alone (recursive halving-doubling,
// Bruck, double binary tree): each schedule is simulated on sets of contributions, so a wrong
// index shows up as a rank missing or double-counting data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "algo/patterns/bruck.hpp"
#include "algo/patterns/double_tree.hpp"
#include "algo/patterns/halving.hpp"

namespace braid::algo::patterns {
namespace {

constexpr int kMaxRanks = 70;

// Contributions as counts per rank, so a double count is visible (a bitmask would hide it).
using Contrib = std::vector<int>;

TEST(Halving, ReduceScatterThenAllgatherOverVirtualRanks) {
  for (int p = 1; p <= 64; p *= 2) {
    int rounds = 0;
    while ((1 << rounds) < p) ++rounds;
    // held[v][b]: what vrank v holds for block b (contribution counts per vrank).
    std::vector<std::vector<Contrib>> held(p, std::vector<Contrib>(p, Contrib(p, 0)));
    for (int v = 0; v < p; ++v)
      for (int b = 0; b < p; ++b) held[v][b][v] = 1;
    std::vector<VrankRange> owned(p, VrankRange{0, p});
    for (int k = 0; k < rounds; ++k) {
      auto next = held;
      for (int v = 0; v < p; ++v) {
        const HalvingStep s = halvingStep(v, p, k);
        const HalvingStep t = halvingStep(s.peer, p, k);
        ASSERT_EQ(t.peer, v);
        ASSERT_EQ(s.send, t.keep) << "p=" << p << " v=" << v << " k=" << k;
        ASSERT_EQ(s.keep.end - s.keep.begin, p >> (k + 1));
        // v keeps only inside what it owned so far.
        ASSERT_GE(s.keep.begin, owned[v].begin);
        ASSERT_LE(s.keep.end, owned[v].end);
        for (int b = s.keep.begin; b < s.keep.end; ++b)
          for (int c = 0; c < p; ++c) next[v][b][c] += held[s.peer][b][c];
        owned[v] = s.keep;
      }
      held = std::move(next);
    }
    for (int v = 0; v < p; ++v) {
      ASSERT_EQ(owned[v], (VrankRange{v, v + 1}));
      for (int c = 0; c < p; ++c) ASSERT_EQ(held[v][v][c], 1) << "p=" << p << " v=" << v;
    }
    // Allgather: after all rounds every vrank has every block (exactly once, as a copy).
    std::vector<std::vector<int>> has(p, std::vector<int>(p, 0));
    for (int v = 0; v < p; ++v) has[v][v] = 1;
    for (int k = 0; k < rounds; ++k) {
      auto next = has;
      for (int v = 0; v < p; ++v) {
        const DoublingStep s = doublingGatherStep(v, k);
        const DoublingStep t = doublingGatherStep(s.peer, k);
        ASSERT_EQ(s.recv, t.send);
        for (int b = s.send.begin; b < s.send.end; ++b) ASSERT_EQ(has[v][b], 1) << "sends unheld";
        for (int b = s.recv.begin; b < s.recv.end; ++b) {
          ASSERT_EQ(has[v][b], 0) << "receives a block twice";
          next[v][b] = 1;
        }
      }
      has = std::move(next);
    }
    for (int v = 0; v < p; ++v)
      for (int b = 0; b < p; ++b) ASSERT_EQ(has[v][b], 1);
  }
}

TEST(Halving, FoldedBlocksCoverEveryRankOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    const int p = floorPow2(n);
    EXPECT_EQ(foldedBlockStart(0, n), 0);
    EXPECT_EQ(foldedBlockStart(p, n), n) << n;
    for (int v = 0; v < p; ++v) {
      const int lo = foldedBlockStart(v, n);
      const int hi = foldedBlockStart(v + 1, n);
      const int real = unfoldRank(v, n);
      const Fold f = foldToPowerOfTwo(real, n);
      ASSERT_EQ(f.vrank, v);
      if (f.partner >= 0) {
        // A folded pair: the vrank answers for both ranks' blocks.
        EXPECT_EQ(lo, f.partner) << n;
        EXPECT_EQ(hi, real + 1) << n;
      } else {
        EXPECT_EQ(lo, real);
        EXPECT_EQ(hi, real + 1);
      }
    }
  }
}

TEST(Bruck, AllgatherGathersEveryBlockOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    // slots[r][i]: the rank whose block rank r holds in slot i (-1: empty).
    std::vector<std::vector<int>> slots(n, std::vector<int>(n, -1));
    for (int r = 0; r < n; ++r) slots[r][0] = r;
    int filled = 1;
    for (int k = 0; k < bruckSteps(n); ++k) {
      const int d = 1 << k;
      const int blocks = bruckAllgatherBlocks(n, k);
      ASSERT_EQ(blocks, std::min(d, n - d));
      auto next = slots;
      for (int r = 0; r < n; ++r) {
        const int to = bruckAllgatherSendPeer(r, n, k);
        ASSERT_EQ(bruckAllgatherRecvPeer(to, n, k), r);
        for (int i = 0; i < blocks; ++i) {
          ASSERT_NE(slots[r][i], -1);
          ASSERT_EQ(next[to][d + i], -1) << "slot filled twice";
          next[to][d + i] = slots[r][i];
        }
      }
      slots = std::move(next);
      filled += blocks;
    }
    ASSERT_EQ(filled, n);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i) ASSERT_EQ(slots[r][i], wrap(r + i, n)) << n;
  }
}

TEST(Bruck, AlltoallDeliversEveryBlockToItsRank) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    // slot[r][i] = {source, destination} of the block rank r holds in slot i.
    std::vector<std::vector<std::pair<int, int>>> slot(n, std::vector<std::pair<int, int>>(n));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i) slot[r][i] = {r, wrap(r + i, n)};
    for (int k = 0; k < bruckSteps(n); ++k) {
      auto next = slot;
      int moving = 0;
      for (int i = 0; i < n; ++i) moving += bruckAlltoallSlotMoves(i, k) ? 1 : 0;
      ASSERT_EQ(bruckAlltoallBlocks(n, k), moving);
      for (int r = 0; r < n; ++r) {
        const int to = bruckAlltoallSendPeer(r, n, k);
        ASSERT_EQ(bruckAlltoallRecvPeer(to, n, k), r);
        for (int i = 0; i < n; ++i)
          if (bruckAlltoallSlotMoves(i, k)) next[to][i] = slot[r][i];
      }
      slot = std::move(next);
    }
    for (int r = 0; r < n; ++r) {
      for (int from = 0; from < n; ++from) {
        const auto [src, dst] = slot[r][bruckAlltoallFinalSlot(r, n, from)];
        ASSERT_EQ(src, from) << "n=" << n << " r=" << r;
        ASSERT_EQ(dst, r);
      }
    }
  }
}

TEST(DoubleTree, BothTreesSpanEveryRank) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (int which = 0; which < 2; ++which) {
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        const BinaryTreeLinks t = doubleBinaryTree(r, n, which);
        ASSERT_LE(t.numChildren, 2);
        if (t.parent < 0) {
          ++roots;
          ASSERT_EQ(r, doubleBinaryTreeRoot(n, which)) << "n=" << n;
        } else {
          ASSERT_GE(t.parent, 0);
          ASSERT_LT(t.parent, n);
          const BinaryTreeLinks p = doubleBinaryTree(t.parent, n, which);
          bool listed = false;
          for (int j = 0; j < p.numChildren; ++j) listed = listed || p.children[j] == r;
          ASSERT_TRUE(listed) << "n=" << n << " tree " << which << ": " << r
                              << " is not a child of its parent " << t.parent;
        }
        for (int j = 0; j < t.numChildren; ++j) {
          ASSERT_GE(t.children[j], 0);
          ASSERT_LT(t.children[j], n);
          ASSERT_EQ(doubleBinaryTree(t.children[j], n, which).parent, r);
        }
      }
      ASSERT_EQ(roots, 1);
      // Every rank reaches the root (no cycle) within ceil(log2 n) + 1 hops.
      for (int r = 0; r < n; ++r) {
        int at = r;
        int hops = 0;
        while (doubleBinaryTree(at, n, which).parent >= 0 && hops <= n) {
          at = doubleBinaryTree(at, n, which).parent;
          ++hops;
        }
        ASSERT_EQ(at, doubleBinaryTreeRoot(n, which));
        ASSERT_LE(hops, ceilLog2(n) + 1) << "n=" << n;
      }
    }
    // The point of two trees: a rank forwards for at most about one tree's worth of children.
    for (int r = 0; r < n; ++r) {
      const int kids =
          doubleBinaryTree(r, n, 0).numChildren + doubleBinaryTree(r, n, 1).numChildren;
      EXPECT_LE(kids, 3) << "n=" << n << " rank " << r;
      if (n % 2 == 0 && n > 2) {
        const bool leaf0 = doubleBinaryTree(r, n, 0).numChildren == 0;
        const bool leaf1 = doubleBinaryTree(r, n, 1).numChildren == 0;
        EXPECT_TRUE(leaf0 || leaf1) << "n=" << n << " rank " << r << " is interior in both";
      }
    }
  }
}

TEST(DoubleTree, EightRanksMatchNccl) {
  // ncclGetBtree for 8 ranks: 0 -> 4; 4 -> 2, 6; 2 -> 1, 3; 6 -> 5, 7.
  const BinaryTreeLinks r0 = inOrderBinaryTree(0, 8);
  EXPECT_EQ(r0.numChildren, 1);
  EXPECT_EQ(r0.children[0], 4);
  const BinaryTreeLinks r4 = inOrderBinaryTree(4, 8);
  EXPECT_EQ(r4.parent, 0);
  EXPECT_EQ(r4.children[0], 2);
  EXPECT_EQ(r4.children[1], 6);
  EXPECT_EQ(inOrderBinaryTree(7, 8).parent, 6);
  EXPECT_EQ(inOrderBinaryTree(3, 8).parent, 2);
  // Six ranks: 4's right child shrinks to 5.
  const BinaryTreeLinks s4 = inOrderBinaryTree(4, 6);
  EXPECT_EQ(s4.numChildren, 2);
  EXPECT_EQ(s4.children[1], 5);
  EXPECT_EQ(inOrderBinaryTree(5, 6).parent, 4);
}

}  // namespace
}  // namespace braid::algo::patterns
