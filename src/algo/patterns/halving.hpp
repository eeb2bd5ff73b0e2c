// Recursive halving (reduce-scatter) and recursive doubling (allgather) over the power-of-two
// virtual ranks of foldToPowerOfTwo (doubling.hpp): the rank arithmetic of Rabenseifner's
// allreduce and of the halving-doubling reduce_scatter. Pure functions.
//
// The data is cut into blocks, and virtual rank v owns blocks [blockStart(v), blockStart(v+1)).
// Halving, round k = 0 .. rounds-1, mask m = pow2 >> (k+1): the vranks form groups of 2m
// consecutive vranks; v exchanges with v ^ m, keeps the half of its group's vranks it belongs
// to, and sends the blocks of the other half. After the last round v holds the full reduction
// of its own blocks. Doubling (the allgather) walks the masks back up, m = 1, 2, .., pow2/2:
// v sends the vranks [base, base+m) it has gathered (base = v with its low log2(m) bits cleared)
// and receives the same-sized range of v ^ m.
#pragma once

#include "algo/patterns/doubling.hpp"

namespace braid::algo::patterns {

/// A half-open range of virtual ranks.
struct VrankRange {
  int begin = 0;
  int end = 0;
  friend constexpr bool operator==(const VrankRange&, const VrankRange&) = default;
};

struct HalvingStep {
  int peer = -1;    // virtual rank exchanged with
  VrankRange keep;  // whose blocks this vrank reduces (and keeps) in this round
  VrankRange send;  // whose blocks it sends to peer (the peer's keep)
};

/// Round `round` (0 .. log2(pow2)-1) of recursive halving for virtual rank `vrank`.
constexpr HalvingStep halvingStep(int vrank, int pow2, int round) noexcept {
  const int m = pow2 >> (round + 1);
  const int base = vrank & ~(2 * m - 1);
  const VrankRange lower{base, base + m};
  const VrankRange upper{base + m, base + 2 * m};
  HalvingStep s;
  s.peer = vrank ^ m;
  const bool inUpper = (vrank & m) != 0;
  s.keep = inUpper ? upper : lower;
  s.send = inUpper ? lower : upper;
  return s;
}

struct DoublingStep {
  int peer = -1;
  VrankRange send;  // gathered so far, sent to peer
  VrankRange recv;  // gathered by peer, received
};

/// Round `round` (0 .. log2(pow2)-1) of recursive-doubling allgather for virtual rank `vrank`
/// (the mirror of halving: round 0 exchanges single vranks' blocks).
constexpr DoublingStep doublingGatherStep(int vrank, int round) noexcept {
  const int m = 1 << round;
  const int base = vrank & ~(m - 1);
  DoublingStep s;
  s.peer = vrank ^ m;
  s.send = {base, base + m};
  s.recv = {base ^ m, (base ^ m) + m};
  return s;
}

/// When the blocks are one per REAL rank (reduce_scatter) and ranks fold as in
/// foldToPowerOfTwo: the first block owned by virtual rank v (0 <= v <= pow2; v = pow2 gives
/// `size`). A vrank made of a folded pair (v < extra) owns the two blocks of real ranks 2v and
/// 2v+1, the others the block of real rank v + extra; the ranges are contiguous and ascending.
constexpr int foldedBlockStart(int vrank, int size) noexcept {
  const int extra = size - floorPow2(size);
  return vrank < extra ? 2 * vrank : vrank + extra;
}

}  // namespace braid::algo::patterns
