// Deterministic mode's one reduction order (Context::deterministic): every element is reduced
// as ((x0 op x1) op x2) ... op x(N-1), ranks in order, each step one kernel call with the
// accumulator as its first operand (fp16/bf16: widened to fp32, combined, rounded back). Every
// rank-ordered algorithm funnels its reductions through these helpers, so they all give the same
// bits whatever the transport, the chunking or the rank that computes a given element.
#pragma once

#include <algorithm>
#include <cstring>

#include "algo/exchange.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

/// dst = ((src(0) op src(1)) op src(2)) ... op src(n-1) over `count` elements; n >= 2.
/// dst may alias src(0) or src(1), no later input.
template <class Src>
inline void reduceInRankOrder(DataType t, ReduceOp op, void* dst, int n, std::size_t count,
                              Src src) {
  kernels::reduce3(t, op, dst, src(0), src(1), count);
  for (int p = 2; p < n; ++p) kernels::reduceInto(t, op, dst, src(p), count);
}

/// Shared-memory collectives: reduces `count` elements at byte offset `at` of every rank's
/// staging area, in rank order, into this rank's own staging area at `at`. This rank's values
/// are first saved in scratch (piece by piece), as the accumulator overwrites them before their
/// turn comes. Only this rank may touch its staging bytes [at, at + count * es) meanwhile.
inline void reduceStagedInRankOrder(Context& ctx, transport::SharedMemoryGroup& g, DataType t,
                                    ReduceOp op, std::size_t at, std::size_t count) {
  const std::size_t es = dataTypeSize(t);
  const std::size_t piece = std::max<std::size_t>(1, ctx.scratch.size() / es);
  const int me = ctx.rank;
  for (std::size_t done = 0; done < count;) {
    const std::size_t k = std::min(piece, count - done);
    const std::size_t off = at + done * es;
    std::uint8_t* const mine = g.staging(me) + off;
    std::memcpy(ctx.scratch.data(), mine, k * es);
    reduceInRankOrder(t, op, mine, ctx.size, k, [&](int p) -> const void* {
      return p == me ? ctx.scratch.data() : g.staging(p) + off;
    });
    done += k;
  }
}

}  // namespace braid::algo
