// The rank-ordered reduce-scatter pass, shared by rank_ordered reduce_scatter(v) and allreduce.
#pragma once

#include <braid/types.hpp>

#include "algo/algorithm.hpp"
#include "algo/patterns/segments.hpp"

namespace braid::algo {

/// Reduces segment ctx.rank of `in` (segments per `layout`, in elements) over all ranks into
/// `out`, every element in rank order (algo/rank_order.hpp) whatever Context::deterministic
/// says. `out` may be exactly segment ctx.rank of `in` (in place), else must not overlap `in`.
/// Uses 2N scratch chunks. Requires ctx.size > 1.
void rankOrderedReduceScatterPass(Context& ctx, DataType dtype, ReduceOp op, const void* in,
                                  patterns::SegmentLayout& layout, void* out);

void rankOrderedReduceScatter(Context& ctx, const CollArgs& args);
void rankOrderedReduceScatterv(Context& ctx, const CollArgs& args);

}  // namespace braid::algo
