// Direct shared-memory allreduce: every rank reads its peers' data in the host's segment
// (transport::SharedMemoryGroup), no messages. Needs all ranks on one host (the row's
// constraint: selection picks it only then).
//
// Small (bytes <= kSmallBytes): one step. Each rank copies its input into its staging half,
//   barrier, then reduces all N staged inputs in rank order into its output (every rank computes
//   the same sum in the same order). 1 barrier; bytes copied per rank: 1 in, N-1 read.
// Large: the buffer is cut into chunks of C = min(chunkBytes, staging half) bytes; per chunk:
//   1. copy the peers' slices of the chunk (all but slice `rank`, 1/N each) into this rank's
//      staging half;
//   2. barrier;
//   3. reduce slice `rank`: the own input plus every peer's staged slice `rank`, into the
//      output, then copy the result into the own staged slice (only its owner touches it);
//   4. barrier;
//   5. copy every peer's reduced slice into the output.
//   Steps alternate staging halves, so step 1 of chunk k+1 overlaps no reader of chunk k.
//   2 barriers per chunk; memory traffic per rank, in units of the chunk: staged (N-1)/N
//   written, (N-1)/N read from peers and 1/N from the input in step 3, 1/N written twice, and
//   (N-1)/N read from peers in step 5: about 2 read + 2 written at N = 2 (the own slice never
//   goes through the segment before it is reduced). Each slice is reduced once, so every rank
//   ends with bitwise the same result.
// Deterministic mode (Context::deterministic): step 3 reduces the slice in rank order instead
//   (algo/rank_order.hpp: the whole chunk is staged in step 1, the own slice saved in scratch
//   first, 1/N of a chunk copied once more), and without a shared group the rank_ordered algorithm
//   replaces the ring.
#include <algorithm>

#include "algo/exchange.hpp"
#include "algo/patterns/segments.hpp"
#include "algo/rank_order.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

namespace {

constexpr std::size_t kSmallBytes = 4096;

}  // namespace

void shmDirectAllreduce(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t bytes = a.count * es;
  if (ctx.size == 1) {
    copyBytes(a.recv, a.send, bytes);
    return;
  }
  transport::SharedMemoryGroup* g = &requireSharedGroup(ctx, Collective::Allreduce, "shm_direct");
  if (bytes == 0) return;
  const int n = ctx.size;
  const int me = ctx.rank;
  const std::size_t half = g->stagingBytes() / 2;
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);

  if (bytes <= kSmallBytes && bytes <= half) {
    const std::size_t h = g->beginStep();
    std::memcpy(g->staging(me) + h, in, bytes);
    g->barrier(ctx.tag, ctx.deadline);
    kernels::reduce3(a.dtype, a.op, out, g->staging(0) + h, g->staging(1) + h, a.count);
    for (int p = 2; p < n; ++p) kernels::reduceInto(a.dtype, a.op, out, g->staging(p) + h, a.count);
    return;
  }

  const std::size_t chunk = std::max<std::size_t>(1, std::min(g->chunkBytes(), half) / es);
  // A large output is written with non-temporal stores: no read-for-ownership, and the staged
  // chunks stay cached.
  const bool stream = streamsOutput(*g, bytes);
  for (std::size_t off = 0; off < a.count; off += chunk) {
    const std::size_t c = std::min(chunk, a.count - off);
    const std::size_t h = g->beginStep();
    const patterns::Range mine = patterns::evenSplit(c, n, me);
    std::uint8_t* staged = g->staging(me) + h;
    const std::uint8_t* chunkIn = in + off * es;
    std::uint8_t* chunkOut = out + off * es;
    if (ctx.deterministic) {
      std::memcpy(staged, chunkIn, c * es);
    } else {
      // Only the peers' slices are staged: this rank reduces its own slice straight from its
      // input.
      patterns::copyAllBut(staged, chunkIn, c, mine, es);
    }
    g->barrier(ctx.tag, ctx.deadline);
    if (mine.count > 0 && ctx.deterministic) {
      reduceStagedInRankOrder(ctx, *g, a.dtype, a.op, h + mine.offset * es, mine.count);
      copyOut(stream, chunkOut + mine.offset * es, staged + mine.offset * es, mine.count * es);
    } else if (mine.count > 0) {
      // in + every peer's staged slice, published in the own staged slice and written out.
      // Cached: into the output, then copied to the stage; streaming: block by block through
      // the stack, each block copied to the stage and streamed out.
      std::uint8_t* dst = chunkOut + mine.offset * es;
      std::uint8_t* pub = staged + mine.offset * es;
      const std::uint8_t* own = chunkIn + mine.offset * es;
      auto peerSlice = [&](int s) { return g->staging((me + s) % n) + h + mine.offset * es; };
      if (stream) {
        // Summing straight into the stage made every store wait for a peer's copy of its line
        // to go (sumInBlocks, exchange.hpp): 2 ranks, 32-128 MiB, 4.4-5.1 -> 5.5-5.9 GB/s.
        sumInBlocks(a.dtype, a.op, own, peerSlice, n - 1, mine.count,
                    [&](std::size_t at, const std::uint8_t* block, std::size_t b) {
                      std::memcpy(pub + at, block, b);
                      copyOut(true, dst + at, block, b);
                    });
      } else {
        kernels::reduce3(a.dtype, a.op, dst, own, peerSlice(1), mine.count);
        for (int s = 2; s < n; ++s)
          kernels::reduceInto(a.dtype, a.op, dst, peerSlice(s), mine.count);
        std::memcpy(pub, dst, mine.count * es);
      }
    }
    g->barrier(ctx.tag, ctx.deadline);
    for (int s = 1; s < n; ++s) {
      const int q = (me + s) % n;
      const patterns::Range sl = patterns::evenSplit(c, n, q);
      copyOut(stream, chunkOut + sl.offset * es, g->staging(q) + h + sl.offset * es, sl.count * es);
    }
  }
}

}  // namespace braid::algo
