// The ring reduce-scatter pass, shared by ring reduce_scatter(v) and ring allreduce.
#pragma once

#include <braid/types.hpp>

#include "algo/algorithm.hpp"
#include "algo/patterns/segments.hpp"

namespace braid::algo {

/// Reduces segment ctx.rank of `in` (segments per `layout`, in elements) over all ranks into
/// `out`. `out` may be exactly segment ctx.rank of `in` (in place), else must not overlap `in`.
/// Uses four scratch chunks. Requires ctx.size > 1.
void ringReduceScatterPass(Context& ctx, DataType dtype, ReduceOp op, const void* in,
                           patterns::SegmentLayout& layout, void* out);

void ringReduceScatter(Context& ctx, const CollArgs& args);
void ringReduceScatterv(Context& ctx, const CollArgs& args);

}  // namespace braid::algo
