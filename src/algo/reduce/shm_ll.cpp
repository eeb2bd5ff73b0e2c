// Low-latency shared-memory reduce for tiny messages (transport::SharedMemoryGroup line
// exchange; all ranks on one host). Bigger messages, or no shared group, run shm_direct.
//
// Steps (bytes <= SharedMemoryGroup::kLineBytes, 240):
//   1. every rank posts its input in its own line (data, tag, exchange number; one cache line up to 48 B);
//   2. the root polls every peer's line, reduces the N inputs in rank order into a local
//      accumulator and copies it to its output; the other ranks return at once.
// Memory traffic: one line written per rank, N-1 lines read by the root. A non-root's next
// line exchange waits until the root has entered this one (so its line is not overwritten
// before the root read it; see shm_group.hpp).
#include <algorithm>

#include "algo/exchange.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void shmDirectReduce(Context&, const CollArgs&);

void shmLowLatencyReduce(Context& ctx, const CollArgs& a) {
  const std::size_t bytes = a.count * dataTypeSize(a.dtype);
  transport::SharedMemoryGroup* g = ctx.tr.sharedGroup();
  if (ctx.size == 1 || g == nullptr || bytes == 0 ||
      bytes > transport::SharedMemoryGroup::kLineBytes) {
    shmDirectReduce(ctx, a);
    return;
  }
  const int me = ctx.rank;
  const std::uint8_t* in = bytesOf(a.send);
  g->linePost(ctx.tag, in, bytes, ctx.deadline);
  if (me != a.root) return;
  auto input = [&](int p) { return p == me ? in : g->lineWait(p, ctx.deadline); };
  alignas(64) std::uint8_t acc[transport::SharedMemoryGroup::kLineBytes];
  const std::uint8_t* x0 = input(0);
  kernels::reduce3(a.dtype, a.op, acc, x0, input(1), a.count);
  for (int p = 2; p < ctx.size; ++p) kernels::reduceInto(a.dtype, a.op, acc, input(p), a.count);
  std::memcpy(a.recv, acc, bytes);
}

}  // namespace braid::algo
