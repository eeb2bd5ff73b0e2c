// What an algorithm receives and the registry of all algorithms. One file per algorithm under
// src/algo/<collective>/, each registered in registry.cpp; sweeps in tests iterate the registry.
#pragma once

#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "topology/topology.hpp"
#include "transport/transport.hpp"

namespace braid::algo {

class Groups;  // algo/group.hpp

/// The arguments of one operation, already validated by the communicator. Avg never reaches an
/// algorithm: the communicator runs Sum and divides afterwards.
struct CollArgs {
  Collective coll = Collective::Barrier;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  // elements (per rank where the collective is "per rank")
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  // allgatherv / reduce_scatterv: per-rank counts and displacements of the gathered buffer;
  // alltoallv: the send side.
  std::span<const std::size_t> counts;
  std::span<const std::size_t> displs;
  // alltoallv: the receive side.
  std::span<const std::size_t> recvCounts;
  std::span<const std::size_t> recvDispls;
};

/// Everything an algorithm may use besides its arguments.
struct Context {
  transport::Transport& tr;
  int rank;
  int size;
  /// Pipelining unit in bytes (> 0). Algorithms cut large transfers into chunks of this size.
  std::size_t chunkBytes;
  /// Scratch memory owned by the communicator, allocated once (Options::bufferBytes). An
  /// algorithm needing k chunk slots uses chunk = min(chunkBytes, scratch.size() / k).
  std::span<std::uint8_t> scratch;
  transport::Deadline deadline;
  /// Every message of this operation carries this tag.
  std::uint64_t tag;
  /// Deterministic mode (Options::deterministic): an algorithm registered with rankOrdered
  /// must then reduce every element as ((x0 op x1) op x2) ... in rank order, each step one
  /// kernel call (acc as the first operand), so every rank-ordered algorithm gives the same bits.
  bool deterministic = false;
  /// Where the ranks run (nodes, local ranks, leaders, link classes), as data; nullptr when the
  /// caller has none (then an algorithm must not need it). Gathered at communicator creation or
  /// loaded from BRAID_TOPO_FILE (docs/topology.md).
  const topology::Topology* topo = nullptr;
  /// Pipelining unit of the hierarchical allreduce in bytes (> 0): Options::hierPieceBytes, or
  /// the cost model's pick for the size (CostModel::hierPieceBytes). The in-node phases of one
  /// piece overlap the network phase of another.
  std::size_t pieceBytes = 512 * 1024;
  /// The sub-communicators of a hierarchy (algo/group.hpp): the node's ranks and the ranks with
  /// this local rank on every node; nullptr when the caller has none (then a hierarchical
  /// algorithm cannot run: its rows need Constraints::subCommunicators).
  Groups* groups = nullptr;
  /// tr.sharedGroup() as the caller already knows it, or nullptr (requireSharedGroup then asks
  /// the transport: a chain of virtual calls through its views on every operation).
  transport::SharedMemoryGroup* sharedGroup = nullptr;
};

using AlgoFn = void (*)(Context&, const CollArgs&);

/// What a row needs in order to run. Selection (tuning/rules.hpp) runs only rows whose
/// constraints hold; an algorithm never runs another one under its name.
struct Constraints {
  /// A transport::SharedMemoryGroup of all ranks (every rank on this host, the shm transport);
  /// a world of one rank needs none.
  bool sharedMemory = false;
  /// A topology of this world with at least 2 nodes and at least 2 ranks on some node.
  bool severalNodes = false;
  /// ... and the same number of ranks on every node.
  bool uniformNodes = false;
  /// Sub-communicators of the node and of the ranks with the same local rank on every node
  /// (Context::groups), which the phases run on.
  bool subCommunicators = false;
  /// At most this many bytes (0: no limit) of the operation's nccl-tests size, or of that size
  /// divided by the world size when maxBytesPerRank is set.
  std::size_t maxBytes = 0;
  bool maxBytesPerRank = false;
};

/// The constraint a row fails (None: it can run).
enum class Constraint : std::uint8_t {
  None,
  SharedMemory,
  SeveralNodes,
  UniformNodes,
  SubCommunicators,
  MaxBytes,
  RankOrdered,  // deterministic mode, a reduction, a row not registered rankOrdered
};

struct AlgoInfo {
  const char* name;  // e.g. "ring", "recursive_doubling", "binomial_tree"
  Collective coll;
  AlgoFn run;
  const char* summary;  // one line for braid-info and logs
  /// Reductions only: with Context::deterministic set, every element is reduced in rank order
  /// (see Context::deterministic). Deterministic mode selects only these.
  bool rankOrdered = false;
  Constraints needs = {};
};

/// What the constraints are checked against. Identical on every rank of a communicator, so
/// every rank selects the same row (alltoallv, whose sizes differ by rank, passes bytes 0).
struct Setting {
  int worldSize = 1;
  std::size_t bytes = 0;  // the operation's nccl-tests size
  bool sharedMemory = false;
  const topology::Topology* topo = nullptr;
  bool deterministic = false;
  /// The caller gives Context::groups to rows that need them: a communicator builds its
  /// sub-communicators on first use, the simulator and test harnesses give views
  /// (algo/subgroup.hpp); false for a caller that has none.
  bool subCommunicators = true;
};

/// The first constraint of `row` that `s` fails, or Constraint::None. No allocation.
Constraint cannotRun(const AlgoInfo& row, const Setting& s) noexcept;
/// "needs a shared-memory group of all ranks (...)": the constraint as text, for logs, errors
/// and braid-info.
std::string describe(Constraint c, const AlgoInfo& row);
/// Every constraint of `row` as text ("none" when it has none), for braid-info and the docs.
std::string describeConstraints(const AlgoInfo& row);

/// The defensive check of an algorithm body entered against its row's constraints (selection
/// prevents it; a direct call may not): throws Error(InvalidArgument) naming the algorithm,
/// the constraint, the operation and the rank.
[[noreturn]] void violated(const Context& ctx, Collective coll, const char* algorithm,
                           Constraint c);
/// The shared group, or violated(SharedMemory).
transport::SharedMemoryGroup& requireSharedGroup(Context& ctx, Collective coll,
                                                 const char* algorithm);
/// ctx.topo when it has several nodes (and the same ranks on each when `uniform`), else
/// violated(SeveralNodes / UniformNodes).
const topology::Topology& requireNodes(const Context& ctx, Collective coll, const char* algorithm,
                                       bool uniform);

/// Every algorithm, grouped by collective.
std::span<const AlgoInfo> registry();
/// The algorithm `name` for `coll`, or nullptr.
const AlgoInfo* findAlgorithm(Collective coll, std::string_view name);

}  // namespace braid::algo
