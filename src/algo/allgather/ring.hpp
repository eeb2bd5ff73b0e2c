// The ring allgather pass, shared by ring allgather(v) and ring allreduce.
#pragma once

#include <cstddef>

#include "algo/algorithm.hpp"
#include "algo/patterns/segments.hpp"

namespace braid::algo {

/// On entry buf holds segment ctx.rank (per `layout`, in elements of elemSize bytes); on return
/// it holds every segment. Uses no scratch. Requires ctx.size > 1.
void ringAllgatherPass(Context& ctx, void* buf, patterns::SegmentLayout& layout,
                       std::size_t elemSize);

void ringAllgather(Context& ctx, const CollArgs& args);
void ringAllgatherv(Context& ctx, const CollArgs& args);

}  // namespace braid::algo
