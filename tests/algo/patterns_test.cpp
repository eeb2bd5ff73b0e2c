// The pure rank arithmetic of src/algo/patterns, checked alone: every schedule is simulated on
// bitmasks of contributions, so a wrong index shows up as a rank missing data.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "algo/patterns/doubling.hpp"
#include "algo/patterns/pairwise.hpp"
#include "algo/patterns/ring.hpp"
#include "algo/patterns/segments.hpp"
#include "algo/patterns/tree.hpp"

namespace braid::algo::patterns {
namespace {

using Mask = std::uint64_t;
constexpr int kMaxRanks = 40;
Mask all(int n) {
  return n >= 64 ? ~Mask{0} : (Mask{1} << n) - 1;
}

TEST(Ring, NeighboursWrap) {
  EXPECT_EQ(ringNext(0, 1), 0);
  EXPECT_EQ(ringNext(4, 5), 0);
  EXPECT_EQ(ringPrev(0, 5), 4);
  EXPECT_EQ(wrap(-7, 3), 2);
  EXPECT_EQ(wrap(7, 3), 1);
}

TEST(Ring, ReduceScatterGivesEachRankItsSegmentFromAllRanks) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    // have[r][seg]: contributions rank r holds for segment seg.
    std::vector<std::vector<Mask>> have(n, std::vector<Mask>(n));
    for (int r = 0; r < n; ++r)
      for (int seg = 0; seg < n; ++seg) have[r][seg] = Mask{1} << r;
    for (int s = 0; s + 1 < n; ++s) {
      std::vector<std::vector<Mask>> next = have;
      for (int r = 0; r < n; ++r) {
        const int from = ringPrev(r, n);
        const int seg = ringReduceScatterRecvSegment(r, n, s);
        ASSERT_EQ(seg, ringReduceScatterSendSegment(from, n, s)) << "n=" << n;
        if (s > 0) {
          EXPECT_EQ(ringReduceScatterSendSegment(r, n, s),
                    ringReduceScatterRecvSegment(r, n, s - 1));
        }
        next[r][seg] = have[r][seg] | have[from][seg];
      }
      have = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(have[r][r], all(n)) << "n=" << n << " rank " << r;
  }
}

TEST(Ring, AllgatherDeliversEverySegmentOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    std::vector<Mask> have(n);
    for (int r = 0; r < n; ++r) have[r] = Mask{1} << r;
    for (int s = 0; s + 1 < n; ++s) {
      std::vector<Mask> next = have;
      for (int r = 0; r < n; ++r) {
        const int from = ringPrev(r, n);
        const int seg = ringAllgatherRecvSegment(r, n, s);
        ASSERT_EQ(seg, ringAllgatherSendSegment(from, n, s));
        ASSERT_TRUE(have[from] >> seg & 1) << "forwarding a segment not yet held";
        ASSERT_FALSE(have[r] >> seg & 1) << "segment received twice";
        next[r] |= Mask{1} << seg;
      }
      have = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(have[r], all(n));
    if (n > 1) {
      for (int r = 0; r < n; ++r) EXPECT_EQ(ringAllgatherSendSegment(r, n, 0), r);
    }
  }
}

TEST(Tree, Log2Helpers) {
  EXPECT_EQ(ceilLog2(1), 0);
  EXPECT_EQ(ceilLog2(2), 1);
  EXPECT_EQ(ceilLog2(5), 3);
  EXPECT_EQ(ceilLog2(8), 3);
  EXPECT_EQ(floorPow2(1), 1);
  EXPECT_EQ(floorPow2(7), 4);
  EXPECT_EQ(floorPow2(8), 8);
}

TEST(Tree, BinomialTreeSpansAllRanksFromAnyRoot) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (int root = 0; root < n; ++root) {
      std::vector<TreeLinks> t(n);
      for (int r = 0; r < n; ++r) t[r] = binomialTree(r, n, root);
      EXPECT_EQ(t[root].parent, -1);
      std::vector<int> subtree(n, 1);
      for (int r = 0; r < n; ++r) {
        EXPECT_LE(t[r].numChildren, ceilLog2(n));
        if (r != root) {
          ASSERT_GE(t[r].parent, 0);
          const TreeLinks& p = t[t[r].parent];
          int found = 0;
          for (int j = 0; j < p.numChildren; ++j) found += p.children[j] == r;
          EXPECT_EQ(found, 1) << "rank " << r << " is not its parent's child";
          int depth = 0;
          for (int x = r; x != root; x = t[x].parent) ASSERT_LE(++depth, ceilLog2(n));
        }
      }
      // Subtree sizes, leaves first (virtual ranks descending), then ordering of children.
      for (int v = n - 1; v > 0; --v) {
        const int r = (v + root) % n;
        subtree[t[r].parent] += subtree[r];
      }
      EXPECT_EQ(subtree[root], n);
      // Child v + 2^k roots at most 2^k ranks, children by increasing 2^k.
      for (int r = 0; r < n; ++r) {
        const int v = (r - root + n) % n;
        int prevMask = 0;
        for (int j = 0; j < t[r].numChildren; ++j) {
          const int mask = (t[r].children[j] - root + n) % n - v;
          EXPECT_EQ(mask & (mask - 1), 0) << "not a power of two";
          EXPECT_GT(mask, prevMask);
          EXPECT_LE(subtree[t[r].children[j]], mask);
          prevMask = mask;
        }
      }
    }
  }
}

TEST(Doubling, FoldingIsABijectionOntoAPowerOfTwo) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    std::set<int> vranks;
    for (int r = 0; r < n; ++r) {
      const Fold f = foldToPowerOfTwo(r, n);
      EXPECT_EQ(f.pow2, floorPow2(n));
      EXPECT_EQ(1 << f.rounds, f.pow2);
      if (f.folded()) {
        const Fold p = foldToPowerOfTwo(f.partner, n);
        EXPECT_FALSE(p.folded());
        EXPECT_EQ(p.partner, r);
      } else {
        EXPECT_TRUE(vranks.insert(f.vrank).second);
        EXPECT_EQ(unfoldRank(f.vrank, n), r);
      }
    }
    EXPECT_EQ(static_cast<int>(vranks.size()), floorPow2(n));
    EXPECT_EQ(*vranks.rbegin(), floorPow2(n) - 1);
  }
}

TEST(Doubling, RecursiveDoublingAllreduceReachesEveryRank) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    std::vector<Mask> have(n);
    for (int r = 0; r < n; ++r) have[r] = Mask{1} << r;
    for (int r = 0; r < n; ++r) {  // fold
      const Fold f = foldToPowerOfTwo(r, n);
      if (f.folded()) have[f.partner] |= have[r];
    }
    const Fold any = foldToPowerOfTwo(n - 1, n);
    for (int k = 0; k < any.rounds; ++k) {
      std::vector<Mask> next = have;
      for (int r = 0; r < n; ++r) {
        const Fold f = foldToPowerOfTwo(r, n);
        if (f.folded()) continue;
        const int peerV = doublingPeer(f.vrank, k);
        ASSERT_LT(peerV, f.pow2);
        EXPECT_EQ(doublingPeer(peerV, k), f.vrank);
        next[r] |= have[unfoldRank(peerV, n)];
      }
      have = next;
    }
    for (int r = 0; r < n; ++r) {  // unfold
      const Fold f = foldToPowerOfTwo(r, n);
      if (f.folded()) have[r] = have[f.partner];
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(have[r], all(n)) << "n=" << n << " rank " << r;
  }
}

TEST(Doubling, DisseminationReachesEveryRank) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    std::vector<Mask> heard(n);
    for (int r = 0; r < n; ++r) heard[r] = Mask{1} << r;
    for (int k = 0; k < ceilLog2(n); ++k) {
      std::vector<Mask> next = heard;
      for (int r = 0; r < n; ++r) {
        const int from = disseminationRecvPeer(r, n, k);
        EXPECT_EQ(disseminationSendPeer(from, n, k), r);
        next[r] |= heard[from];
      }
      heard = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(heard[r], all(n));
  }
}

TEST(Pairwise, EveryStepIsAPermutationAndEveryPairMeetsOnce) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    std::vector<std::set<int>> sentTo(n);
    for (int s = 1; s < n; ++s) {
      std::set<int> targets;
      for (int r = 0; r < n; ++r) {
        const int to = pairwiseSendPeer(r, n, s);
        EXPECT_NE(to, r);
        EXPECT_EQ(pairwiseRecvPeer(to, n, s), r);
        targets.insert(to);
        EXPECT_TRUE(sentTo[r].insert(to).second);
      }
      EXPECT_EQ(static_cast<int>(targets.size()), n);
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(static_cast<int>(sentTo[r].size()), n - 1);
  }
}

TEST(Segments, EvenSplitIsBalancedAndContiguous) {
  for (std::size_t total : {0u, 1u, 7u, 13u, 64u, 1031u}) {
    for (int parts = 1; parts <= 9; ++parts) {
      std::size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = evenSplit(total, parts, i);
        EXPECT_EQ(r.offset, next);
        EXPECT_LE(r.count, (total + parts - 1) / parts);
        EXPECT_GE(r.count, total / parts);
        next += r.count;
      }
      EXPECT_EQ(next, total);
    }
  }
}

TEST(Segments, ChunksCoverARangeExactly) {
  EXPECT_EQ(chunkCount(0, 4), 0u);
  EXPECT_EQ(chunkCount(1, 4), 1u);
  EXPECT_EQ(chunkCount(8, 4), 2u);
  EXPECT_EQ(chunkCount(9, 4), 3u);
  const Range seg{100, 9};
  EXPECT_EQ(chunkOf(seg, 4, 0), (Range{100, 4}));
  EXPECT_EQ(chunkOf(seg, 4, 2), (Range{108, 1}));
  EXPECT_EQ(chunkOf(seg, 4, 3).count, 0u);
  EXPECT_EQ(chunkOf(seg, 4, 9).count, 0u);
}

TEST(Segments, ChunkElementsRespectsScratchAndElementSize) {
  EXPECT_EQ(chunkElements(64, 4096, 4, 4), 16u);
  EXPECT_EQ(chunkElements(4096, 4096, 4, 4), 256u);  // bounded by a quarter of scratch
  EXPECT_EQ(chunkElements(64, 0, 0, 8), 8u);         // no scratch needed
  EXPECT_EQ(chunkElements(3, 4096, 1, 8), 1u);       // at least one element
  EXPECT_EQ(chunkElements(70, 4096, 2, 8), 8u);      // rounded down to whole elements
}

TEST(Segments, LayoutsMatchTheirDefinition) {
  auto even = SegmentLayout::even(10, 4);
  EXPECT_EQ(even.maxCount(), 3u);
  EXPECT_EQ(even.at(3), (Range{8, 2}));
  auto blocks = SegmentLayout::blocks(5, 3);
  EXPECT_EQ(blocks.totalCount(), 15u);
  EXPECT_EQ(blocks.at(2), (Range{10, 5}));

  const std::vector<std::size_t> counts{3, 0, 5, 1, 4, 2};
  std::vector<std::size_t> packed(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), packed.begin(), std::size_t{0});
  auto v = SegmentLayout::varying(counts, {});
  EXPECT_EQ(v.maxCount(), 5u);
  EXPECT_EQ(v.totalCount(), 15u);
  // Walks forwards, backwards with wrap-around, and jumps.
  const int order[] = {2, 1, 0, 5, 4, 3, 4, 5, 0, 1, 3, 3, 0, 5, 2};
  for (int i : order) EXPECT_EQ(v.at(i), (Range{packed[i], counts[i]})) << "index " << i;

  const std::vector<std::size_t> displs{40, 0, 10, 30, 20, 50};
  auto d = SegmentLayout::varying(counts, displs);
  for (int i : order) EXPECT_EQ(d.at(i), (Range{displs[i], counts[i]}));
}

}  // namespace
}  // namespace braid::algo::patterns
