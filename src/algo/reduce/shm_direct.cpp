// Direct shared-memory reduce (transport::SharedMemoryGroup; all ranks on one host, else the
// binomial tree runs instead).
//
// Small (bytes <= kSmallBytes): every rank copies its input into its staging half, barrier,
//   the root reduces all N in rank order into its output. 1 barrier.
// Large: chunks of C = min(chunkBytes, staging half) bytes; per chunk:
//   1. copy the chunk into this rank's staging half;
//   2. barrier;
//   3. reduce slice `rank` (1/N of the chunk) of every peer's staged chunk into this rank's own
//      staged slice, in place;
//   4. barrier;
//   5. the root copies every reduced slice into its output.
// Steps alternate staging halves. 2 barriers per chunk; memory traffic per rank: 1 write and
// (N-1)/N reads of the chunk; the root also reads the whole result once.
// Deterministic mode (Context::deterministic): step 3 reduces in rank order
// (algo/rank_order.hpp), and without a shared group the rank_ordered reduce replaces the tree.
#include <algorithm>

#include "algo/exchange.hpp"
#include "algo/patterns/segments.hpp"
#include "algo/rank_order.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void binomialTreeReduce(Context&, const CollArgs&);
void rankOrderedReduce(Context&, const CollArgs&);

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
  transport::SharedMemoryGroup* g = ctx.tr.sharedGroup();
  if (g == nullptr) {
    if (ctx.deterministic)
      rankOrderedReduce(ctx, a);
    else
      binomialTreeReduce(ctx, a);
    return;
  }
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

  const std::size_t chunk = std::max<std::size_t>(1, std::min(ctx.chunkBytes, half) / es);
  for (std::size_t off = 0; off < a.count; off += chunk) {
    const std::size_t c = std::min(chunk, a.count - off);
    const std::size_t h = g->beginStep();
    std::memcpy(g->staging(me) + h, in + off * es, c * es);
    g->barrier(ctx.tag, ctx.deadline);
    const patterns::Range mine = patterns::evenSplit(c, n, me);
    if (mine.count > 0 && ctx.deterministic) {
      reduceStagedInRankOrder(ctx, *g, a.dtype, a.op, h + mine.offset * es, mine.count);
    } else if (mine.count > 0) {
      std::uint8_t* dst = g->staging(me) + h + mine.offset * es;
      for (int s = 1; s < n; ++s) {
        const int p = (me + s) % n;
        kernels::reduceInto(a.dtype, a.op, dst, g->staging(p) + h + mine.offset * es, mine.count);
      }
    }
    g->barrier(ctx.tag, ctx.deadline);
    if (!isRoot) continue;
    for (int q = 0; q < n; ++q) {
      const patterns::Range sl = patterns::evenSplit(c, n, q);
      std::memcpy(out + (off + sl.offset) * es, g->staging(q) + h + sl.offset * es, sl.count * es);
    }
  }
}

}  // namespace braid::algo
