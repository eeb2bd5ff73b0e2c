// Single copy or staging, and the pipelining unit, decided on the machine. Single copy: the
// block size from which a host's direct collectives (SharedMemoryGroup::singleCopyBytes) read
// peers' user buffers with process_vm_readv (CMA) instead of copying through the staging areas
// twice. Messages keep the transport's own rule (ShmOptions::cmaThresholdBytes:
// BRAID_SHM_CMA_THRESHOLD, else 64 KiB on a crowded host, else never), since their rings' two
// copies overlap.
//
// The choice, in order (every rank of the group reaches the same one):
//   1. BRAID_SHM_CMA_DISABLE (ShmOptions::cmaDisable): never;
//   2. some rank cannot read some other's memory (the setup probe failed: Yama's ptrace_scope,
//      a seccomp filter, a container without CAP_SYS_PTRACE across its processes): never, naming
//      the first such pair;
//   3. BRAID_SHM_CMA_THRESHOLD (ShmOptions::cmaThresholdBytes): that size;
//   4. a crowded host (ranks outnumber CPUs): never (staged), unmeasured, since ranks that take
//      turns on a CPU cannot be timed against each other; there process_vm_readv measured
//      1.3-7x slower than the staged copies (docs/benchmarks.md, "Crowded hosts stage");
//   5. the machine profile's file (ShmOptions::tuneCachePath, BRAID_TUNE_CACHE) holds a
//      threshold measured on this machine for this many ranks: that one (the host's first rank
//      reads the file and hands its answer to the others through the staging area, so all agree);
//   6. otherwise measureDirect() below, at transport creation, kept in that file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/tune_cache.hpp"
#include "transport/shm/shm_streaming.hpp"
#include "transport/transport.hpp"

namespace braid::transport::shm {

struct SingleCopyChoice {
  std::size_t bytes = SIZE_MAX;  // blocks of at least this size go single copy; SIZE_MAX: none
  std::string why;               // in words, for braid-info and the debug log
};

/// The direct collectives' pipelining unit (SharedMemoryGroup::chunkBytes). The choice, in
/// order: ShmOptions::chunkFrom set (BRAID_SHM_CHUNK_SIZE, or BRAID_CHUNK_SIZE other than its
/// default): that size; a crowded host: ShmOptions::chunkBytes (ranks taking turns on a CPU
/// cannot be timed); the machine profile's entry for this many ranks; else chunkFromStaged() on
/// the staged timings of the same probe that measures single copy.
struct ChunkChoice {
  std::size_t bytes = 0;
  std::string why;
};

/// The block sizes the probe compares, ascending (those that fit a staging half).
inline constexpr std::size_t kSingleCopyProbeSizes[] = {4096, 16384, 65536, 262144, 1048576};
/// The smallest probe size a chunk may be: below it a chunk is all barriers (two per chunk).
inline constexpr std::size_t kMinMeasuredChunk = 65536;

/// The chunk from the probe's staged timings (`stagedNs[i]`: the slowest rank's fastest staged
/// round at kSingleCopyProbeSizes[i], i < `sizes`): among the sizes from kMinMeasuredChunk on,
/// the smallest whose time per byte is within 10 % of the best one's: the largest chunks move
/// a byte fastest where a peer's fresh lines stream better in long runs, and the smallest that
/// is as fast keeps the pipeline short. bytes 0 when no size qualifies (a staging half below
/// kMinMeasuredChunk). A pure function of the figures, so tests feed it made-up ones.
ChunkChoice chunkFromStaged(const std::uint64_t* stagedNs, std::size_t sizes);

/// What the probes decide: the single-copy threshold (when asked) and the chunk (measureDirect),
/// and the streaming threshold (measureStreaming, shm_streaming.hpp).
struct DirectChoice {
  SingleCopyChoice single;
  ChunkChoice chunk;
  StreamingChoice streaming;
  std::uint64_t offCpuPermille = 0;  // measured here: the worst rank's time off its CPU (per mille)
};

/// Collective over the group (every rank calls it at the same point, with the same tag): times
/// the two ways a direct collective moves a block out of a peer, every rank at once reading the
/// next rank's block, at each size of kSingleCopyProbeSizes that fits a staging half:
///   staged:      copy the block into the own staging half, barrier, copy the next rank's
///                staged block out (2 copies, 1 barrier: a staged chunk);
///   single copy: publish the buffer's address, barrier, process_vm_readv the next rank's
///                block, barrier (1 copy, 2 barriers); only with `singleCopy` (which requires
///                g.canReadPeers()).
/// One warm-up round, then 5 rounds alternating the two; each rank keeps its fastest of
/// each and publishes them in its staging half; every rank then takes, per size, the slowest
/// rank's figures, so all reach the same answers. Single copy: the step (single copy from size
/// k on) that agrees with the most measured sizes, counting +1 for each size >= k where single
/// copy was faster and -1 where it was slower (never when no step leads by two sizes,
/// common/step_rule.hpp; the larger size on ties), so that a size whose rounds all lost their
/// CPU to another process cannot decide alone. Chunk: chunkFromStaged. A few milliseconds at 2
/// ranks. Errors as the group's barrier.
DirectChoice measureDirect(SharedMemoryGroup& g, std::uint64_t tag, Deadline deadline,
                           bool singleCopy);

/// The file's entry names for a group of `ranks` ranks ("shm_single_copy.2ranks",
/// "shm_chunk.2ranks").
std::string singleCopyEntry(std::size_t ranks);
std::string chunkEntry(std::size_t ranks);

/// Steps 5 and 6 of the single-copy choice, the chunk's profile step and the streaming
/// threshold's: collective over the group like measureDirect. Group rank 0 reads `path` for
/// `key`; when it holds an entry for this group size for each of the staged probe's choices asked
/// for (`single`, `chunk`), every rank takes them, else every rank runs measureDirect (single
/// copy only if asked); the same, on its own, for `streaming` (measureStreaming with
/// `cacheBytes`). Rank 0 writes what was measured to `path` (when not ""), unless a rank was off
/// its CPU for more than `maxOffCpuPermille` of a probe (the machine was busy: its figures are
/// used now and measured again next time). The reasons name the file and the date of the
/// measurement, or the measurement and where it was kept (or why not). What was not asked for
/// is left empty.
DirectChoice cachedOrMeasuredDirect(SharedMemoryGroup& g, std::uint64_t tag, Deadline deadline,
                                    const std::string& path, const machine::TuneKey& key,
                                    bool single, bool chunk, bool streaming, std::size_t cacheBytes,
                                    std::uint64_t maxOffCpuPermille);

}  // namespace braid::transport::shm
