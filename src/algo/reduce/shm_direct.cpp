// Direct shared-memory reduce (transport::SharedMemoryGroup; all ranks on one host, the
// row's constraint).
//
// Small (bytes <= kSmallBytes): every rank copies its input into its staging half, barrier,
//   the root reduces all N in rank order into its output. 1 barrier.
// Large: chunks of C = min(chunkBytes, staging half) bytes; per chunk:
//   1. copy the peers' slices of the chunk (all but slice `rank`) into this rank's staging half;
//   2. barrier;
//   3. reduce slice `rank`: the own input plus every peer's staged slice `rank`, into the own
//      staged slice, 16 KiB at a time through a stack buffer (the root: into its output);
//   4. barrier;
//   5. the root copies every peer's reduced slice into its output.
// Steps alternate staging halves. 2 barriers per chunk; memory traffic per rank: (N-1)/N
// written and (N-1)/N read of the chunk, 1/N read from the input and written; the root also
// reads the peers' (N-1)/N of the result once. Deterministic mode stages the whole chunk.
// Deterministic mode (Context::deterministic): step 3 reduces in rank order
// (algo/rank_order.hpp), and without a shared group the rank_ordered reduce replaces the tree.
//
// No single copy (algo/single_copy.hpp): a root that reads every peer's input itself does the
// whole reduction alone, (N-1) x bytes through process_vm_readv, while the staged chunks share
// it among the ranks (docs/benchmarks.md, "Reduce staged; single copy in a band tried").
#include <algorithm>
#include <cstring>

#include "algo/exchange.hpp"
#include "algo/patterns/segments.hpp"
#include "algo/rank_order.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

namespace {

constexpr std::size_t kSmallBytes = 4096;

}  // namespace

void shmDirectReduce(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t bytes = a.count * es;
  const int n = ctx.size;
  const int me = ctx.rank;
  const bool isRoot = me == a.root;
  if (n == 1) {
    copyBytes(a.recv, a.send, bytes);
    return;
  }
  transport::SharedMemoryGroup* g = &requireSharedGroup(ctx, Collective::Reduce, "shm_direct");
  if (bytes == 0) return;
  const std::size_t half = g->stagingBytes() / 2;
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);

  if (bytes <= kSmallBytes && bytes <= half) {
    const std::size_t h = g->beginStep();
    std::memcpy(g->staging(me) + h, in, bytes);
    g->barrier(ctx.tag, ctx.deadline);
    if (!isRoot) return;
    kernels::reduce3(a.dtype, a.op, out, g->staging(0) + h, g->staging(1) + h, a.count);
    for (int p = 2; p < n; ++p) kernels::reduceInto(a.dtype, a.op, out, g->staging(p) + h, a.count);
    return;
  }

  const std::size_t chunk = std::max<std::size_t>(1, std::min(g->chunkBytes(), half) / es);
  const bool stream = isRoot && streamsOutput(bytes, n) && out != in;
  for (std::size_t off = 0; off < a.count; off += chunk) {
    const std::size_t c = std::min(chunk, a.count - off);
    const std::size_t h = g->beginStep();
    const patterns::Range mine = patterns::evenSplit(c, n, me);
    std::uint8_t* staged = g->staging(me) + h;
    const std::uint8_t* chunkIn = in + off * es;
    if (ctx.deterministic) {
      std::memcpy(staged, chunkIn, c * es);
    } else {
      // Only the peers' slices are staged: the own slice is reduced straight from the input.
      patterns::copyAllBut(staged, chunkIn, c, mine, es);
    }
    g->barrier(ctx.tag, ctx.deadline);
    if (mine.count > 0 && ctx.deterministic) {
      reduceStagedInRankOrder(ctx, *g, a.dtype, a.op, h + mine.offset * es, mine.count);
      if (isRoot)
        copyOut(stream, out + (off + mine.offset) * es, staged + mine.offset * es, mine.count * es);
    } else if (mine.count > 0) {
      // The root reduces its slice into its output, every other rank into its staged slice.
      std::uint8_t* dst = isRoot ? out + (off + mine.offset) * es : staged + mine.offset * es;
      auto peerSlice = [&](int s) { return g->staging((me + s) % n) + h + mine.offset * es; };
      const std::uint8_t* own = chunkIn + mine.offset * es;
      if (stream && n == 2) {
        kernels::reduce3(a.dtype, a.op, dst, own, peerSlice(1), mine.count,
                         kernels::StoreMode::Streaming);
      } else if (isRoot && !stream) {
        kernels::reduce3(a.dtype, a.op, dst, own, peerSlice(1), mine.count);
        for (int s = 2; s < n; ++s)
          kernels::reduceInto(a.dtype, a.op, dst, peerSlice(s), mine.count);
      } else {
        // A non-root's sum goes to its staged slice, whose lines the root read two chunks ago;
        // a streaming root's is never read back: both sum through a stack block
        // (sumInBlocks, exchange.hpp) and copy it out.
        sumInBlocks(a.dtype, a.op, own, peerSlice, n - 1, mine.count,
                    [&](std::size_t at, const std::uint8_t* block, std::size_t b) {
                      copyOut(stream, dst + at, block, b);
                    });
      }
    }
    g->barrier(ctx.tag, ctx.deadline);
    if (!isRoot) continue;
    for (int s = 1; s < n; ++s) {
      const int q = (me + s) % n;
      const patterns::Range sl = patterns::evenSplit(c, n, q);
      copyOut(stream, out + (off + sl.offset) * es, g->staging(q) + h + sl.offset * es,
              sl.count * es);
    }
  }
}

}  // namespace braid::algo
