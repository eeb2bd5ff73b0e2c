// Pairwise exchange peers for alltoall. Pure functions.
#pragma once

namespace braid::algo::patterns {

/// Pairwise alltoall: size-1 steps; at step s (1 .. size-1) rank r sends its block for r + s and
/// receives the block of r - s (mod size), so every step is a permutation of the ranks.
constexpr int pairwiseSendPeer(int rank, int size, int step) noexcept {
  return (rank + step) % size;
}
constexpr int pairwiseRecvPeer(int rank, int size, int step) noexcept {
  return ((rank - step) % size + size) % size;
}

}  // namespace braid::algo::patterns
