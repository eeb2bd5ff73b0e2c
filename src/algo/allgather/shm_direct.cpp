// Direct shared-memory allgather and allgatherv (transport::SharedMemoryGroup; all ranks on one
// host: the row's constraint, selection picks it only then).
//
// Allgather, blocks of at least SharedMemoryGroup::singleCopyBytes() (algo/single_copy.hpp):
// single copy. Each rank publishes its send buffer's address; barrier; each rank copies its own
// block and reads every peer's block straight out of the peer's send buffer into its output
// (N-1 process_vm_readv calls); barrier (no send buffer changes before every peer has read it;
// in place, a rank's send buffer is its own block of its output, which nobody writes). 2
// barriers whatever the size; memory traffic per rank: its output written once, nothing staged.
//
// Allgather otherwise. Each rank's block is cut into chunks of C = min(chunkBytes, staging half)
// bytes; per chunk:
//   1. copy the chunk of this rank's block into its staging half;
//   2. barrier;
//   3. copy every peer's staged chunk into its block of the output.
// Steps alternate staging halves. 1 barrier per chunk; memory traffic per rank: 1 write of its
// block into the segment, N-1 blocks read out of it.
//
// Allgatherv. The same rounds over blocks of different lengths (every rank knows all counts):
// round k stages bytes [kC, (k+1)C) of this rank's block (C = min(chunkBytes, staging half)),
// barrier, then copies that part of every peer's block into its place. ceil(largest block / C)
// barriers (none when every block is empty); the same memory traffic as allgather.
#include <algorithm>

#include "algo/exchange.hpp"
#include "algo/single_copy.hpp"

namespace braid::algo {

void shmDirectAllgather(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t block = a.count * es;
  std::uint8_t* out = bytesOf(a.recv);
  const int me = ctx.rank;
  if (ctx.size == 1) {
    copyBytes(out, a.send, block);
    return;
  }
  transport::SharedMemoryGroup* g = &requireSharedGroup(ctx, Collective::Allgather, "shm_direct");
  if (block == 0) return;
  const std::uint8_t* in = bytesOf(a.send);
  const bool stream = streamsOutput(*g, block * static_cast<std::size_t>(ctx.size));
  if (singleCopy(*g, block)) {
    PeerBuffers peers(ctx, *g, in);
    std::uint8_t* own = out + static_cast<std::size_t>(me) * block;
    if (own != in) copyOut(stream, own, in, block);  // not in place
    peers.ready();
    for (int s = 1; s < ctx.size; ++s) {
      const int q = (me + s) % ctx.size;
      peers.read(q, 0, out + static_cast<std::size_t>(q) * block, block);
    }
    peers.done();
    return;
  }
  const std::size_t chunk =
      std::max(es, std::min(g->chunkBytes(), g->stagingBytes() / 2) / es * es);
  for (std::size_t off = 0; off < block; off += chunk) {
    const std::size_t c = std::min(chunk, block - off);
    const std::size_t h = g->beginStep();
    std::memcpy(g->staging(me) + h, in + off, c);
    g->barrier(ctx.tag, ctx.deadline);
    for (int s = 0; s < ctx.size; ++s) {
      const int q = (me + s) % ctx.size;
      std::uint8_t* dst = out + static_cast<std::size_t>(q) * block + off;
      if (q != me)
        copyOut(stream, dst, g->staging(q) + h, c);
      else if (dst != in + off)  // not in place
        copyOut(stream, dst, in + off, c);
    }
  }
}

void shmDirectAllgatherv(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const int me = ctx.rank;
  const int n = ctx.size;
  const auto ume = static_cast<std::size_t>(me);
  transport::SharedMemoryGroup* g =
      n > 1 ? &requireSharedGroup(ctx, Collective::Allgatherv, "shm_direct") : nullptr;
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);
  copyBytes(out + a.displs[ume] * es, in, a.counts[ume] * es);
  if (n == 1) return;
  const std::size_t largest = *std::max_element(a.counts.begin(), a.counts.end());
  const std::size_t chunk =
      std::max<std::size_t>(1, std::min(g->chunkBytes(), g->stagingBytes() / 2) / es);
  for (std::size_t from = 0; from < largest; from += chunk) {
    const std::size_t h = g->beginStep();
    if (a.counts[ume] > from)
      std::memcpy(g->staging(me) + h, in + from * es, std::min(chunk, a.counts[ume] - from) * es);
    g->barrier(ctx.tag, ctx.deadline);
    for (int s = 1; s < n; ++s) {
      const auto q = static_cast<std::size_t>((me + s) % n);
      if (a.counts[q] <= from) continue;
      std::memcpy(out + (a.displs[q] + from) * es, g->staging(static_cast<int>(q)) + h,
                  std::min(chunk, a.counts[q] - from) * es);
    }
  }
}

}  // namespace braid::algo
