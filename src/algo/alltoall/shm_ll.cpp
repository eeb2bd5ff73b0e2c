// Low-latency shared-memory alltoall for tiny buffers (transport::SharedMemoryGroup line
// exchange; all ranks on one host, buffers up to a line: the row's constraints).
//
// Steps (whole send buffer, N blocks, <= SharedMemoryGroup::kLineBytes, 1008 bytes):
//   1. linePost: this rank's whole send buffer, the operation tag and the exchange number go
//      into its own line of the segment (one cache line up to 48 B);
//   2. lineWait on every peer in turn: poll its line until it carries this exchange's number,
//      copy block `rank` of it into the output's block `peer`;
//   3. copy the own block.
// No barrier, no staging, no system call unless a waiter sleeps. Memory traffic per rank: one
// line written, N-1 lines read.
#include "algo/line_exchange.hpp"

namespace braid::algo {

void shmLowLatencyAlltoall(Context& ctx, const CollArgs& a) {
  const std::size_t block = a.count * dataTypeSize(a.dtype);
  const std::size_t total = block * static_cast<std::size_t>(ctx.size);
  const int me = ctx.rank;
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);
  const std::size_t mine = static_cast<std::size_t>(me) * block;
  if (ctx.size == 1 || block == 0) {
    if (block > 0) std::memcpy(out + mine, in + mine, block);
    return;
  }
  transport::SharedMemoryGroup* g = &lineGroup(ctx, Collective::Alltoall, total);
  g->linePost(ctx.tag, in, total, ctx.deadline);
  for (int s = 1; s < ctx.size; ++s) {
    const int q = (me + s) % ctx.size;
    std::memcpy(out + static_cast<std::size_t>(q) * block, g->lineWait(q, ctx.deadline) + mine,
                block);
  }
  std::memcpy(out + mine, in + mine, block);
}

}  // namespace braid::algo
