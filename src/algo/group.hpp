// What a hierarchical algorithm runs its phases on: the communicator's sub-communicators of
// this rank's node and of the ranks with its local rank on every node, each a Group that runs
// whole collectives through its own selection (so an in-node phase gets shm_ll / shm_direct
// where they apply). The algo layer declares the interface; the communicator (src/core/
// comm_groups.cpp) implements it with real sub-communicators that share the parent's
// connections; algo/subgroup.hpp implements it with transport views running fixed algorithms,
// for callers without a communicator (the simulator, direct calls in tests).
#pragma once

#include "algo/algorithm.hpp"

namespace braid::algo {

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// Runs `a` as one collective of the group (ranks, root, counts and displs in the group's
  /// numbering), blocking. Avg and PremulSum never reach it (the caller's communicator turned
  /// them into Sum). Reduce-scatterv may run in place (recv = send + displs[rank]), allgatherv
  /// too (send = recv + displs[rank]).
  virtual void run(const CollArgs& a) = 0;
  /// The group's transport, for a phase that posts its own messages (the hierarchical
  /// allreduce's pipelined network phase) between the group's collectives; messages carry the
  /// caller's operation tag.
  virtual transport::Transport& transport() = 0;
};

class Groups {
 public:
  virtual ~Groups() = default;
  /// The ranks of this rank's node (Context::topo), in the node's order: group rank = local
  /// rank. Built on first use (a collective over the node's ranks).
  virtual Group& node() = 0;
  /// Local rank l of every node, in node order (group rank = node index), l this rank's local
  /// rank; nullptr where some node has l ranks or fewer. Built on first use with node().
  virtual Group* slice() = 0;
};

/// ctx.groups, or violated(SubCommunicators).
Groups& requireGroups(const Context& ctx, Collective coll, const char* algorithm);

}  // namespace braid::algo
