// Low-latency shared-memory broadcast for tiny messages (transport::SharedMemoryGroup line
// exchange; all ranks on one host, messages up to a line: the row's constraints).
//
// Steps (bytes <= SharedMemoryGroup::kLineBytes, 1008):
//   1. the root posts the buffer in its own line (data, tag, exchange number; one cache line up to
//   48 B); every
//      other rank posts an empty line (its exchange number says it entered);
//   2. every other rank polls the root's line and copies the payload out.
// Memory traffic: one line written by the root, read by N-1 ranks. The root's next exchange
// waits until every rank entered this one (so none still reads the root's line of the one
// before; see shm_group.hpp).
#include "algo/line_exchange.hpp"

namespace braid::algo {

void shmLowLatencyBroadcast(Context& ctx, const CollArgs& a) {
  const std::size_t bytes = a.count * dataTypeSize(a.dtype);
  if (ctx.size == 1 || bytes == 0) {
    if (ctx.rank == a.root && a.send != nullptr) copyBytes(a.recv, a.send, bytes);
    return;
  }
  transport::SharedMemoryGroup* g = &lineGroup(ctx, Collective::Broadcast, bytes);
  if (ctx.rank == a.root) {
    // The communicator passes send == recv == buf; a distinct root send buffer is copied first.
    if (a.send != nullptr) copyBytes(a.recv, a.send, bytes);
    g->linePost(ctx.tag, a.recv, bytes, ctx.deadline);
    return;
  }
  g->linePost(ctx.tag, nullptr, 0, ctx.deadline);
  std::memcpy(a.recv, g->lineWait(a.root, ctx.deadline), bytes);
}

}  // namespace braid::algo
