// Straggler attribution: which rank arrived last at each collective, and by how much.
//
// How arrival is measured: every rank stamps each operation's start and end with its own
// precise monotonic clock (the flight recorder keeps both). Clocks of different hosts differ by
// an unknown offset, so the analysis estimates each rank's offset from the data itself: a
// synchronizing collective (allreduce, allgather, reduce-scatter, all-to-all, barrier) cannot
// finish anywhere before the last rank entered, and then finishes on every rank within about
// one message latency, so the finish times of those collectives are the same instant seen
// through each rank's clock; offset(r) = median over them of finish(r) - finish(0). A rank's
// arrival at any collective (rooted ones too) is then start(r) - offset(r) on rank 0's time
// line, the last to arrive is the largest, and its lateness is how much later than the median
// of the other ranks' arrivals it came. Only differences within one window (seconds) are used,
// so clocks that disagree by any amount, or drift slowly, need no synchronization; the error is
// the spread of the finish times (microseconds on one host; one network latency across hosts).
// Ranks on one host share CLOCK_MONOTONIC and get offsets close to zero. A window without any
// synchronizing collective estimates the offsets from all its collectives (a rooted one-way
// collective can finish on the root before the last rank arrived: less exact).
//
// The stamps travel through the store, never with the collectives' data: each rank publishes
// those its flight recorder holds (the last BRAID_FLIGHT_RECORDER operations), and the
// analysis joins them by sequence number. A collective that left some rank's ring before an
// exchange is not analyzed (counted as missed); at a high operation rate the analysis is thus
// a sample. Exchanges: Comm::stragglerReport (every rank, explicitly), the metrics thread
// (rank 0, every BRAID_METRICS_INTERVAL) and destruction with metrics or BRAID_DEBUG=INFO
// (rank 0, waiting at most BRAID_DIAG_GRACE for the others).
#pragma once

#include <braid/types.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace braid::core {

/// One finished collective as one rank saw it.
struct WaitSample {
  std::uint64_t seq = 0;
  std::int64_t startNs = 0, finishNs = 0;  // the rank's own monotonic clock
  std::uint8_t coll = 0;                   // Collective
};

/// The binary form published to the store: a round number, then the samples.
std::vector<std::uint8_t> encodeWaits(std::uint64_t round, const std::vector<WaitSample>& s);
/// nullopt: not a waits record.
std::optional<std::pair<std::uint64_t, std::vector<WaitSample>>> decodeWaits(
    const std::vector<std::uint8_t>& bytes);

/// The verdict on one collective.
struct StragglerVerdict {
  std::uint64_t seq = 0;
  Collective coll = Collective::Barrier;
  int lastRank = -1;
  std::int64_t lateNs = 0;
};

/// What the analysis found so far (cumulative over exchanges).
class StragglerStats {
 public:
  /// `every`: only sequence numbers that are multiples of it are stamped (the sample).
  explicit StragglerStats(int size, std::uint64_t every = 1);
  /// Whether the finish of `c` is the same instant on every rank (see above).
  static bool synchronizing(Collective c);
  /// Joins one window per rank (indexed by rank; an empty optional: that rank's window is
  /// unknown, nothing is analyzed). Collectives above the last analyzed sequence number that
  /// every window holds are analyzed; those some window lost are counted as missed. `verdict`
  /// (may be empty) sees each new verdict.
  void analyze(const std::vector<std::optional<std::vector<WaitSample>>>& windows,
               const std::function<void(const StragglerVerdict&)>& verdict);

  int size() const { return size_; }
  std::uint64_t analyzed() const { return analyzed_; }
  std::uint64_t missed() const { return missed_; }
  std::uint64_t timesLast(int rank) const { return last_[rank]; }
  std::int64_t lateSumNs(int rank) const { return lateSum_[rank]; }
  std::int64_t lateMaxNs(int rank) const { return lateMax_[rank]; }
  /// Time `rank` spent waiting for the last rank (its arrival to the last one's), summed.
  std::int64_t peerWaitNs(int rank) const { return peerWait_[rank]; }
  /// The rank last most often (-1: nothing analyzed) and its mean lateness.
  int topRank() const;
  std::int64_t meanLateNs(int rank) const;
  const std::optional<StragglerVerdict>& latest() const { return latest_; }

  /// The report: "straggler report, communicator 0, 4 ranks: ..." (several lines).
  std::string report(const std::string& commId) const;

 private:
  int size_;
  std::uint64_t every_;
  std::uint64_t lastSeq_ = 0;
  bool any_ = false;
  std::uint64_t analyzed_ = 0, missed_ = 0;
  std::vector<std::uint64_t> last_;
  std::vector<std::int64_t> lateSum_, lateMax_, peerWait_;
  std::optional<StragglerVerdict> latest_;
};

}  // namespace braid::core
