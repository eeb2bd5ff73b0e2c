// Low-latency shared-memory reduce_scatter for tiny inputs (transport::SharedMemoryGroup line
// exchange; all ranks on one host, inputs up to a line: the row's constraints).
//
// Steps (whole input, N blocks, <= SharedMemoryGroup::kLineBytes, 1008 bytes):
//   1. linePost: this rank's whole input, the operation tag and the exchange number go into its
//      own line of the segment (one cache line up to 48 B);
//   2. lineWait on every peer: poll its line until it carries this exchange's number;
//   3. reduce block `rank` of the N inputs in rank order into a local accumulator, copy it out.
// No barrier, no staging, no system call unless a waiter sleeps. Memory traffic per rank: one
// line written, N-1 lines read. Each block is reduced by its owner alone, in rank order (the
// order shm_ll's allreduce uses, so both give the same bits).
#include "algo/line_exchange.hpp"

namespace braid::algo {

void shmLowLatencyReduceScatter(Context& ctx, const CollArgs& a) {
  const std::size_t block = a.count * dataTypeSize(a.dtype);
  const std::size_t total = block * static_cast<std::size_t>(ctx.size);
  if (ctx.size == 1 || block == 0) {
    copyBytes(a.recv, a.send, block);  // a world of one: the whole input is this rank's block
    return;
  }
  transport::SharedMemoryGroup* g = &lineGroup(ctx, Collective::ReduceScatter, total);
  const std::uint8_t* in = bytesOf(a.send);
  g->linePost(ctx.tag, in, total, ctx.deadline);
  reduceLines(ctx, *g, a.dtype, a.op, in, static_cast<std::size_t>(ctx.rank) * block, a.count,
              a.recv);
}

}  // namespace braid::algo
