// Direct shared-memory reduce-scatter and reduce-scatterv (transport::SharedMemoryGroup; all
// ranks on one host; the registry row's constraint, selection picks it only then).
//
// Reduce-scatter. Every block is cut into chunks of C = min(chunkBytes, staging half / N) bytes;
// per chunk index:
//   1. copy that chunk of each of the N input blocks into this rank's staging half;
//   2. barrier;
//   3. reduce chunk `rank` of every rank's staging, in rank order, into the output.
// Steps alternate staging halves. 1 barrier per chunk; memory traffic per rank: its input written
// once into the segment, N chunks read per output chunk. Every rank reduces in rank order
// (algo/rank_order.hpp), deterministic mode or not.
//
// Reduce-scatterv. The same rounds over blocks of different lengths (every rank knows all
// counts; blocks packed in the input): slot q of C = min(chunkBytes, staging half / N) bytes
// holds round k's part [kC, (k+1)C) of block q. ceil(largest block / C) barriers (none when
// every block is empty); the same memory traffic as reduce-scatter.
//
// chunkBytes here is Context::chunkBytes (BRAID_CHUNK_SIZE), not the measured
// SharedMemoryGroup::chunkBytes() of the algorithms that stage one area per rank: the probe
// times that pattern, not one slot per peer, and larger slots did not pay off here
// (docs/benchmarks.md, "The shared-memory chunk from measurement").
#include <algorithm>

#include "algo/exchange.hpp"
#include "algo/rank_order.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void shmDirectReduceScatter(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t block = a.count * es;
  const int me = ctx.rank;
  const int n = ctx.size;
  if (n == 1) {
    copyBytes(a.recv, a.send, block);
    return;
  }
  transport::SharedMemoryGroup* g =
      &requireSharedGroup(ctx, Collective::ReduceScatter, "shm_direct");
  if (block == 0) return;
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);
  const std::size_t perRank = g->stagingBytes() / 2 / static_cast<std::size_t>(n);
  const std::size_t chunk = std::max<std::size_t>(1, std::min(ctx.chunkBytes, perRank) / es);
  for (std::size_t off = 0; off < a.count; off += chunk) {
    const std::size_t c = std::min(chunk, a.count - off);
    const std::size_t h = g->beginStep();
    std::uint8_t* mine = g->staging(me) + h;
    for (int q = 0; q < n; ++q)
      std::memcpy(mine + static_cast<std::size_t>(q) * c * es,
                  in + (static_cast<std::size_t>(q) * a.count + off) * es, c * es);
    g->barrier(ctx.tag, ctx.deadline);
    const std::size_t at = h + static_cast<std::size_t>(me) * c * es;
    reduceInRankOrder(a.dtype, a.op, out + off * es, n, c,
                      [&](int p) -> const void* { return g->staging(p) + at; });
  }
}

void shmDirectReduceScatterv(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const int me = ctx.rank;
  const int n = ctx.size;
  const auto un = static_cast<std::size_t>(n);
  const auto ume = static_cast<std::size_t>(me);
  transport::SharedMemoryGroup* g =
      n > 1 ? &requireSharedGroup(ctx, Collective::ReduceScatterv, "shm_direct") : nullptr;
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);
  if (n == 1) {
    copyBytes(out, in + a.displs[0] * es, a.counts[0] * es);
    return;
  }
  const std::size_t largest = *std::max_element(a.counts.begin(), a.counts.end());
  const std::size_t perRank = g->stagingBytes() / 2 / un;
  const std::size_t chunk = std::max<std::size_t>(1, std::min(ctx.chunkBytes, perRank) / es);
  const std::size_t slot = chunk * es;
  for (std::size_t from = 0; from < largest; from += chunk) {
    const std::size_t h = g->beginStep();
    std::uint8_t* mine = g->staging(me) + h;
    for (std::size_t q = 0; q < un; ++q)
      if (a.counts[q] > from)
        std::memcpy(mine + q * slot, in + (a.displs[q] + from) * es,
                    std::min(chunk, a.counts[q] - from) * es);
    g->barrier(ctx.tag, ctx.deadline);
    if (a.counts[ume] <= from) continue;
    const std::size_t c = std::min(chunk, a.counts[ume] - from);
    const std::size_t at = h + ume * slot;
    kernels::reduce3(a.dtype, a.op, out + from * es, g->staging(0) + at, g->staging(1) + at, c);
    for (int p = 2; p < n; ++p)
      kernels::reduceInto(a.dtype, a.op, out + from * es, g->staging(p) + at, c);
  }
}

}  // namespace braid::algo
