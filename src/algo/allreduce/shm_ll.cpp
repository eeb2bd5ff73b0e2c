// Low-latency shared-memory allreduce for tiny messages (transport::SharedMemoryGroup line
// exchange; all ranks on one host, messages up to a line: the row's constraints).
//
// Steps (bytes <= SharedMemoryGroup::kLineBytes, 1008):
//   1. linePost: this rank's input, the operation tag and the exchange number go into its own
//      line of the segment (one cache line up to 48 B, sixteen at most; the number stored last);
//   2. lineWait on every peer: poll its line until it carries this exchange's number;
//   3. reduce the N inputs in rank order into a local accumulator, copy it to the output.
// No barrier, no staging, no system call unless a waiter sleeps. Memory traffic per rank: one
// line written, N-1 lines read. Every rank reduces in the same order: bitwise equal results.
#include "algo/line_exchange.hpp"

namespace braid::algo {

void shmLowLatencyAllreduce(Context& ctx, const CollArgs& a) {
  const std::size_t bytes = a.count * dataTypeSize(a.dtype);
  if (ctx.size == 1 || bytes == 0) {
    copyBytes(a.recv, a.send, bytes);
    return;
  }
  transport::SharedMemoryGroup* g = &lineGroup(ctx, Collective::Allreduce, bytes);
  const std::uint8_t* in = bytesOf(a.send);
  g->linePost(ctx.tag, in, bytes, ctx.deadline);
  reduceLines(ctx, *g, a.dtype, a.op, in, 0, a.count, a.recv);
}

}  // namespace braid::algo
