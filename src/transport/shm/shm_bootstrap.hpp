// Setup of the shared-memory transport: what a rank offers before its host's ranks are known
// (prepare), then attaching to the host's segment through the segment itself (no store), and
// probing which peers' memory can be read single-copy.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::transport::shm {

/// What a rank offers in case it is its host's lowest rank, which creates the segment.
struct Prepared {
  pid_t pid = 0;
  std::uint64_t nonce = 0;  // != 0: the segment's header carries it once initialized
  Fd memfd;                 // the segment-to-be; none: the creator makes a named object
  /// "memfd <pid> <fd> <nonce>" or "named <pid> <nonce>".
  std::string entry() const;
};

/// A memfd where peers will be able to open it through /proc (memfd_create works, /proc shows
/// this process's descriptors, and the process is dumpable, so a peer of the same user may open
/// them), else none (the named form); none with ShmOptions::forceNamedSegment.
std::unique_ptr<Prepared> prepare(const ShmOptions& options);

struct Attachment {
  Segment segment;
  Geometry geometry;
  std::size_t local = 0;        // this rank's index in localRanks
  std::vector<int> localRanks;  // global ranks of this host, ascending
  std::string hostName;         // for describing peers
  // CPUs the host's ranks may run on together: the union of their affinity masks (each rank
  // may be bound to a CPU of its own, e.g. by braid-run --bind, so its own mask says little).
  std::size_t hostCpus = 1;
  // Every local rank registered for the global expedited membarrier (and ShmOptions::lightWake
  // is on): wakers skip their fence (notify() in shm_segment.hpp).
  bool lightWake = false;
};

/// Attaches this rank to the segment of `localRanks` (protocol in shm_bootstrap.cpp), offered
/// by localRanks[0] in entries[0] (entries[i]: local rank i's Prepared::entry()). On return
/// every local rank has mapped the segment, written its RankSlot, and probed its peers, and no
/// name of the segment exists any more. `hostCpus` becomes Attachment::hostCpus.
/// Segments this process created (braid::transport::shmSegmentsMade()).
inline std::atomic<std::size_t> segmentsMade{0};

Attachment attachSegment(Prepared& mine, std::span<const std::string> entries, int rank,
                         std::span<const int> localRanks, std::size_t hostCpus,
                         const ShmOptions& options);

}  // namespace braid::transport::shm
