// Direct shared-memory barrier (transport::SharedMemoryGroup; all ranks on one host, else the
// dissemination barrier runs instead): one group barrier. Each rank writes its own counter
// line and reads the N-1 others'; no data moves.
#include "algo/exchange.hpp"

namespace braid::algo {

void disseminationBarrier(Context&, const CollArgs&);

void shmDirectBarrier(Context& ctx, const CollArgs& a) {
  if (ctx.size == 1) return;
  transport::SharedMemoryGroup* g = ctx.tr.sharedGroup();
  if (g == nullptr) {
    disseminationBarrier(ctx, a);
    return;
  }
  g->barrier(ctx.tag, ctx.deadline);
}

}  // namespace braid::algo
