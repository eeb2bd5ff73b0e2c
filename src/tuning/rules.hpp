// Algorithm selection as data. One rule grammar for BRAID_ALGO, tuning files and tests:
//   rules   := rule (';' rule)*
//   rule    := [collective ':'] [range ':'] algorithm
//   range   := size '-' size        (bytes, K/M/G suffixes; inclusive lower, exclusive upper)
// e.g. "ring", "allreduce:ring", "allreduce:0-64K:recursive_doubling;allreduce:ring".
// The first rule that matches (collective, bytes), names an algorithm registered for that
// collective and whose row can run (its constraints, algo::cannotRun) wins; when none does,
// the default table chooses.
#pragma once

#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algo/algorithm.hpp"

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
  /// The nccl-tests size of the operation; the same on every rank (alltoallv, whose sizes
  /// differ by rank, selects with 0 so that every rank picks the same row).
  std::size_t bytes;
  int worldSize;
  std::size_t smallMessageBytes;
  /// Every rank is on this host and the transport offers a SharedMemoryGroup: the
  /// shared-memory rows (shm_ll, shm_direct) can run.
  bool sharedMemory = false;
  /// Deterministic mode (Options::deterministic): reductions (allreduce, reduce,
  /// reducescatter, reducescatterv) may run only algorithms registered as rankOrdered.
  bool deterministic = false;
  /// The communicator's cost model (tuning/cost_model.hpp), or null. Where it decides (several
  /// hosts, or measured / loaded parameters) it picks among its candidates that can run, ahead
  /// of the fixed entries of the default table; rules still come first.
  const CostModel* model = nullptr;
  /// Where the ranks run (the hierarchical rows need several nodes), or null.
  const topology::Topology* topo = nullptr;
  /// Options::algoForce (BRAID_ALGO_FORCE=1, braid-perf --algo): a matching rule whose row
  /// cannot run is an Error(InvalidArgument) instead of being skipped.
  bool forced = false;
};

/// What the selector decided, and why: pointers into the registry and the rules, no
/// allocation.
struct Selection {
  const algo::AlgoInfo* algorithm = nullptr;
  enum class Reason : std::uint8_t { Rule, CostModel, Default } reason = Reason::Default;
  /// The first matching rule that was skipped because its row cannot run, the row and the
  /// constraint it fails (what BRAID_DEBUG=INFO logs); null / None when none was.
  const Rule* skippedRule = nullptr;
  const algo::AlgoInfo* skippedRow = nullptr;
  algo::Constraint skippedBecause = algo::Constraint::None;
};

/// The row to run. Rows whose constraints fail for `in` (algo::cannotRun) are never chosen:
///   1. the first matching rule whose row can run (a matching rule whose row cannot run is
///      skipped, or with `forced` throws Error(InvalidArgument) naming the algorithm, the
///      constraint, the collective and the size; in deterministic mode a rule naming a
///      reduction algorithm that is not rank-ordered throws as well);
///   2. the default table (rules.cpp, kDefaults): per collective, in order, the first entry
///      whose row can run and whose condition holds: shm_ll, shm_direct, then the cost
///      model's choice where `model` decides, then the fixed entries (recursive_doubling /
///      bruck / halving_doubling up to smallMessageBytes, ring, binomial_tree, linear,
///      pairwise, dissemination), last the rank-ordered rows for deterministic mode.
Selection select(const std::vector<Rule>& rules, const SelectionInputs& in);
/// select(rules, in).algorithm->name ("direct" for send / recv, which have no rows).
std::string selectAlgorithm(const std::vector<Rule>& rules, const SelectionInputs& in);
/// The algo::Setting the row constraints of `in` are checked against.
algo::Setting settingOf(const SelectionInputs& in) noexcept;

/// True for the collectives deterministic mode constrains (allreduce, reduce, reducescatter(v)).
bool isReduction(Collective c) noexcept;

/// Deterministic mode, at communicator creation: throws Error(InvalidArgument) naming `source`,
/// the rule and the algorithm if some rule can force a reduction onto an algorithm that does
/// not reduce in rank order.
void checkDeterministicRules(const std::vector<Rule>& rules, std::string_view source);

}  // namespace braid::tuning
