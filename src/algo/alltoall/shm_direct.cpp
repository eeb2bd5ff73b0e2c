// Direct shared-memory alltoall and alltoallv (transport::SharedMemoryGroup; all ranks on one host,
// the row's constraint: selection picks it only then). No messages and no allocation: the staging
// areas of the host's segment are the only intermediate memory.
//
// Alltoall, blocks of at least SharedMemoryGroup::singleCopyBytes() (chosen at transport
// creation: measured on the machine unless overridden, shm_single_copy.hpp): single copy, 2
// barriers. Each rank publishes its send buffer's address in its staging half; barrier; each
// rank reads its block straight out of every peer's send buffer into its output (N-1
// process_vm_readv calls); barrier (a send buffer stays untouched until every peer has read
// from it). Memory traffic per rank: its receive buffer written once, nothing staged.
//
// Alltoall, otherwise. Every block is cut into chunks of C = min(chunkBytes, staging half / N)
// bytes; per chunk index:
//   1. copy that chunk of each peer's block of the send buffer into slot q (the one for
//      rank q) of this rank's staging half;
//   2. copy this rank's own chunk straight from the send buffer into the output;
//   3. barrier;
//   4. copy slot `rank` of every peer's staging half into its block of the output.
// Steps alternate staging halves. 1 barrier per chunk; memory traffic per rank: its send buffer
// written once into the segment, N-1 blocks read out of it (the pairwise algorithm moves the
// same bytes through the rings, two copies each, plus one message per pair).
//
// Alltoallv. A rank knows only its own send and receive counts, so every rank's staging half starts
// with a header: its N send counts. The rest of the half is N slots of C = min(chunkBytes, (half -
// header) / N) bytes, slot q for rank q. Round k (k = 0, 1, ...):
//   1. copy bytes [kC, (k+1)C) of each of this rank's send blocks into its slots (round 0 also
//      writes the header);
//   2. barrier;
//   3. round 0 only: read every rank's header, check that what rank p sends here is what this
//      rank expects from p (else Error(Mismatch) naming both counts; the transport is aborted
//      so the others fail fast), and take R = ceil(largest count of any pair / C) rounds;
//   4. copy slot `rank` of every peer's staging (the part of its block in this round) into
//      the output.
// Steps alternate staging halves. max(1, R) barriers; memory traffic per rank: its send buffer
// written once into the segment, its receive buffer read once out of it, plus N headers.
//
// chunkBytes here is Context::chunkBytes (BRAID_CHUNK_SIZE), not the measured
// SharedMemoryGroup::chunkBytes() of the algorithms that stage one area per rank: the probe
// times that pattern, not one slot per peer, and larger slots did not pay off here
// (docs/benchmarks.md, "The shared-memory chunk from measurement").
#include <algorithm>

#include "algo/exchange.hpp"
#include "algo/single_copy.hpp"

namespace braid::algo {

void shmDirectAlltoall(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const std::size_t block = a.count * es;
  const int me = ctx.rank;
  const int n = ctx.size;
  const auto un = static_cast<std::size_t>(n);
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);
  transport::SharedMemoryGroup* g =
      n > 1 ? &requireSharedGroup(ctx, Collective::Alltoall, "shm_direct") : nullptr;
  const auto own = static_cast<std::size_t>(me) * block;
  const bool stream = g != nullptr && streamsOutput(*g, block * un);
  const bool single = n > 1 && singleCopy(*g, block);
  if (out != in && block > 0 && (n == 1 || single)) copyOut(stream, out + own, in + own, block);
  if (n == 1 || block == 0) return;
  if (single) {
    // Read this rank's block out of every peer's send buffer; this one stays untouched until
    // every peer has read from it.
    PeerBuffers peers(ctx, *g, in);
    peers.ready();
    for (int s = 1; s < n; ++s) {
      const int p = (me + s) % n;
      peers.read(p, own, out + static_cast<std::size_t>(p) * block, block);
    }
    peers.done();
    return;
  }
  const std::size_t chunk =
      std::max(es, std::min(ctx.chunkBytes, g->stagingBytes() / 2 / un) / es * es);
  for (std::size_t off = 0; off < block; off += chunk) {
    const std::size_t c = std::min(chunk, block - off);
    const std::size_t h = g->beginStep();
    std::uint8_t* mine = g->staging(me) + h;
    for (int s = 1; s < n; ++s) {
      const auto q = static_cast<std::size_t>((me + s) % n);
      std::memcpy(mine + q * c, in + q * block + off, c);
    }
    // The own block's chunk, here rather than all of it up front (2 ranks, far placement,
    // medians of 6: 2 MiB 11.2 -> 11.8 GB/s, 8 MiB 9.1 -> 9.7).
    if (out != in) copyOut(stream, out + own + off, in + own + off, c);
    g->barrier(ctx.tag, ctx.deadline);
    for (int s = 1; s < n; ++s) {
      const int p = (me + s) % n;
      copyOut(stream, out + static_cast<std::size_t>(p) * block + off,
              g->staging(p) + h + static_cast<std::size_t>(me) * c, c);
    }
  }
}

void shmDirectAlltoallv(Context& ctx, const CollArgs& a) {
  const std::size_t es = dataTypeSize(a.dtype);
  const int me = ctx.rank;
  const int n = ctx.size;
  const auto un = static_cast<std::size_t>(n);
  const auto ume = static_cast<std::size_t>(me);
  transport::SharedMemoryGroup* g =
      n > 1 ? &requireSharedGroup(ctx, Collective::Alltoallv, "shm_direct") : nullptr;
  const std::uint8_t* in = bytesOf(a.send);
  std::uint8_t* out = bytesOf(a.recv);
  if (a.counts[ume] != a.recvCounts[ume])
    throw Error(ErrorCode::Mismatch,
                "rank " + std::to_string(me) + " sends " + std::to_string(a.counts[ume]) +
                    " elements to itself but expects " + std::to_string(a.recvCounts[ume]));
  copyBytes(out + a.recvDispls[ume] * es, in + a.displs[ume] * es, a.counts[ume] * es);
  if (n == 1) return;

  const std::size_t header = (un * sizeof(std::uint64_t) + 63) / 64 * 64;
  const std::size_t perRank = (g->stagingBytes() / 2 - header) / un;
  const std::size_t chunk = std::max<std::size_t>(1, std::min(ctx.chunkBytes, perRank) / es);
  const std::size_t slot = chunk * es;
  std::size_t rounds = 1;
  for (std::size_t k = 0; k < rounds; ++k) {
    const std::size_t h = g->beginStep();
    std::uint8_t* mine = g->staging(me) + h;
    if (k == 0)
      for (std::size_t q = 0; q < un; ++q) {
        const std::uint64_t c = a.counts[q];
        std::memcpy(mine + q * sizeof c, &c, sizeof c);
      }
    const std::size_t from = k * chunk;
    for (std::size_t q = 0; q < un; ++q) {
      if (q == ume || a.counts[q] <= from) continue;
      const std::size_t c = std::min(chunk, a.counts[q] - from);
      std::memcpy(mine + header + q * slot, in + (a.displs[q] + from) * es, c * es);
    }
    g->barrier(ctx.tag, ctx.deadline);
    if (k == 0) {
      std::size_t largest = 0;
      for (std::size_t p = 0; p < un; ++p) {
        const std::uint8_t* theirs = g->staging(static_cast<int>(p)) + h;
        for (std::size_t q = 0; q < un; ++q) {
          std::uint64_t c = 0;
          std::memcpy(&c, theirs + q * sizeof c, sizeof c);
          largest = std::max<std::size_t>(largest, c);
          if (q != ume || p == ume || c == a.recvCounts[p]) continue;
          const std::string what = "alltoallv on rank " + std::to_string(me) + ": rank " +
                                   std::to_string(p) + " sends " + std::to_string(c) +
                                   " elements here but recvCounts[" + std::to_string(p) +
                                   "] = " + std::to_string(a.recvCounts[p]);
          ctx.tr.abort(what);
          throw Error(ErrorCode::Mismatch, what);
        }
      }
      rounds = std::max<std::size_t>(1, (largest + chunk - 1) / chunk);
    }
    for (std::size_t p = 0; p < un; ++p) {
      if (p == ume || a.recvCounts[p] <= from) continue;
      const std::size_t c = std::min(chunk, a.recvCounts[p] - from);
      std::memcpy(out + (a.recvDispls[p] + from) * es,
                  g->staging(static_cast<int>(p)) + h + header + ume * slot, c * es);
    }
  }
}

}  // namespace braid::algo
