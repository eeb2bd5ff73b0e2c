// The registry rows' constraints as one function (cannotRun), their text, and the defensive
// checks algorithm bodies make. Selection (tuning/rules.cpp) filters rows with cannotRun; the
// bodies' checks only fire when an algorithm is called directly against its constraints.
#include <braid/error.hpp>
#include <string>

#include "algo/algorithm.hpp"
#include "algo/group.hpp"

namespace braid::algo {
namespace {

bool reduces(Collective c) {
  return c == Collective::Allreduce || c == Collective::Reduce || c == Collective::ReduceScatter ||
         c == Collective::ReduceScatterv;
}

bool severalNodes(const topology::Topology* topo, int worldSize) {
  return topo != nullptr && topo->size() == worldSize && topo->numNodes() >= 2 &&
         topo->maxLocalSize() >= 2;
}

std::string maxBytesText(const Constraints& c) {
  return "at most " + std::to_string(c.maxBytes) +
         (c.maxBytesPerRank ? " bytes per rank" : " bytes in all") +
         " (one shared-memory line of SharedMemoryGroup::kLineBytes)";
}

}  // namespace

Constraint cannotRun(const AlgoInfo& row, const Setting& s) noexcept {
  const Constraints& c = row.needs;
  if (s.deterministic && reduces(row.coll) && !row.rankOrdered) return Constraint::RankOrdered;
  if (c.sharedMemory && s.worldSize > 1 && !s.sharedMemory) return Constraint::SharedMemory;
  if (c.severalNodes && !severalNodes(s.topo, s.worldSize)) return Constraint::SeveralNodes;
  if (c.uniformNodes && !s.topo->uniform()) return Constraint::UniformNodes;
  if (c.subCommunicators && !s.subCommunicators) return Constraint::SubCommunicators;
  if (c.maxBytes > 0) {
    const std::size_t ranks = c.maxBytesPerRank && s.worldSize > 1 ? s.worldSize : 1;
    if (s.bytes > c.maxBytes * ranks) return Constraint::MaxBytes;  // per rank: ceil(bytes/N)
  }
  return Constraint::None;
}

std::string describe(Constraint c, const AlgoInfo& row) {
  switch (c) {
    case Constraint::None:
      return "no constraint";
    case Constraint::SharedMemory:
      return "needs a shared-memory group of all ranks (every rank on one host, over the shm "
             "transport)";
    case Constraint::SeveralNodes:
      return "needs a topology of this world with at least 2 nodes and at least 2 ranks on a "
             "node";
    case Constraint::UniformNodes:
      return "needs the same number of ranks on every node";
    case Constraint::SubCommunicators:
      return "needs sub-communicators of the node and of the ranks with the same local rank on "
             "every node (a communicator builds them; a direct call gives Context::groups)";
    case Constraint::MaxBytes:
      return "needs " + maxBytesText(row.needs);
    case Constraint::RankOrdered:
      return "does not reduce in rank order (deterministic mode, BRAID_DETERMINISTIC=1)";
  }
  return "unknown constraint";
}

std::string describeConstraints(const AlgoInfo& row) {
  const Constraints& c = row.needs;
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  if (c.sharedMemory) add("shared-memory group of all ranks");
  if (c.severalNodes)
    add(c.uniformNodes ? ">= 2 nodes, same ranks per node, >= 2 on a node"
                       : ">= 2 nodes, >= 2 ranks on a node");
  if (c.subCommunicators) add("node and cross-node sub-communicators");
  if (c.maxBytes > 0)
    add("<= " + std::to_string(c.maxBytes) + (c.maxBytesPerRank ? " B per rank" : " B in all"));
  return out.empty() ? "none" : out;
}

void violated(const Context& ctx, Collective coll, const char* algorithm, Constraint c) {
  const AlgoInfo* row = findAlgorithm(coll, algorithm);
  const std::string why = row != nullptr ? describe(c, *row) : "a constraint failed";
  throw Error(ErrorCode::InvalidArgument,
              std::string(toString(coll)) + " on rank " + std::to_string(ctx.rank) + " of " +
                  std::to_string(ctx.size) + ": algorithm '" + algorithm + "' cannot run: it " +
                  why + " (selection never picks it then; a direct call did)");
}

transport::SharedMemoryGroup& requireSharedGroup(Context& ctx, Collective coll,
                                                 const char* algorithm) {
  transport::SharedMemoryGroup* g =
      ctx.sharedGroup != nullptr ? ctx.sharedGroup : ctx.tr.sharedGroup();
  if (g == nullptr) violated(ctx, coll, algorithm, Constraint::SharedMemory);
  return *g;
}

const topology::Topology& requireNodes(const Context& ctx, Collective coll, const char* algorithm,
                                       bool uniform) {
  if (!severalNodes(ctx.topo, ctx.size)) violated(ctx, coll, algorithm, Constraint::SeveralNodes);
  if (uniform && !ctx.topo->uniform()) violated(ctx, coll, algorithm, Constraint::UniformNodes);
  return *ctx.topo;
}

Groups& requireGroups(const Context& ctx, Collective coll, const char* algorithm) {
  if (ctx.groups == nullptr) violated(ctx, coll, algorithm, Constraint::SubCommunicators);
  return *ctx.groups;
}

}  // namespace braid::algo
