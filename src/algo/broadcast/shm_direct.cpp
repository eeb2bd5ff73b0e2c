// Direct shared-memory broadcast (transport::SharedMemoryGroup; all ranks on one host, the
// row's constraint).
//
// From SharedMemoryGroup::singleCopyBytes() (algo/single_copy.hpp): single copy. The root
// publishes its buffer's address; barrier; every other rank reads the buffer straight out of
// the root's (one process_vm_readv); barrier (the root's buffer stays untouched until every rank
// has read it). 2 barriers whatever the size; memory traffic: every other rank writes the
// buffer once, nothing staged.
//
// Otherwise the buffer is cut into chunks of C = min(chunkBytes, staging half) bytes; per chunk:
//   1. the root copies the chunk into its staging half;
//   2. barrier;
//   3. every other rank copies it out of the root's staging half.
// Steps alternate staging halves. 1 barrier per chunk; memory traffic: the root writes the
// buffer once into the segment, every other rank reads it once.
#include <algorithm>

#include "algo/exchange.hpp"
#include "algo/single_copy.hpp"

namespace braid::algo {

void shmDirectBroadcast(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t bytes = a.count * es;
  const bool isRoot = ctx.rank == a.root;
  transport::SharedMemoryGroup* g =
      ctx.size > 1 ? &requireSharedGroup(ctx, Collective::Broadcast, "shm_direct") : nullptr;
  // The communicator passes send == recv == buf; a distinct root send buffer is copied first.
  if (isRoot && a.send != nullptr) copyBytes(a.recv, a.send, bytes);
  if (ctx.size == 1 || bytes == 0) return;
  std::uint8_t* buf = bytesOf(a.recv);
  if (singleCopy(*g, bytes)) {
    PeerBuffers peers(ctx, *g, isRoot ? buf : nullptr);
    peers.ready();
    if (!isRoot) peers.read(a.root, 0, buf, bytes);
    peers.done();
    return;
  }
  const std::size_t chunk =
      std::max(es, std::min(g->chunkBytes(), g->stagingBytes() / 2) / es * es);
  const bool stream = streamsOutput(*g, bytes);
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const std::size_t c = std::min(chunk, bytes - off);
    const std::size_t h = g->beginStep();
    if (isRoot) std::memcpy(g->staging(a.root) + h, buf + off, c);
    g->barrier(ctx.tag, ctx.deadline);
    if (!isRoot) copyOut(stream, buf + off, g->staging(a.root) + h, c);
  }
}

}  // namespace braid::algo
