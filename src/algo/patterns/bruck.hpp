// Bruck's allgather and alltoall (Bruck, Ho, Kipnis, Upfal & Weathersby, 1997): ceil(log2 N)
// steps instead of N-1, for small messages. Pure functions.
//
// Both keep the data in rotated order: slot i of rank r holds the block of rank (r + i) mod N
// (allgather) or the block for rank (r + i) mod N (alltoall, before the exchange).
//   Allgather, step k (distance d = 2^k): send slots [0, n_k) to rank r - d, receive slots
//   [d, d + n_k) from rank r + d, with n_k = min(d, N - d). After the last step slot i holds
//   the block of rank r + i: rotating by r puts every block in place.
//   Alltoall, step k: send every slot i with bit k set to rank r + d, receive the same slots
//   from rank r - d. Afterwards slot i holds the block rank (r - i) mod N sent to r.
#pragma once

#include "algo/patterns/ring.hpp"
#include "algo/patterns/tree.hpp"

namespace braid::algo::patterns {

/// Number of steps: ceil(log2 size).
constexpr int bruckSteps(int size) noexcept {
  return ceilLog2(size);
}

/// Blocks sent at allgather step `step`: min(2^step, size - 2^step).
constexpr int bruckAllgatherBlocks(int size, int step) noexcept {
  const int d = 1 << step;
  return d < size - d ? d : size - d;
}
constexpr int bruckAllgatherSendPeer(int rank, int size, int step) noexcept {
  return wrap(rank - (1 << step), size);
}
constexpr int bruckAllgatherRecvPeer(int rank, int size, int step) noexcept {
  return wrap(rank + (1 << step), size);
}

/// Alltoall step `step`: slot i takes part when bit `step` of i is set.
constexpr bool bruckAlltoallSlotMoves(int slot, int step) noexcept {
  return ((slot >> step) & 1) != 0;
}
/// Slots taking part in alltoall step `step` among [0, size).
constexpr int bruckAlltoallBlocks(int size, int step) noexcept {
  int n = 0;
  for (int i = 0; i < size; ++i) n += bruckAlltoallSlotMoves(i, step) ? 1 : 0;
  return n;
}
constexpr int bruckAlltoallSendPeer(int rank, int size, int step) noexcept {
  return wrap(rank + (1 << step), size);
}
constexpr int bruckAlltoallRecvPeer(int rank, int size, int step) noexcept {
  return wrap(rank - (1 << step), size);
}
/// After the exchange: the output block of rank `from` is in slot (rank - from) mod size.
constexpr int bruckAlltoallFinalSlot(int rank, int size, int from) noexcept {
  return wrap(rank - from, size);
}

}  // namespace braid::algo::patterns
