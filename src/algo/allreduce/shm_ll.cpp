// Low-latency shared-memory allreduce for tiny messages (transport::SharedMemoryGroup line
// exchange; all ranks on one host). Bigger messages, or no shared group, run shm_direct (which
// itself falls back to the ring without a group).
//
// Steps (bytes <= SharedMemoryGroup::kLineBytes, 240):
//   1. linePost: this rank's input, the operation tag and the exchange number go into its own
//      line of the segment (one cache line up to 48 B, four at most; the number stored last);
//   2. lineWait on every peer: poll its line until it carries this exchange's number;
//   3. reduce the N inputs in rank order into a local accumulator, copy it to the output.
// No barrier, no staging, no system call unless a waiter sleeps. Memory traffic per rank: one
// line written, N-1 lines read. Every rank reduces in the same order: bitwise equal results.
#include <algorithm>

#include "algo/exchange.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

void shmDirectAllreduce(Context&, const CollArgs&);

void shmLowLatencyAllreduce(Context& ctx, const CollArgs& a) {
  const std::size_t bytes = a.count * dataTypeSize(a.dtype);
  transport::SharedMemoryGroup* g = ctx.tr.sharedGroup();
  if (ctx.size == 1 || g == nullptr || bytes == 0 ||
      bytes > transport::SharedMemoryGroup::kLineBytes) {
    shmDirectAllreduce(ctx, a);
    return;
  }
  const int me = ctx.rank;
  const std::uint8_t* in = bytesOf(a.send);
  g->linePost(ctx.tag, in, bytes, ctx.deadline);
  auto input = [&](int p) { return p == me ? in : g->lineWait(p, ctx.deadline); };
  alignas(64) std::uint8_t acc[transport::SharedMemoryGroup::kLineBytes];
  const std::uint8_t* x0 = input(0);
  kernels::reduce3(a.dtype, a.op, acc, x0, input(1), a.count);
  for (int p = 2; p < ctx.size; ++p) kernels::reduceInto(a.dtype, a.op, acc, input(p), a.count);
  std::memcpy(a.recv, acc, bytes);
}

}  // namespace braid::algo
