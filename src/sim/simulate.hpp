// One collective of one registered algorithm on a simulated cluster (sim/engine.hpp): the
// algorithm's own code on every rank, buffers sized as nccl-tests sizes them, and what it sent,
// how many messages, the longest chain of them and the predicted time. braid-plan --simulate
// prints this; tests/algo/sim_test.cpp checks it against docs/algorithms.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algo/algorithm.hpp"
#include "sim/engine.hpp"
#include "topology/topology.hpp"
#include "tuning/cost_model.hpp"

namespace braid::sim {

struct SimOptions {
  tuning::CostParams cost;
  /// Context::chunkBytes and the scratch (Options::chunkBytes, bufferBytes: BRAID_CHUNK_SIZE,
  /// BRAID_BUFFSIZE).
  std::size_t chunkBytes = std::size_t{256} << 10;
  std::size_t scratchBytes = std::size_t{4} << 20;
  /// Context::pieceBytes; 0: the cost model's pick for the size, as the communicator does.
  std::size_t pieceBytes = 0;
  int root = 0;
  /// Own buffers per rank and payloads copied (sim::EngineOptions::copyPayloads); off: every
  /// rank shares one send, one receive and one scratch buffer, nothing is copied.
  bool copyPayloads = false;
  std::size_t stackBytes = std::size_t{256} << 10;
};

struct SimResult {
  int ranks = 0;
  int hosts = 0;
  /// The nccl-tests size that ran: the requested size rounded down to whole fp32 elements
  /// (per-rank collectives: to N equal blocks of whole elements).
  std::size_t bytes = 0;
  std::size_t elements = 0;  // CollArgs::count
  std::size_t pieceBytes = 0;
  std::vector<RankTraffic> perRank;
  std::uint64_t maxBytesPerRank = 0, minBytesPerRank = 0, totalBytes = 0;
  std::uint64_t maxMessagesPerRank = 0, totalMessages = 0;
  std::array<std::uint64_t, topology::kLinkClasses> bytesByClass{};
  std::uint32_t steps = 0;
  double seconds = 0;  // predicted: the largest virtual clock
  std::uint64_t switches = 0;
};

/// The rows whose constraints need a SharedMemoryGroup (shm_direct, shm_ll; registry data,
/// algo::Constraints): the simulated transport has none, so the simulator refuses them.
bool needsSharedMemory(const algo::AlgoInfo& a) noexcept;

/// Runs `algo` once on every rank of `topo` with a buffer of `bytes` (the nccl-tests size:
/// allreduce/reduce/broadcast the buffer, allgather(v)/gather the gathered output,
/// reducescatter(v)/scatter the whole input, alltoall(v) each rank's whole buffer; fp32, Sum;
/// v-variants with equal blocks). Throws Error(InvalidArgument) for an algorithm that needs a
/// shared-memory group, a size that is not 0 but rounds to no element, or a bad root; the
/// algorithm's own errors and Error(Internal) for a deadlock as Engine::run.
SimResult simulate(const algo::AlgoInfo& algo, const topology::Topology& topo, std::size_t bytes,
                   const SimOptions& opts);

/// A topology of `ranks` ranks, `perHost` per host in rank order (the last host may hold
/// fewer): what braid-plan --simulate --ranks N --ranks-per-host P fabricates.
topology::Topology blockedTopology(int ranks, int perHost);

}  // namespace braid::sim
