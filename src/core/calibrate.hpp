// BRAID_TUNE=1: the cost model's parameters measured at communicator creation (docs/plan.md).
#pragma once

#include <braid/store.hpp>
#include <chrono>
#include <cstdint>

#include "topology/topology.hpp"
#include "transport/transport.hpp"
#include "tuning/cost_model.hpp"

namespace braid::core {

/// Collective over the communicator. First every rank at once runs dependent ring steps of 8
/// bytes: over the ring of all ranks when the layout spans hosts (a network step), then over
/// the ring of its host's ranks (a shared-memory step), then, when the layout spans hosts, a
/// network step followed by a host step (the shared-memory step then costs at least what it
/// adds: a host peer that waited on the network may have to be woken). Then rank 0 ping-pongs
/// 8-byte, 256 KiB and 1 MiB messages with the first other rank of its host (shared memory) and the
/// first rank of another host (network), a few round trips each, and times the active reduction
/// kernel on 1 MiB. alpha is rank 0's median ring step (at least half the best small round trip):
/// what a step costs while every rank is busy, as in a collective; beta the slope of the best half
/// round trip between 256 KiB and 1 MiB (so a shaper's burst allowance cancels out), gamma the
/// best reduction time per byte. Classes without a peer keep `base`'s values. Rank 0 publishes
/// the parameters' text under "tune/params" of `commStore`; every rank (rank 0 included)
/// parses that text, so all hold bitwise the same parameters. Messages carry `tag`, which no
/// collective uses. Bounded by `timeout` (Error(Timeout) naming the peer or the store key).
tuning::CostParams calibrate(transport::Transport& tr, Store& commStore,
                             const topology::Topology& topo, int rank, int size,
                             const tuning::CostParams& base, std::uint64_t tag,
                             std::chrono::milliseconds timeout);

}  // namespace braid::core
