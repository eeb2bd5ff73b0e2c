// Low-latency shared-memory barrier (transport::SharedMemoryGroup line exchange; all ranks on
// one host; without a group the dissemination barrier runs): every rank posts an empty
// line carrying the exchange number, then polls every peer's line until it carries it. One line
// written and N-1 read per rank; no system call unless a waiter sleeps.
#include "algo/exchange.hpp"

namespace braid::algo {

void shmDirectBarrier(Context&, const CollArgs&);

void shmLowLatencyBarrier(Context& ctx, const CollArgs& a) {
  transport::SharedMemoryGroup* g = ctx.tr.sharedGroup();
  if (ctx.size == 1 || g == nullptr) {
    shmDirectBarrier(ctx, a);
    return;
  }
  g->linePost(ctx.tag, nullptr, 0, ctx.deadline);
  for (int p = 0; p < ctx.size; ++p)
    if (p != ctx.rank) g->lineWait(p, ctx.deadline);
}

}  // namespace braid::algo
