// Direct shared-memory barrier (transport::SharedMemoryGroup; all ranks on one host, the
// row's constraint): one group barrier. Each rank writes its own counter
// line and reads the N-1 others'; no data moves.
#include "algo/exchange.hpp"

namespace braid::algo {

void shmDirectBarrier(Context& ctx, const CollArgs&) {
  if (ctx.size == 1) return;
  requireSharedGroup(ctx, Collective::Barrier, "shm_direct").barrier(ctx.tag, ctx.deadline);
}

}  // namespace braid::algo
