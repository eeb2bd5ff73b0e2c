// What the low-latency shared-memory collectives (src/algo/*/shm_ll.cpp) share: when a line
// exchange applies, and the rank-ordered reduction of the ranks' lines.
#pragma once

#include <cstring>

#include "algo/exchange.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

/// The host's shared group for one line exchange of `lineBytes` (<= kLineBytes) per rank.
/// Selection runs shm_ll only where this holds (the rows' constraints); entered otherwise, it
/// throws Error(InvalidArgument) naming the constraint (algorithm.hpp, violated()). A world of
/// one rank and an empty message never reach it: the callers finish those locally.
inline transport::SharedMemoryGroup& lineGroup(Context& ctx, Collective coll,
                                               std::size_t lineBytes) {
  if (lineBytes > transport::SharedMemoryGroup::kLineBytes)
    violated(ctx, coll, "shm_ll", Constraint::MaxBytes);
  return requireSharedGroup(ctx, coll, "shm_ll");
}

/// After this rank posted `own` (its whole line): reduces `count` elements at byte `offset` of
/// every rank's line, in rank order (so every rank computes the same bits), into `out`.
inline void reduceLines(Context& ctx, transport::SharedMemoryGroup& g, DataType t, ReduceOp op,
                        const std::uint8_t* own, std::size_t offset, std::size_t count, void* out) {
  auto input = [&](int p) { return (p == ctx.rank ? own : g.lineWait(p, ctx.deadline)) + offset; };
  alignas(64) std::uint8_t acc[transport::SharedMemoryGroup::kLineBytes];
  const std::uint8_t* x0 = input(0);
  kernels::reduce3(t, op, acc, x0, input(1), count);
  for (int p = 2; p < ctx.size; ++p) kernels::reduceInto(t, op, acc, input(p), count);
  std::memcpy(out, acc, count * dataTypeSize(t));
}

}  // namespace braid::algo
