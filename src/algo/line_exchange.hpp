// What the low-latency shared-memory collectives (src/algo/*/shm_ll.cpp) share: when a line
// exchange applies, and the rank-ordered reduction of the ranks' lines.
#pragma once

#include <cstring>

#include "algo/exchange.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

/// The host's shared group when one line exchange carries `lineBytes` per rank (several ranks
/// sharing a group, 1..kLineBytes bytes); nullptr when the caller must run its fallback.
inline transport::SharedMemoryGroup* lineGroup(Context& ctx, std::size_t lineBytes) {
  if (ctx.size == 1 || lineBytes == 0 || lineBytes > transport::SharedMemoryGroup::kLineBytes)
    return nullptr;
  return ctx.tr.sharedGroup();
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
