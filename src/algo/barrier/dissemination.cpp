// Dissemination barrier (Hensgen, Finkel & Manber).
//
// ceil(log2 N) rounds: in round k rank r sends an empty message to r + 2^k and waits for one
// from r - 2^k (mod N). After round k every rank has heard, directly or through others, from
// the 2^(k+1) - 1 ranks before it, so after the last round from all of them.
// Steps: ceil(log2 N). Bytes on the wire: none (one 0-byte message per rank per round).
#include "algo/exchange.hpp"
#include "algo/patterns/doubling.hpp"
#include "algo/patterns/tree.hpp"

namespace braid::algo {

void disseminationBarrier(Context& ctx, const CollArgs&) {
  const int rounds = patterns::ceilLog2(ctx.size);
  InFlight<2> reqs(ctx);
  for (int k = 0; k < rounds; ++k) {
    reqs.recv(0, patterns::disseminationRecvPeer(ctx.rank, ctx.size, k), nullptr, 0);
    reqs.send(1, patterns::disseminationSendPeer(ctx.rank, ctx.size, k), nullptr, 0);
    reqs.waitAll();
  }
}

}  // namespace braid::algo
