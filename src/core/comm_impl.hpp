// The communicator's private state: bootstrap results, the transport, scratch memory, and the
// ordered queue that runs operations inline (blocking, nothing queued) or on the worker.
#pragma once

#include <array>
#include <atomic>
#include <braid/comm.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "algo/algorithm.hpp"
#include "algo/group.hpp"
#include "core/diagnosis.hpp"
#include "core/flight_recorder.hpp"
#include "core/liveness.hpp"
#include "core/metrics.hpp"
#include "core/straggler.hpp"
#include "core/timeline.hpp"
#include "core/work.hpp"
#include "topology/topology.hpp"
#include "transport/transport.hpp"
#include "tuning/cost_model.hpp"
#include "tuning/rules.hpp"

namespace braid {

namespace core {
/// The sub-communicators a hierarchical algorithm runs its phases on (algo::Groups), built on
/// the first hierarchical collective (core/comm_groups.cpp, docs/architecture.md "Hierarchies").
class CommGroups : public algo::Groups {
 public:
  /// What the phases ran since the last call, e.g. "hierarchical(node: reducescatterv
  /// shm_direct, allgatherv shm_direct; leaders: point-to-point)", kept in `names` (one entry
  /// per distinct text, appended when new); nullptr when nothing ran.
  virtual const char* takePhases(std::deque<std::string>& names) = 0;
  /// Aborts the sub-communicators' transports (Comm::abort of the parent).
  virtual void abort(const std::string& why) = 0;
};
/// The holder of the hierarchy's sub-communicators (core/comm_groups.cpp), built empty.
std::unique_ptr<CommGroups> makeCommGroups(Comm::Impl& parent);

/// Whether an operation's error fails (and revokes) the communicator: a timeout, a lost peer,
/// or a mismatch of collectives. A point-to-point Mismatch is a receive of another size than
/// its message, which the transport failed alone: the communicator goes on.
inline bool failsCommunicator(Collective c, ErrorCode code) noexcept {
  if (code == ErrorCode::Mismatch) return !isPointToPoint(c);
  return code == ErrorCode::Timeout || code == ErrorCode::PeerLost;
}
}  // namespace core

/// One operation as issued: arguments, owned copies of per-rank arrays, and its tag.
struct Op {
  algo::CollArgs args;
  std::vector<std::size_t> counts, displs, recvCounts, recvDispls;
  int peer = -1;  // send/recv
  // PremulSum: this rank's factor, and (while it runs) its input multiplied by it, which the
  // algorithm then sums (Comm::Impl::run).
  double factor = 1.0;
  std::vector<std::uint8_t> premulInput;
  std::uint64_t tag = 0;
  std::size_t bytes = 0;                    // nccl-tests size, for selection and logs
  std::shared_ptr<detail::WorkState> work;  // null when run inline
  // Diagnosis: what the flight recorder, the timeline and error messages say about the op.
  std::chrono::milliseconds timeout{0};  // bound from its start (Comm::setOpTimeout or default)
  core::OpDesc desc;
  std::uint64_t serial = 0;  // flight recorder
  core::Clock::time_point issuedAt{}, startedAt{};
  bool precise = false;  // stamped with the precise clock (timeline, straggler sample)
  const char* algorithm = nullptr;
};

struct Comm::Impl {
  int rank = 0;
  int size = 1;
  std::string id;
  Options opts;
  std::vector<tuning::Rule> rules;

  // Bootstrap. The store server (rank 0 only) is shared with sub-communicators so it outlives
  // every communicator that may still use the store.
  std::shared_ptr<TcpStoreServer> storeServer;
  std::shared_ptr<Store> store;      // the job's store
  std::shared_ptr<Store> commStore;  // this communicator's namespace in it
  std::unique_ptr<transport::Transport> transport;
  // Options::bufferBytes, allocated once and not written here: its pages are committed when an
  // algorithm first uses them (zero-filling it cost every communicator 1024 page faults at
  // creation; docs/benchmarks.md, "Scratch memory committed on first use").
  std::unique_ptr<std::uint8_t[]> scratchMemory;
  std::span<std::uint8_t> scratch;
  topology::Topology topo;                   // given to every algorithm (algo::Context::topo)
  std::unique_ptr<tuning::CostModel> model;  // selection where it decides (docs/plan.md)

  // Ordering (comm.cpp explains the model): operations start one at a time, in issue order.
  std::mutex queueMu;
  std::condition_variable queueCv;
  std::deque<Op> queue;  // issued, not started: the worker starts them
  // An operation is starting or executing (inline or on the worker). Claimed by an exchange, so
  // that a blocking call with nothing queued starts without taking queueMu (comm.cpp).
  std::atomic<bool> running{false};
  std::atomic<std::size_t> queued{0};  // queue.size(), written under queueMu, read without it
  std::atomic<std::size_t> listed{0};  // inflight.size(), likewise
  bool stopping = false;
  std::thread worker;
  // Async send/recv posted and not complete yet. They do not hold up later send/recv, so an
  // irecv followed by a send cannot deadlock; a collective waits for them first. Whoever waits
  // on (or tests) one drives it, after claiming it.
  struct Inflight;
  struct DriverLink;  // lets Work handles reach the communicator while it exists
  std::list<std::shared_ptr<Inflight>> inflight;  // guarded by queueMu
  std::shared_ptr<DriverLink> driverLink;
  std::atomic<std::uint64_t> collectiveSeq{0};
  // The algorithm chosen last per collective and the size it was chosen for (run() only, which
  // executes one operation at a time).
  struct SelectionMemo {
    std::size_t bytes = 0;
    const algo::AlgoInfo* algorithm = nullptr;
    std::size_t pieceBytes = 0;  // the hierarchical allreduce's piece (Context::pieceBytes)
    transport::SharedMemoryGroup* shared = nullptr;  // what selection saw (Context::sharedGroup)
  };
  std::array<SelectionMemo, static_cast<std::size_t>(Collective::Recv) + 1> selectionMemo{};
  int splitSeq = 0;
  // The names memberSubgroup() has used on this communicator (each once).
  std::mutex subgroupNamesMu;
  std::set<std::string> subgroupNames;
  std::atomic<bool> aborted{false};
  // Hierarchies: the node and cross-node sub-communicators, built by the first collective that
  // selects a hierarchical row (core/comm_groups.cpp); null until then.
  std::unique_ptr<core::CommGroups> groups;
  // What a hierarchy's phases ran, one text per distinct combination (CommGroups::takePhases):
  // the flight recorder names the operation with it; BRAID_DEBUG=INFO logs each once.
  std::deque<std::string> phaseNames;
  /// A sub-communicator of `members` (this communicator's ranks, including this rank) with id
  /// `childId`, derived like a split (shared connections, the parent's topology and cost
  /// parameters) without the split's agreement: every member must call it with the same list.
  /// It keeps the parent's options (its rules too, never forced: a rule naming a row that
  /// cannot run there is skipped) but not its timeline or metrics file.
  std::unique_ptr<Impl> makeChild(std::span<const int> members, std::string childId);
  /// The bootstrap of a sub-communicator of `members` (this communicator's ranks) in which this
  /// rank is `newRank`, with id `childId` and options `o`, over this communicator's store and
  /// connections, topology and cost parameters (makeChild, split, subgroup, memberSubgroup).
  std::unique_ptr<Impl> makeSub(int newRank, std::span<const int> members, std::string childId,
                                const Options& o);
  /// The Op of `a` issued internally (a hierarchy's phase): tagged and recorded like a public
  /// call, without its validation (the caller built the arguments).
  Op internalOp(const algo::CollArgs& a);

  // Diagnosis (docs/troubleshooting.md).
  std::uint64_t commHash = 0;                 // core::commIdHash(id), for tags
  std::atomic<std::int64_t> opTimeoutMs{-1};  // Comm::setOpTimeout; -1: opts.execTimeout
  core::Clock::time_point origin;             // creation: flight recorder and timeline times
  // The per-operation time stamps (issue, start, end): the kernel's coarse monotonic clock, the
  // time of its last tick (at most one tick, 1-4 ms, behind), for about 10 ns a read instead of
  // 35 on this VM; the precise clock when the timeline is on (comm_diag.cpp, stamp()). An
  // operation's deadline adds the tick to its start (deadline()), so it never comes early.
  core::Clock::duration coarseSlack{};
  std::unique_ptr<core::FlightRecorder> recorder;
  std::unique_ptr<core::Timeline> timeline;    // BRAID_TIMELINE
  std::unique_ptr<core::DiagMonitor> monitor;  // size > 1 only
  bool signalRegistered = false;
  std::atomic<bool> failedOnce{false};  // the first communicator-failing error was diagnosed
  struct MismatchSeen {
    std::mutex mu;
    bool seen = false;
    int peer = -1;
    std::uint64_t expected = 0, received = 0;
  } mismatchSeen;  // first tag mismatch the transport reported
  struct StallMismatch {
    std::mutex mu;
    bool seen = false;
    core::RankReport peer;  // stalled at our sequence number in another call
    core::OpDesc mine;
  } stallMismatch;  // found by the monitor through the store

  // Elastic (core/comm_elastic.cpp, docs/reliability.md): revoke, shrink, grow.
  std::unique_ptr<core::Liveness> liveness;  // size > 1 only
  std::atomic<bool> revoked{false};
  std::mutex revokedMu;
  std::string revokedWhy;       // guarded by revokedMu
  bool revokePending = false;   // this rank detected a failure; published after the diagnosis
  int shrinkAttempt = 0;        // shrink rounds run on this communicator
  std::vector<int> shrinkPool;  // ranks a shrink may keep (all, until a round failed)
  int growSeq = 0;
  void startElastic();
  void stopElastic();
  /// Fails what is pending and queued with the revoke (local; `why` names who revoked).
  void revokeLocal(const std::string& why);
  /// Called first by opFailed: publishes a revoke for an error that fails the communicator, and
  /// turns the errors of a revoked communicator into PeerLost naming the revoker.
  std::exception_ptr elasticFailure(Op& op, std::exception_ptr error);
  /// Called last by opFailed: publishes the revoke elasticFailure held back, with `message`
  /// (the diagnosed error) as the reason.
  void publishRevoke(const std::string& message);
  /// " (gone: rank 3, ...)" when the store knows ranks of this communicator are gone, else "".
  std::string goneText();
  /// The first peer that told this rank it left the communicator (Transport::peerLeft), or -1.
  int firstPeerLeft() const;
  /// The communicator's store keys (docs/architecture.md, "Bootstrap"). finishBootstrap: every
  /// rank has read the bootstrap keys it needs; the last to get here deletes them (all but the
  /// TCP addresses of a lazy transport, which dials later). releaseNamespace (destructor, after
  /// the transport is gone): the last rank to leave deletes every key of the namespace.
  /// Best effort: a store that cannot delete keeps them; a failure is logged at level 2. A
  /// communicator whose creation failed deletes nothing (`formed` false): its ranks may not even
  /// agree on the size, and a rank still joining must find the keys that tell it why it cannot.
  void finishBootstrap();
  void releaseNamespace();
  bool formed = false;  // creation finished on this rank (finishBootstrap ran)

  static std::unique_ptr<Impl> make(std::shared_ptr<Store> store,
                                    std::shared_ptr<TcpStoreServer> server, int rank, int size,
                                    std::string id, const Options& opts,
                                    const topology::Topology* parentTopology,
                                    std::span<const int> members,
                                    const tuning::CostParams* parentParams);

  ~Impl();
  /// Runs op now on the caller's thread if nothing is queued or running, else queues it and
  /// waits. Throws the op's error.
  void runBlocking(Op op);
  /// Queues op for the worker.
  Work runAsync(Op op);
  /// Runs op (records it; a failure goes through opFailed).
  void execute(Op& op);
  void run(Op& op);
  void premultiply(Op& op) const;
  void workerLoop();
  /// Posts an async send/recv (the caller holds `running`) and lists it in `inflight`; a failure
  /// finishes its Work.
  void postInflight(Op& op);
  /// Drives `e` (claimed by the caller) until it completes, or, with `until`, until then.
  detail::WorkDriver::Result driveInflight(Inflight& e,
                                           std::optional<detail::WorkClock::time_point> until);
  /// One non-blocking step on `e` (claimed by the caller): completes it when it is done, failed,
  /// or past its deadline. True when completed.
  bool testInflight(Inflight& e);
  /// Records the outcome of `e`, removes it from `inflight` and finishes its Work.
  void completeInflight(Inflight& e, std::exception_ptr error);
  /// Waits until every listed send/recv completed (before a collective starts).
  void drainInflight();
  /// Completes every unclaimed send/recv that is done or failed (after an abort).
  void sweepInflight();
  /// Listed send/recv the transport finished that nobody claimed, e.g. sends whose Work was
  /// dropped (a few of the oldest; queueMu held). reap() completes them (queueMu not held), so
  /// the list and the flight recorder do not keep them until the next collective.
  using Finished = std::array<std::shared_ptr<Inflight>, 4>;
  Finished finishedInflight();
  void reap(Finished& finished);
  std::string where(Collective c) const;
  tuning::SelectionInputs selectionInputs(Collective c, std::size_t bytes) const;
  void log(int level, const std::string& msg) const;

  // Operation lifecycle (core/comm_diag.cpp): flight recorder, timeline, failure diagnosis.
  core::Clock::time_point stamp(bool precise) const;
  core::Clock::time_point deadline(const Op& op) const {
    return op.startedAt + op.timeout + (op.precise ? core::Clock::duration{} : coarseSlack);
  }
  void opIssued(Op& op);  // the deadline's clock read and the timeout; nothing recorded yet
  void opQueued(Op& op);  // into the flight recorder as queued (async, or behind another op)
  void opStarted(Op& op, const char* algorithm);
  void opDone(Op& op);
  /// Records the failure; an error that fails the communicator (Timeout, PeerLost, Mismatch) is
  /// diagnosed the first time (store exchange, richer message) and dumps the flight recorder.
  /// Returns the error to report.
  std::exception_ptr opFailed(Op& op, std::exception_ptr error);
  Error diagnose(const Op& op, const Error& error);
  Error diagnoseStalledMismatch(const Op& op, const core::RankReport& peer);
  void dumpFlightRecorder(const std::string& reason);
  void startDiagnosis();  // after the transport exists
  void stopDiagnosis();   // first thing in ~Impl: no signal dump may start after it

  // Straggler attribution and metrics (core/comm_observe.cpp; core/straggler.hpp, metrics.hpp).
  // Collectives whose sequence number is a multiple of this get precise stamps (0: none):
  // Options::stragglerSample, or its default with metrics or BRAID_DEBUG=INFO.
  std::uint64_t preciseEvery = 0;
  std::uint64_t preciseMask = 0;  // preciseEvery - 1 when a power of two > 1: no division
  // Metrics: the common case counted here, beside the fields above that every operation reads
  // (core::OpCounters), the rest in `metrics`.
  core::OpCounters opCounters;
  std::unique_ptr<core::Metrics> metrics;
  std::string metricsPath;  // BRAID_METRICS_FILE expanded for this rank; empty: none
  std::unique_ptr<core::MetricsThread> metricsThread;
  std::mutex stragglerMu;  // the analysis and the exchanges
  std::unique_ptr<core::StragglerStats> straggler;
  std::uint64_t stragglerRound = 0;  // Comm::stragglerReport calls
  std::uint64_t liveRound = 0;       // the metrics thread's publications
  void startObservability();         // end of startDiagnosis
  void stopObservability();          // in ~Impl once no operation runs: final exchange and file
  void metricsTick();                // the metrics thread: live exchange, the file
  /// Joins windows into the analysis and spreads the verdicts (stragglerMu held).
  void absorbWaits(const std::vector<std::optional<std::vector<core::WaitSample>>>& windows);
  std::string stragglerReport();
};

/// Where the Work handles of async send/recv reach their communicator: `impl` is null once the
/// communicator is being destroyed; `users` counts the threads driving an operation through it.
struct Comm::Impl::DriverLink {
  std::mutex mu;
  std::condition_variable cv;
  Impl* impl = nullptr;
  int users = 0;
};

/// An async send/recv posted to the transport. The communicator's `inflight` list owns it; its
/// Work holds it weakly as its driver. Exactly one thread at a time touches the request: the one
/// that set `claimed` (a waiter, a tester, a collective draining the list, abort, destruction),
/// and the one that completes it never lets go.
struct Comm::Impl::Inflight final : detail::WorkDriver {
  transport::Request req;
  Op op;
  transport::Deadline deadline;
  std::atomic<bool> claimed{false};
  std::shared_ptr<DriverLink> link;
  std::list<std::shared_ptr<Inflight>>::iterator pos;  // in `inflight`, guarded by queueMu

  bool claim() { return !claimed.exchange(true, std::memory_order_acq_rel); }
  /// Lets go of a claim without completing; sleeping waiters look again.
  void release() {
    claimed.store(false, std::memory_order_release);
    op.work->changed();
  }
  Result drive(std::optional<detail::WorkClock::time_point> until) override;
  void poll() override;
};

}  // namespace braid
