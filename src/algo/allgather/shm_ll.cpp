// Low-latency shared-memory allgather for tiny blocks (transport::SharedMemoryGroup line
// exchange; all ranks on one host, blocks up to a line: the row's constraints).
//
// Steps (block bytes <= SharedMemoryGroup::kLineBytes, 1008):
//   1. every rank posts its block in its own line (data, tag, exchange number; one cache line up to
//   48 B);
//   2. every rank polls each peer's line in turn and copies the block into its place.
// Memory traffic per rank: one line written, N-1 lines read; no barrier, no staging.
#include "algo/line_exchange.hpp"

namespace braid::algo {

void shmLowLatencyAllgather(Context& ctx, const CollArgs& a) {
  const std::size_t block = a.count * dataTypeSize(a.dtype);
  const int me = ctx.rank;
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);
  if (ctx.size == 1 || block == 0) {
    copyBytes(out + static_cast<std::size_t>(me) * block, in, block);
    return;
  }
  transport::SharedMemoryGroup* g = &lineGroup(ctx, Collective::Allgather, block);
  g->linePost(ctx.tag, in, block, ctx.deadline);
  for (int s = 1; s < ctx.size; ++s) {
    const int q = (me + s) % ctx.size;
    std::memcpy(out + static_cast<std::size_t>(q) * block, g->lineWait(q, ctx.deadline), block);
  }
  copyBytes(out + static_cast<std::size_t>(me) * block, in, block);
}

}  // namespace braid::algo
