// The alpha-beta-gamma cost model that picks an algorithm where the fixed policy cannot know
// the answer: several hosts, where cross-host links are 10-100x slower than memory and the
// algorithm decides the step time. docs/plan.md has the formulas, defaults and how to check
// them against braid-perf; braid-plan prints the same predictions from the same code. The
// parameters' parsing and text forms live in cost_params.cpp, the model in cost_model.cpp.
//
// Per link class (shared memory inside a host, the network between hosts) a message of m bytes
// costs alpha + m x beta; reducing m bytes costs m x gamma. An algorithm is a sequence of steps;
// a step costs the slowest of its transfers: the network's alpha when any rank's peer of that
// step is on another host, and beta times the bytes the busiest host pushes through its network
// link in that step (every rank of a host sending across at once shares the host's link), or
// shared memory's when the step stays inside every host. Chunk-pipelined trees pay per chunk.
// The crossing counts come from the algorithms' own rank arithmetic (src/algo/patterns) applied
// to the topology, so rank placement (blocked, round-robin) shows in the predictions.
#pragma once

#include <array>
#include <atomic>
#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/topology.hpp"
#include "tuning/rules.hpp"

namespace braid::tuning {

/// One link class: seconds per message and seconds per byte.
struct LinkCost {
  double alpha;  // s
  double beta;   // s/byte
  friend bool operator==(const LinkCost&, const LinkCost&) = default;
};

/// The model's parameters. Defaults: shared memory 2 us, 8 GB/s; network 25 us, 1.25 GB/s
/// (10 Gbit/s Ethernet); reduction 8 GB/s of input. BRAID_TUNE=1 measures them at creation,
/// BRAID_TUNE_FILE loads them.
struct CostParams {
  LinkCost shm{2e-6, 1.0 / 8e9};
  LinkCost net{25e-6, 1.0 / 1.25e9};
  double gamma = 1.0 / 8e9;  // s/byte reduced (one input of the reduction)
  /// Where they came from: "defaults", "calibrated", "file PATH", "command line".
  std::string origin = "defaults";

  /// The tuning-file text of these parameters, six significant digits (parseCostParams reads
  /// it back).
  std::string format() const;
  /// "shm 2.0 us 8.00 GB/s, net 25.0 us 1.25 GB/s, reduce 8.00 GB/s (defaults)".
  std::string summary() const;
  friend bool operator==(const CostParams&, const CostParams&) = default;
};

/// Parses a tuning file's text: '#' comments, blank lines, and `key = value` lines with keys
///   shm.latency_us  shm.bandwidth_GBps  net.latency_us  net.bandwidth_GBps
///   reduce.bandwidth_GBps  algo
/// (bandwidths in 10^9 bytes/s; `algo` lines hold BRAID_ALGO-grammar rules, appended to
/// `rules` when it is given). Keys not given keep their defaults. Throws Error(InvalidArgument)
/// naming `source`, the line number and the line for anything else.
CostParams parseCostParams(std::string_view text, std::string_view source,
                           std::vector<Rule>* rules = nullptr);
/// Reads and parses FILE (Error(InvalidArgument) naming `variable`=FILE when unreadable).
CostParams loadCostParams(const std::string& file, std::string_view variable,
                          std::vector<Rule>* rules = nullptr);

/// Bandwidth "1.25" (GB/s), "10Gbit", "100Mbit", "1.25GB" -> bytes/s; latency "25" (us),
/// "25us", "1ms", "0.5ms" -> seconds. nullopt when malformed or not positive (latency >= 0).
std::optional<double> parseBandwidth(std::string_view s);
std::optional<double> parseLatency(std::string_view s);

/// One candidate's prediction.
struct Prediction {
  std::string algorithm;
  double seconds = 0;
  std::string steps;  // "2x3 steps net + 2x1 steps shm": what the time is made of
};

/// The model bound to one communicator's topology and chunk size. Pure apart from the choice
/// cache; thread-safe.
class CostModel {
 public:
  /// `chunkBytes`: the pipelining unit the algorithms use (min of Options::chunkBytes and half
  /// the scratch buffer). A topology of another size than `worldSize` (or none) counts as one
  /// host of `worldSize` ranks. `pieceBytes`: the hierarchical allreduce's pipelining unit
  /// (Options::hierPieceBytes); 0 lets the model pick it per size (hierPieceBytes()).
  /// `scratchBytes`: the communicator's scratch (Options::bufferBytes), which caps a piece as
  /// the algorithm does.
  CostModel(CostParams params, const topology::Topology& topo, int worldSize,
            std::size_t chunkBytes, std::size_t pieceBytes = 0,
            std::size_t scratchBytes = std::size_t{4} << 20);
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  const CostParams& params() const noexcept { return params_; }
  int worldSize() const noexcept { return n_; }
  int nodes() const noexcept { return nodes_; }
  int ranksPerNode() const noexcept { return perNode_; }
  std::size_t chunkBytes() const noexcept { return chunk_; }

  /// Whether selection follows the model: several hosts, or parameters that were measured or
  /// loaded (BRAID_TUNE, BRAID_TUNE_FILE). One host with default parameters keeps the fixed
  /// policy (its shared-memory algorithms are not modelled).
  bool decides() const noexcept;

  /// Predicted seconds of `algorithm` for `coll` with `bytes` (the nccl-tests size); nullopt
  /// when the model has no formula for it. Does not consult the registry.
  std::optional<Prediction> predict(Collective coll, std::string_view algorithm,
                                    std::size_t bytes) const;
  /// Every registered algorithm of `coll` the model has a formula for, in registry order.
  /// Empty for collectives with nothing to choose (gather, scatter, barrier, the v-variants).
  std::vector<Prediction> candidates(Collective coll, std::size_t bytes) const;
  /// The fastest of candidates(coll, classBytes(sizeClass(bytes))) (the first on a tie);
  /// nullopt when there are none. Cached per (collective, size class).
  std::optional<std::string> choose(Collective coll, std::size_t bytes) const;

  /// Size classes: class k holds (2^(k-1), 2^k] bytes (0 and 1 byte: class 0). The model
  /// decides once per class, at its upper end.
  static int sizeClass(std::size_t bytes) noexcept;
  static std::size_t classBytes(int sizeClass) noexcept;

  /// The piece the hierarchical allreduce runs with for an allreduce of `bytes`: the fixed
  /// piece when one was given, else the candidate with the lowest predicted time at the upper
  /// end of bytes' size class (powers of two from 64 KiB up to the cap, and the cap; the
  /// smallest on a tie). Never above the cap the scratch sets (maxPieceBytes()).
  std::size_t hierPieceBytes(std::size_t bytes) const;
  /// Largest piece the hierarchical allreduce can use with this scratch and topology: what the
  /// network delivers at once (a 1/M segment of a slice; between two hosts the whole slice)
  /// fits half the scratch.
  std::size_t maxPieceBytes() const noexcept { return pieceCap_; }

  /// True the first time it is called for (coll, class of bytes): what BRAID_DEBUG=INFO logs.
  bool firstUse(Collective coll, std::size_t bytes) const noexcept;

 private:
  double step(int crossing, double bytes, double reduceBytes) const;
  LinkCost link(int crossing) const { return crossing > 0 ? params_.net : params_.shm; }
  std::optional<double> seconds(Collective coll, std::string_view algo, double bytes,
                                std::string& steps) const;
  std::optional<double> allreduce(std::string_view algo, double s, std::string& why) const;
  std::optional<double> allgather(std::string_view algo, double s, std::string& why) const;
  std::optional<double> reduceScatter(std::string_view algo, double s, std::string& why) const;
  std::optional<double> rootedTree(std::string_view algo, double s, bool reduce,
                                   std::string& why) const;
  std::optional<double> alltoall(std::string_view algo, double s, std::string& why) const;
  double ringSteps(int steps, int crossing, double bytes, double reduceBytes,
                   std::string& why) const;
  double hierarchicalAllreduce(double s, double piece, std::string& why) const;
  double pieceFor(double s) const;
  double binomial(int ranks, bool network, double s, bool reduce) const;
  bool hierarchical() const noexcept { return nodes_ > 1 && uniform_ && perNode_ > 1; }

  CostParams params_;
  int n_;
  int nodes_ = 1;
  int perNode_ = 1;
  bool uniform_ = true;
  std::size_t chunk_;
  std::size_t piece_;  // 0: chosen per size
  std::size_t pieceCap_ = 1;
  // Crossing counts of each algorithm's steps on this topology.
  int ringCross_ = 0;
  int foldCross_ = 0;
  std::vector<int> xorCross_;          // vrank ^ 2^k over the power-of-two part, k = 0..
  std::vector<int> bruckGatherCross_;  // r -> r - 2^k
  std::vector<int> bruckA2aCross_;     // r -> r + 2^k
  std::vector<int> pairwiseCross_;     // r -> r + s, s = 1..N-1
  int treeCross_ = 0;                  // double binary tree: edges leaving the busiest host
  int treeEgress_ = 0;  // double binary tree: crossing edges a host sends on, up and down, at most
  std::vector<bool> binomialRootChildNet_;  // binomial tree from rank 0: child on another host
  int binomialDepth_ = 0;

  static constexpr int kClasses = 64;
  static constexpr int kCollectives = 14;
  mutable std::array<std::atomic<std::int16_t>, kCollectives * kClasses> choice_{};
  mutable std::array<std::atomic<std::uint64_t>, kCollectives> logged_{};
};

/// "12.3 us", "4.56 ms", "1.23 s".
std::string formatSeconds(double s);

/// What BRAID_DEBUG=INFO prints the first time (coll, size class) is selected: one line per
/// candidate with its predicted time, then the choice and why (rule, shared-memory or
/// deterministic policy, cost model, fixed policy).
std::vector<std::string> explainSelection(const std::vector<Rule>& rules, const SelectionInputs& in,
                                          const std::string& chosen);

}  // namespace braid::tuning
