// Streaming stores for the direct collectives' outputs, decided on the machine: the size of the
// outputs of all the group's ranks together from which the direct collectives in which every
// rank writes an output (allgather, allreduce, alltoall, broadcast;
// SharedMemoryGroup::streamingBytes, algo::streamsOutput) write them with non-temporal stores.
// The reduce, whose root alone writes, keeps the process's threshold.
//
// Why the group measures it rather than take the process's threshold (the copy profile,
// kernels::streamingThresholdBytes): that one times one core copying between two private
// buffers, and on a CPU whose caches hold more than its report says, or where the group's ranks
// share a cache that one copy alone does not fill, it misjudges what the ranks' outputs do
// together (docs/benchmarks.md, "Streaming stores measured by the group": on a Zen 5 guest, a
// 2-rank 8 MiB allgather took 2.3x as long with the process's threshold as with cached stores).
// The group times what its collectives do: every rank at once writes an output of its own, piece
// by piece, out of the next rank's staging half, with ordinary and with non-temporal stores.
//
// The choice, in order (every rank of the group reaches the same one):
//   1. ShmOptions::streamingFrom (BRAID_LLC_SIZE: half of it): that size;
//   2. a transport made alone (ShmOptions::measureStreaming false: tests, tools), or a crowded
//      host (ranks taking turns on a CPU cannot be timed together): the process's threshold;
//   3. the machine profile's entry for this many ranks (shm_single_copy.hpp's file handling);
//   4. measureStreaming() below, at transport creation, kept in that file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/transport.hpp"

namespace braid::transport::shm {

struct StreamingChoice {
  std::size_t bytes = 0;  // outputs of all ranks together from this size on stream; SIZE_MAX:
                          // never; 0: not decided here (the process's threshold applies)
  std::string why;
  std::uint64_t offCpuPermille = 0;  // measured: the worst rank's time off its CPU (per mille)
};

/// The first size the probe measures (the outputs of all ranks together); it doubles up to
/// streamingProbeLimit().
inline constexpr std::size_t kStreamingProbeFirst = std::size_t{4} << 20;

/// The largest size the probe measures (the outputs of all ranks together): twice `cacheBytes`
/// (the OS's last-level cache, bounded: machine::lastLevelCache), at least 8 MiB and at most
/// 128 MiB, so that the sizes reach past the cache the ranks share.
std::size_t streamingProbeLimit(std::size_t cacheBytes);

/// The decision from the slowest rank's fastest rounds (`cachedNs[i]`, `streamedNs[i]`) at the
/// sizes `totalBytes[i]` (ascending; the outputs of all ranks together): the step (streaming from
/// size k on) that agrees with the most sizes, +1 for each size >= k where streaming was slower,
/// -1 where it was faster, the lowest score winning; with no step that leads by two sizes
/// (common/step_rule.hpp), twice the largest size (streaming lost where it counts). bytes 0 when a
/// figure is missing (0). A pure function of the figures, so tests feed it made-up ones.
StreamingChoice streamingFromTimings(const std::size_t* totalBytes, const std::uint64_t* cachedNs,
                                     const std::uint64_t* streamedNs, std::size_t sizes);

/// Collective over the group (every rank calls it at the same point, with the same tag): at each
/// size of the probe, every rank at once (a barrier before each timing) copies the next rank's
/// staging half again and again into its own output of size / ranks bytes, with ordinary stores
/// and with kernels::copyStreaming, one warm-up round then 3 rounds alternating which goes first;
/// each rank keeps its fastest of each and publishes them in its staging half; every rank then
/// takes, per size, the slowest rank's figures and decides with streamingFromTimings. Takes tens
/// of milliseconds (the outputs are touched first, outside the timings). Errors as the group's
/// barrier.
StreamingChoice measureStreaming(SharedMemoryGroup& g, std::uint64_t tag, Deadline deadline,
                                 std::size_t cacheBytes);

/// The file's entry name for a group of `ranks` ranks ("shm_streaming.2ranks").
std::string streamingEntry(std::size_t ranks);

}  // namespace braid::transport::shm
