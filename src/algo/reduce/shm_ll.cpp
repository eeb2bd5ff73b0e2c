// Low-latency shared-memory reduce for tiny messages (transport::SharedMemoryGroup line
// exchange; all ranks on one host, messages up to a line: the row's constraints).
//
// Steps (bytes <= SharedMemoryGroup::kLineBytes, 1008):
//   1. every rank posts its input in its own line (data, tag, exchange number; one cache line up to
//   48 B);
//   2. the root polls every peer's line, reduces the N inputs in rank order into a local
//      accumulator and copies it to its output; the other ranks return at once.
// Memory traffic: one line written per rank, N-1 lines read by the root. A non-root's next
// line exchange waits until the root has entered this one (so its line is not overwritten
// before the root read it; see shm_group.hpp).
#include "algo/line_exchange.hpp"

namespace braid::algo {

void shmLowLatencyReduce(Context& ctx, const CollArgs& a) {
  const std::size_t bytes = a.count * dataTypeSize(a.dtype);
  if (ctx.size == 1 || bytes == 0) {
    if (ctx.rank == a.root) copyBytes(a.recv, a.send, bytes);
    return;
  }
  transport::SharedMemoryGroup* g = &lineGroup(ctx, Collective::Reduce, bytes);
  const std::uint8_t* in = bytesOf(a.send);
  g->linePost(ctx.tag, in, bytes, ctx.deadline);
  if (ctx.rank == a.root) reduceLines(ctx, *g, a.dtype, a.op, in, 0, a.count, a.recv);
}

}  // namespace braid::algo
