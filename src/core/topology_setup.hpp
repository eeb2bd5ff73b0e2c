// The communicator's topology at creation: loaded from BRAID_TOPO_FILE, derived from the parent
// communicator's (split / subgroup), or gathered through the store from every rank's PeerInfo.
#pragma once

#include <braid/options.hpp>
#include <braid/store.hpp>
#include <span>
#include <string>

#include "topology/topology.hpp"

namespace braid::core {

/// Collective over the communicator's ranks (unless `parent` is given). Each rank contributes
/// its PeerInfo as JSON, gathered by node (gatherByNode under "topo/", nodes by `nodeOf`, the
/// rank's host from the transport's gather; empty: one node); a rank that never
/// publishes is named in an Error(Timeout) after opts.connectTimeout. With opts.topoFile set,
/// the file replaces the gathered data (its size must equal `size`, else Error(InvalidArgument)
/// naming the file). With `parent`, the result is parent->subset(members) and the store is not
/// used.
topology::Topology setupTopology(Store& commStore, int rank, int size, const Options& opts,
                                 const topology::Topology* parent, std::span<const int> members,
                                 std::span<const int> nodeOf = {});

/// What BRAID_DEBUG=INFO logs at creation: the layout, this rank's place, and the nodes.
std::string describeTopology(const topology::Topology& t, int rank);

}  // namespace braid::core
