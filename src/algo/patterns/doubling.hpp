// Recursive doubling with non-power-of-two folding, and the dissemination barrier's peers.
// Pure functions.
//
// Recursive doubling needs a power of two p of ranks. With size = p + extra, the first 2*extra
// ranks pair up: each even rank r < 2*extra folds its data into r + 1 and sits out; odd ranks
// r < 2*extra take virtual rank r / 2, ranks r >= 2*extra take r - extra. The p virtual ranks
// then exchange with vrank ^ 2^k for k = 0 .. log2(p)-1, and each odd folding partner finally
// hands the result back to the even rank that folded into it.
#pragma once

#include "algo/patterns/tree.hpp"

namespace braid::algo::patterns {

struct Fold {
  int pow2 = 1;      // ranks taking part in the exchange rounds
  int rounds = 0;    // log2(pow2)
  int vrank = -1;    // virtual rank in [0, pow2), -1 for a folded rank
  int partner = -1;  // real rank this one folds into (folded) or receives a fold from, else -1
  bool folded() const noexcept { return vrank < 0; }
};

constexpr Fold foldToPowerOfTwo(int rank, int size) noexcept {
  Fold f;
  f.pow2 = floorPow2(size);
  f.rounds = ceilLog2(f.pow2);
  const int extra = size - f.pow2;
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      f.partner = rank + 1;
    } else {
      f.partner = rank - 1;
      f.vrank = rank / 2;
    }
  } else {
    f.vrank = rank - extra;
  }
  return f;
}

/// The real rank of virtual rank `vrank` (inverse of foldToPowerOfTwo for active ranks).
constexpr int unfoldRank(int vrank, int size) noexcept {
  const int extra = size - floorPow2(size);
  return vrank < extra ? 2 * vrank + 1 : vrank + extra;
}

/// The virtual rank `vrank` exchanges with in round `round`.
constexpr int doublingPeer(int vrank, int round) noexcept {
  return vrank ^ (1 << round);
}

/// Dissemination barrier: ceilLog2(size) rounds; in round k rank r signals r + 2^k and waits
/// for r - 2^k (mod size).
constexpr int disseminationSendPeer(int rank, int size, int round) noexcept {
  return (rank + (1 << round)) % size;
}
constexpr int disseminationRecvPeer(int rank, int size, int round) noexcept {
  return ((rank - (1 << round)) % size + size) % size;
}

}  // namespace braid::algo::patterns
