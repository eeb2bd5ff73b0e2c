// Setup of the shared-memory transport: create or open the host's segment through the store,
// register this rank in it, and probe which peers' memory can be read single-copy.
#pragma once

#include <braid/store.hpp>
#include <span>
#include <string>
#include <vector>

#include "transport/shm/shm_segment.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::transport::shm {

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

/// Attaches this rank to the segment of `localRanks` (protocol in shm_bootstrap.cpp). On return
/// every local rank has mapped the segment, written its RankSlot, and probed its peers, and no
/// name of the segment exists any more.
Attachment attachSegment(Store& store, int rank, std::span<const int> localRanks,
                         const ShmOptions& options);

}  // namespace braid::transport::shm
