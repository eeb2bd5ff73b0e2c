// Algorithm selection as data. One rule grammar for BRAID_ALGO, tuning files and tests:
//   rules   := rule (';' rule)*
//   rule    := [collective ':'] [range ':'] algorithm
//   range   := size '-' size        (bytes, K/M/G suffixes; inclusive lower, exclusive upper)
// e.g. "ring", "allreduce:ring", "allreduce:0-64K:recursive_doubling;allreduce:ring".
// The first rule that matches (collective, bytes) and names an algorithm registered for that
// collective wins; when none does, the default policy chooses.
#pragma once

#include <braid/types.hpp>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace braid::tuning {

class CostModel;  // tuning/cost_model.hpp

struct Rule {
  std::optional<Collective> coll;  // nullopt: any collective that has the algorithm
  std::size_t minBytes = 0;
  std::size_t maxBytes = static_cast<std::size_t>(-1);
  std::string algorithm;
};

/// Parses a rule string; throws Error(InvalidArgument) naming `source` (e.g. "BRAID_ALGO") and
/// the offending rule, also for an algorithm no collective has.
std::vector<Rule> parseRules(std::string_view text, std::string_view source);

/// Parses "64", "64K", "4M", "1G" (binary multiples). nullopt when malformed.
std::optional<std::size_t> parseSize(std::string_view s);

struct SelectionInputs {
  Collective coll;
  std::size_t bytes;  // the nccl-tests size of the operation
  int worldSize;
  std::size_t smallMessageBytes;
  /// Every rank is on this host and the transport offers a SharedMemoryGroup: the default
  /// policy then picks "shm_ll" for messages that fit one cache line (48 bytes; per rank for
  /// allgather; every barrier) and "shm_direct" otherwise, where the collective has them.
  bool sharedMemory = false;
  /// Deterministic mode (Options::deterministic): reductions (allreduce, reduce,
  /// reducescatter, reducescatterv) may run only algorithms registered as rankOrdered.
  bool deterministic = false;
  /// The communicator's cost model (tuning/cost_model.hpp), or null. Where it decides (several
  /// hosts, or measured / loaded parameters) and the collective has a choice, it replaces the
  /// fixed policy below the shared-memory and deterministic ones; rules still come first.
  const CostModel* model = nullptr;
};

/// The algorithm to run: the first matching rule, else the default policy: shm_direct where it
/// exists and sharedMemory is set; otherwise the cost model's choice where `model` decides;
/// otherwise, up to smallMessageBytes, recursive_doubling
/// (allreduce), bruck (allgather), halving_doubling (reduce_scatter, N a power of two), and
/// ring above; binomial_tree (broadcast, reduce), linear (gather, scatter), pairwise
/// (alltoall), dissemination (barrier). In deterministic mode the default policy picks
/// rank-ordered algorithms for reductions, and a matching rule naming another one throws
/// Error(InvalidArgument) naming the algorithm and the collective.
std::string selectAlgorithm(const std::vector<Rule>& rules, const SelectionInputs& in);

/// True for the collectives deterministic mode constrains (allreduce, reduce, reducescatter(v)).
bool isReduction(Collective c) noexcept;

/// Deterministic mode, at communicator creation: throws Error(InvalidArgument) naming `source`,
/// the rule and the algorithm if some rule can force a reduction onto an algorithm that does
/// not reduce in rank order.
void checkDeterministicRules(const std::vector<Rule>& rules, std::string_view source);

}  // namespace braid::tuning
