// Low-latency shared-memory barrier (transport::SharedMemoryGroup line exchange; all ranks on
// one host: the row's constraint): every rank posts an empty
// line carrying the exchange number, then polls every peer's line until it carries it. One line
// written and N-1 read per rank; no system call unless a waiter sleeps.
#include "algo/exchange.hpp"

namespace braid::algo {

void shmLowLatencyBarrier(Context& ctx, const CollArgs&) {
  if (ctx.size == 1) return;
  transport::SharedMemoryGroup* g = &requireSharedGroup(ctx, Collective::Barrier, "shm_ll");
  g->linePost(ctx.tag, nullptr, 0, ctx.deadline);
  for (int p = 0; p < ctx.size; ++p)
    if (p != ctx.rank) g->lineWait(p, ctx.deadline);
}

}  // namespace braid::algo
