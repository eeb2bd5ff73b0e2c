// Direct shared-memory allgather (transport::SharedMemoryGroup; all ranks on one host, else the
// ring algorithm runs instead).
//
// Each rank's block is cut into chunks of C = min(chunkBytes, staging half) bytes; per chunk:
//   1. copy the chunk of this rank's block into its staging half;
//   2. barrier;
//   3. copy every peer's staged chunk into its block of the output.
// Steps alternate staging halves. 1 barrier per chunk; memory traffic per rank: 1 write of its
// block into the segment, N-1 blocks read out of it.
#include <algorithm>

#include "algo/exchange.hpp"

namespace braid::algo {

void ringAllgather(Context&, const CollArgs&);

void shmDirectAllgather(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t block = a.count * es;
  std::uint8_t* out = bytesOf(a.recv);
  const int me = ctx.rank;
  if (ctx.size == 1) {
    copyBytes(out, a.send, block);
    return;
  }
  transport::SharedMemoryGroup* g = ctx.tr.sharedGroup();
  if (g == nullptr) {
    ringAllgather(ctx, a);
    return;
  }
  if (block == 0) return;
  const std::uint8_t* in = bytesOf(a.send);
  const std::size_t chunk = std::max(es, std::min(ctx.chunkBytes, g->stagingBytes() / 2) / es * es);
  for (std::size_t off = 0; off < block; off += chunk) {
    const std::size_t c = std::min(chunk, block - off);
    const std::size_t h = g->beginStep();
    std::memcpy(g->staging(me) + h, in + off, c);
    g->barrier(ctx.tag, ctx.deadline);
    for (int s = 0; s < ctx.size; ++s) {
      const int q = (me + s) % ctx.size;
      std::uint8_t* dst = out + static_cast<std::size_t>(q) * block + off;
      if (q == me)
        copyBytes(dst, in + off, c);
      else
        std::memcpy(dst, g->staging(q) + h, c);
    }
  }
}

}  // namespace braid::algo
