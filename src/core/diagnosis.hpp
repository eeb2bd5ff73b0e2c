// Diagnosis through the store, off the fast path: what a failing rank learns about the others.
//
// Every rank of a communicator owns one store key, "diag/<rank>" in the communicator's
// namespace, holding a RankReport. It is written in two situations only, never per operation:
//   - progress: the communicator's monitor thread (DiagMonitor) sees that an operation has been
//     running longer than BRAID_DIAG_STALL and publishes where the rank is; once it has
//     published, it keeps the record current (at most one write per period) so it never lies
//     about a rank that moved on;
//     While its own operation stays stalled, the monitor also reads the other ranks' records
//     (at most once per 500 ms): a rank stalled at the same sequence number in a different call
//     is a mismatch no message can reveal (e.g. one rank waits in a shared-memory barrier while
//     the other waits for a message), and is reported through MismatchFn at once instead of
//     waiting for the timeout;
//   - failure: an operation that fails the communicator (Timeout, PeerLost, Mismatch) publishes
//     the rank's position, its error, the mismatch it detected if any, and its recent
//     collectives, then waits at most BRAID_DIAG_GRACE for the reports it needs and composes
//     the error message: which ranks have not reached a timed-out operation, or what the peer
//     of a mismatch called.
// All store I/O runs on the monitor thread, so a dead store delays no failing operation by
// more than the grace period.
#pragma once

#include <braid/store.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/flight_recorder.hpp"

namespace braid::core {

struct RankReport {
  int rank = -1;
  bool failed = false;  // written by a failing operation (else: progress of a stalled one)
  std::string error;    // failed: the error code ("Timeout", ...)
  bool any = false;     // the rank has started a collective
  OpDesc at;            // its latest started collective
  OpState state = OpState::Queued;
  double forMs = 0;       // how long that collective has been running (progress)
  bool mismatch = false;  // this rank received another operation's message
  int mismatchPeer = -1;
  std::uint64_t receivedTag = 0;  // what the peer sent
  OpDesc mismatchMine;            // what this rank was running then
  std::vector<OpDesc> recent;     // failed: its recent collectives, to name what it called
  // Failed with PeerLost: the rank it found gone (one that said it left the communicator), else
  // -1. A rank that fails aborts its transport so that its peers fail too; this names the rank
  // that left first to a peer that hears of the abort before anything else.
  int lostPeer = -1;
};

std::string encodeReport(const RankReport& r);
std::optional<RankReport> decodeReport(const std::string& text);

using Reports = std::vector<std::optional<RankReport>>;  // indexed by rank

/// "allreduce #57 timed out after 3000 ms on rank 0: ranks 2, 3 have not reached it (rank 2 is
/// at op #55 broadcast; rank 3 did not report)".
std::string timeoutMessage(const OpDesc& op, int rank, int size, std::chrono::milliseconds timeout,
                           const Reports& reports);
/// What `peer` called at the operation whose tag it sent: from its report's recent collectives,
/// else decoded from the tag (without the count).
std::string peerCallText(std::uint64_t receivedTag, std::uint64_t nearSeq,
                         const std::optional<RankReport>& peerReport, std::uint64_t* seqOut);
/// "rank 1 called allgather(fp32, count=1024) where rank 0 called allreduce(fp32, count=1024) at
/// op #57 of communicator 0".
/// Whether two ranks' descriptions are the same call (what the tag fingerprints).
bool sameCall(const OpDesc& a, const OpDesc& b);
std::string mismatchMessage(int peer, const std::string& peerCall, std::uint64_t peerSeq, int self,
                            const OpDesc& mine, const std::string& commId);

/// The communicator's diagnosis thread: publishes progress of stalled operations and runs the
/// failure exchange. Not created for single-rank communicators.
class DiagMonitor {
 public:
  using PositionFn = std::function<FlightRecorder::Position()>;
  /// A peer is stalled at this rank's sequence number in a different call (monitor thread).
  using MismatchFn = std::function<void(const RankReport& peer, const OpDesc& mine)>;
  DiagMonitor(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds stall,
              PositionFn position, MismatchFn mismatch);
  ~DiagMonitor();
  DiagMonitor(const DiagMonitor&) = delete;
  DiagMonitor& operator=(const DiagMonitor&) = delete;

  /// Publishes `mine` (waiting at most `timeout`); false if the store did not take it in time.
  bool publish(const RankReport& mine, std::chrono::milliseconds timeout);
  /// Reads the other ranks' reports until `enough(reports)` or `timeout`; returns what it has.
  Reports collect(std::function<bool(const Reports&)> enough, std::chrono::milliseconds timeout);

 private:
  void loop();
  void publishProgress();
  void compareStalled();
  bool storeCall(const std::function<void()>& f);

  std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds stall_;
  const PositionFn position_;
  const MismatchFn mismatch_;
  std::chrono::steady_clock::time_point lastCompare_{};
  std::chrono::milliseconds compareInterval_{500};
  std::uint64_t compareSeq_ = 0;
  bool compareStarted_ = false;
  int nextPeer_ = 0;
  bool mismatchFound_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool storeBroken_ = false;  // a store call failed: no more attempts (monitor thread only)
  bool failedPublished_ = false;
  // A pending request from a failing operation (at most one at a time).
  enum class Request { None, Publish, Collect } request_ = Request::None;
  RankReport toPublish_;
  std::function<bool(const Reports&)> enough_;
  std::chrono::steady_clock::time_point collectUntil_{};
  bool requestDone_ = false;
  bool publishOk_ = false;
  Reports collected_;
  // Progress publications (monitor thread only).
  bool progressPublished_ = false;
  std::uint64_t publishedSeq_ = 0;
  OpState publishedState_ = OpState::Queued;
  std::thread thread_;
};

}  // namespace braid::core
