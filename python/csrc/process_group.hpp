// ProcessGroupBraid: torch.distributed's backend "braid", a c10d::Backend (torch 2.x) over a
// braid communicator; the Python ProcessGroup serves CPU tensors with it.
//
// Bootstrap: torch hands the creator a store (already prefixed with the group's name), the rank
// and size in the group, the timeout and (extended API) the group's global ranks. Each group
// has two braid communicators: one for collectives, and one for point-to-point (p2p.hpp says
// why), split off the first, so it shares the first's connections (docs/architecture.md,
// "Shared connections").
//
// Where the collectives' communicator comes from (create(), docs/pytorch.md "Shared
// connections"): a torch subgroup (new_group, new_subgroups, a DeviceMesh dimension) gets its
// own creator call on its members only (non-members are never asked). When the default group
// is served by braid in this process and shares connections (BRAID_SHARE_CONNECTIONS), the
// subgroup is braid::Comm::memberSubgroup of the default group's communicator (of the global
// ranks, named by torch's group name): a communicator that posts over the default group's
// connections on a lane of its own, made without opening a socket. Otherwise (the default
// group is another backend, the global ranks are unknown, sharing is off, or this is the
// default group) it is created through torch's store with sockets of its own
// (braid::Comm::create). A line at BRAID_DEBUG=INFO says which.
//
// split_group: torch calls split() on every rank of the parent; the members derive the child
// from the parent's communicator the same way (memberSubgroup of the parent's ranks, named by
// the group name torch passes), or, where sharing is off, build it on the child store torch
// passes; non-members get nullptr.
//
// Lifetimes: a derived group holds its communicators only, which hold the shared connections
// and the store; it keeps working when its parent group is destroyed first.
//
// Timeout: the one given to init_process_group/new_group/split_group bounds every operation
// (braid Options::execTimeout) and connection setup (Options::connectTimeout, if smaller);
// dist.distributed_c10d._set_pg_timeout / set_timeout changes it (setTimeout). A per-call
// `timeout` in torch's option structs bounds that one operation (braid::ScopedOpTimeout).
// Other braid settings come from the BRAID_* environment as usual.
//
// shutdown() (destroy_process_group) runs what is queued, then refuses new operations;
// abort() fails what is pending at once (braid::Comm::abort) and refuses new operations.
//
// Reconfigure (torch >= 2.15; elastic.cpp, docs/pytorch.md "Reconfigure"): a group created with
// enable_reconfigure=True has no communicator until reconfigure() builds one among the processes
// whose handles it is given; reconfigure() may be called again (after a failure or abort(), to
// shrink or to grow), each time with a fresh uuid. It replaces the communicators that the
// issuing calls read, so it must not run concurrently with other calls on the same group (as
// torch's API implies: the controller calls it between steps). merge()
// (ProcessGroup.merge_remote_group) creates a new group through the store torch passes.
#pragma once

#include <array>
#include <atomic>
#include <braid/comm.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "p2p.hpp"
#include "torch_compat.hpp"
#include "tracking.hpp"
#include "work.hpp"

namespace braid_torch {

struct BackendConfig {
  std::chrono::milliseconds timeout{1800000};
  /// Address peers connect to; empty: BRAID_LISTEN_ADDR or braid's default.
  std::string listenAddress;
  /// How long a queued collective is left to a caller about to wait() on it before the worker
  /// runs it (BRAID_TORCH_GRACE_US, see work.hpp).
  std::chrono::microseconds grace{1000};
  /// enable_reconfigure=True: no communicator until reconfigure() (torch >= 2.15).
  bool enableReconfigure = false;
};

/// braid's Options for a group: BRAID_* from the environment, with the group's timeout bounding
/// every operation and connection setup, and its listen address.
braid::Options makeOptions(const BackendConfig& config);

/// A new reconfigure handle, "braid;host=H;pid=P;id=X" with X random (elastic.cpp).
std::string newReconfigureHandle();

/// What enqueue() takes from torch's option structs (every one has both): the call's timeout
/// (kUnsetTimeout: the group's bound), and asyncOp, false when the caller waits on the Work
/// right after issuing it (torch's blocking calls, which set it from async_op).
struct CallOptions {
  std::chrono::milliseconds timeout = c10d::kUnsetTimeout;
  bool asyncOp = true;
};
template <typename Opts>
CallOptions callOptions(const Opts& opts) {
  return CallOptions{opts.timeout, opts.asyncOp};
}

class ProcessGroupBraid : public BackendBase {
 public:
  ProcessGroupBraid(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    const BackendConfig& config);
  /// A group derived from `parent`'s collectives communicator without the store:
  /// braid::Comm::memberSubgroup of `parentRanks` (the parent's ranks of this group's members,
  /// in this group's order) named `name`. Only the members call it; it shares the parent's
  /// connections.
  ProcessGroupBraid(ProcessGroupBraid& parent, const std::vector<int>& parentRanks,
                    const std::string& name, const BackendConfig& config);
  /// The creator of a torch group (see the top of this file): derived from `parent` when it is
  /// given, else through the store; logs which at BRAID_DEBUG=INFO (`why`: why not derived).
  static c10::intrusive_ptr<ProcessGroupBraid> create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const BackendConfig& config,
      ProcessGroupBraid* parent, const std::vector<int>& parentRanks, const std::string& name,
      const std::string& why);
  /// A shrunk group (agreeShrink): over communicators braid::Comm::shrink made (elastic.cpp).
  ProcessGroupBraid(std::unique_ptr<braid::Comm> comm, std::unique_ptr<braid::Comm> p2pComm,
                    const BackendConfig& config);
  ~ProcessGroupBraid() override;

  const std::string getBackendName() const override { return "braid"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void shutdown() override;
  void abort() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                    const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<std::int64_t>& outputSplits,
                                               std::vector<std::int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // ---- elastic: keep going when a rank dies (elastic.cpp, docs/pytorch.md "Shrink") ----
#if BRAID_TORCH_HAS_SHRINK
  bool supportsShrinking() const override {
    return true;
  }
  /// torch.distributed.shrink_group's entry: the group of the ranks braid's agreement kept
  /// (agreeShrink), when they are exactly the ranks not in `ranksToExclude`; otherwise an error
  /// naming both lists (the agreed group is kept, so a second call with the agreed list, or
  /// braid_torch.shrink(), returns it). Both shrink flags revoke this group first.
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<std::int64_t>& ranksToExclude, int shrinkFlags,
      const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) override;
#endif
#if BRAID_TORCH_HAS_RECONFIGURE
  /// torch's reconfigure API (torch.distributed._reconfigure, elastic.cpp): groups created
  /// through a store (init_process_group, a new_group with sockets of its own, merge); a group
  /// derived from another's communicator has no store to meet through.
  bool supportsReconfigure() const override {
    return store_ != nullptr;
  }
  /// "braid;host=H;pid=P;id=X": names this process's backend object; stable across reconfigures.
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  /// Builds a new communicator among the processes of `opts.handles` (this one among them),
  /// through this group's store in a namespace of `opts.uuid`, and serves every later operation
  /// with it (rank: the handle's position in a list, or in the sorted set). Operations issued
  /// before keep running on the communicator they were issued to. The returned Work completes
  /// once they finished. Allowed after abort(), not after shutdown().
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
  /// ProcessGroup.merge_remote_group: a new group of `size` ranks through `store`.
  c10::intrusive_ptr<c10d::Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts,
                                          const int& rank, const int& size) override;
#endif
#if BRAID_TORCH_HAS_ABORT_HOOKS
  /// Abort hooks (ProcessGroup.register_abort_hook): run, in registration order, by abort()
  /// before it aborts, and on the thread that ran a collective that failed with braid's Timeout
  /// or PeerLost, before the error reaches the caller (each failing collective runs them again:
  /// torch asks for idempotent hooks). A hook's exception is printed and the others still run.
  bool supportsAbortHooks() const override {
    return true;
  }
  void registerAbortHook(std::int64_t hookId, c10d::AbortHook hook) override;
  void unregisterAbortHook(std::int64_t hookId) override;
#endif
  // ---- what happens to the works handed out (tracking.hpp, docs/pytorch.md "Coalescing,
  // timing and completion hooks") ----
  /// _coalescing_manager(device=...) and batch_isend_irecv: the ops issued in between run as
  /// always; endCoalescing returns one work over them.
  bool supportsCoalescing() const override {
    return true;
  }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  /// ProcessGroup._enable_collectives_timing: works issued afterwards have Work._get_duration.
  void enableCollectivesTiming() override;
  /// ProcessGroup._register_on_completion_hook: the hook gets a WorkInfo for each operation that
  /// completed successfully, on a thread of its own, in completion order. Once per group.
  void registerOnCompletionHook(
      std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override;
  /// ProcessGroup._wait_for_pending_works (destroy_process_group calls it when a hook is
  /// registered): every operation issued completed and its hook returned; bounded by the
  /// group's timeout.
  void waitForPendingWorks() override;
#if BRAID_TORCH_HAS_COMPLETION_HOOKS
  bool supportsCompletionHooks() const override {
    return true;
  }
  void registerCompletionHook(std::int64_t hookId, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(std::int64_t hookId) override;
#endif

  /// Collective over the live ranks: braid::Comm::shrink of the collectives' communicator
  /// (which revokes it on every rank first), then a point-to-point communicator split off the
  /// result. Returns this group's ranks that were left out, ascending. Done once: later calls
  /// return the same answer (and shrink() the same group) without another agreement.
  std::vector<int> agreeShrink();
  /// The group agreeShrink made (nullptr before).
  c10::intrusive_ptr<ProcessGroupBraid> shrunkGroup();
  /// Revokes both communicators of this group on every rank (braid::Comm::revoke).
  void revoke();

  /// Rank 0 collects a token from every rank, then releases them; a rank that does not arrive
  /// within the timeout is named in rank 0's error (Gloo's semantics and messages).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  void setSequenceNumberForGroup() override;
  std::uint64_t getSequenceNumberForGroup() override;

  /// The braid communicator of the collectives (for introspection from Python). Throws when
  /// there is none yet (enable_reconfigure=True before reconfigure()).
  braid::Comm& comm() {
    checkInitialized("this group's communicator");
    return *comm_;
  }
  /// False only for a group created with enable_reconfigure=True before its first reconfigure().
  bool initialized() const {
    return comm_ != nullptr;
  }
  const BackendConfig& config() const {
    return config_;
  }
  /// The bound on one operation now (init_process_group's timeout, or setTimeout's).
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeoutMs_.load());
  }

  /// Runs fn(comm()) on the group's queue as one of its collectives (in issue order, behind
  /// those queued before) and waits for it; rethrows its error. For collective set-up over the
  /// communicator outside torch's API (braid_torch.FusionBuffer splits off its own).
  void runInOrder(const char* title, std::function<void(braid::Comm&)> fn);
  /// Queues fn(comm()) like runInOrder but returns at once: the future of its Work, which the
  /// group's worker completes with `tensors` when fn returned (or sets to fn's error). The
  /// worker starts it without the grace period (nobody calls wait() on the Work). For
  /// collectives outside torch's API that must not block the caller (braid_torch.Compression).
  c10::intrusive_ptr<c10::ivalue::Future> runAsync(const char* title,
                                                   std::vector<at::Tensor> tensors,
                                                   std::function<void(braid::Comm&)> fn);

 private:
  /// Queues a collective: run() performs it. `call`: the option struct's timeout
  /// (kUnsetTimeout: the group's bound applies) and asyncOp (false: the caller is about to
  /// wait() and run it inline, so the queue's worker is not woken for it). A template (defined
  /// below the class) so that the operation and its timeout handling make one std::function,
  /// not two.
  template <typename Run>
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* title,
                                         const std::vector<at::Tensor>& inputs,
                                         const std::vector<at::Tensor>& outputs, Run&& run,
                                         CallOptions call = {});
  /// A completed Work of `type`, one per type for the group's life (DoneWork).
  c10::intrusive_ptr<c10d::Work> doneWork(c10d::OpType type);
  /// Runs what is queued and stops the worker, releasing the GIL meanwhile if this thread holds
  /// it (the worker may be running a Python future callback).
  void stopQueue();
  /// Runs the abort hooks (see registerAbortHook); `why` is printed with a hook's exception.
  void runAbortHooks(const std::string& why);
  /// Throws unless the group takes operations: not shut down or aborted, and initialized.
  void checkOpen(const char* op) const;
  void checkInitialized(const char* op) const;
  c10::intrusive_ptr<c10d::Work> allreduceSparse(std::vector<at::Tensor>& tensors,
                                                 const c10d::AllreduceOptions& opts);

  BackendConfig config_;
  std::shared_ptr<braid::Comm> comm_;
  std::shared_ptr<P2P> p2p_;
  std::shared_ptr<OpQueue> queue_;
  std::atomic<std::uint64_t> seq_{0};     // collectives issued (getSequenceNumberForGroup)
  std::atomic<std::uint64_t> p2pSeq_{0};  // point-to-point operations issued
  const std::shared_ptr<WorkTracker> tracker_ = std::make_shared<WorkTracker>();
  std::atomic<std::int64_t> timeoutMs_;
  std::mutex shrinkMu_;  // agreeShrink: one at a time, and the result below
  c10::intrusive_ptr<ProcessGroupBraid> shrunk_;
  std::vector<int> shrunkOut_;       // this group's ranks the agreement left out
  std::atomic<bool> closed_{false};  // shutdown() or abort() was called
  bool shutDown_ = false;            // shutdown() was called: reconfigure() is refused too
  // The store the group was created with, for reconfigure()'s rendezvous (enable_reconfigure).
  c10::intrusive_ptr<c10d::Store> store_;
  std::string handle_;       // get_reconfigure_handle()
  std::mutex abortHooksMu_;  // abortHooks_
  // Shared, so runAbortHooks copies pointers, not the hooks (a Python hook's copy would touch
  // its reference count without the GIL).
  std::vector<std::pair<std::int64_t, std::shared_ptr<const std::function<void()>>>> abortHooks_;
  std::atomic<bool> hasAbortHooks_{false};  // !abortHooks_.empty(), read without the lock
  std::vector<std::int64_t> usedUuids_;     // reconfigure(): each uuid once per group
  // doneWork(): made on first use under doneMu_ (owned by doneOwned_), read without it.
  std::array<std::atomic<c10d::Work*>, 256> doneWorks_{};
  std::mutex doneMu_;
  std::vector<c10::intrusive_ptr<c10d::Work>> doneOwned_;
};

template <typename Run>
c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::enqueue(c10d::OpType type, const char* title,
                                                          const std::vector<at::Tensor>& inputs,
                                                          const std::vector<at::Tensor>& outputs,
                                                          Run&& run, CallOptions call) {
  // closed_ is set before abort() aborts the communicators: a caller whose pending operation
  // just failed with Aborted gets this error, not a queue that is about to stop.
  checkOpen(title);
  const std::uint64_t seq = ++seq_;
  const std::chrono::milliseconds callTimeout = call.timeout;
  const bool perCall = callTimeout.count() > 0;
  TORCH_CHECK(perCall || callTimeout == c10d::kUnsetTimeout, "braid: ", title, " on rank ", rank_,
              ": the option's timeout must be positive, got ", callTimeout.count(), " ms");
  // A timeout names the bound that expired: the call's, or the group's.
  const std::int64_t ms = perCall ? callTimeout.count() : timeoutMs_.load();
  // The communicator is only needed for a per-call bound; the operation holds its own.
  // `this` outlives the closure: every queue is stopped (what it holds run) before the group
  // is destroyed or gets another queue.
  auto withTimeout = [run = std::forward<Run>(run), comm = perCall ? comm_ : nullptr, perCall, ms,
                      self = this, title]() mutable {
    // Operations of the queue run one at a time, so this bound covers exactly this one.
    std::optional<braid::ScopedOpTimeout> bound;
    if (perCall) bound.emplace(*comm, std::chrono::milliseconds(ms));
    try {
      run();
    } catch (const braid::Error& e) {
      if (e.code() != braid::ErrorCode::Timeout && e.code() != braid::ErrorCode::PeerLost) throw;
      if (self->hasAbortHooks_.load(std::memory_order_acquire))
        self->runAbortHooks(std::string(title) + " failed: " + e.what());
      if (e.code() != braid::ErrorCode::Timeout) throw;
      throw braid::Error(e.code(),
                         e.detail() +
                             (perCall ? " (the call's timeout is " : " (the group's timeout is ") +
                             std::to_string(ms) + " ms)");
    }
  };
  // A blocking call (dist.* with async_op False, which waits on the Work at once and drops it)
  // with the queue idle and nothing tracked or profiled runs here with no Work of its own: no
  // allocation, no closure behind a std::function, no completion of a Work; torch gets a
  // completed Work shared by such calls (doneWork), and the operation's error is thrown from
  // here, where wait() would have thrown it (docs/pytorch.md, "Per-call overhead").
  if (!call.asyncOp && tracker_->quiet() && !profilerOn() && queue_->claimIfIdle()) {
    const std::exception_ptr error = runNoGrad(withTimeout);
    queue_->release();
    if (error) std::rethrow_exception(error);
    return doneWork(type);
  }
  // On the other paths a blocking call's Work is still waited on and dropped by torch at once,
  // so nobody asks it for its result: it keeps no reference to the outputs. With one, its
  // destruction, which torch runs with the GIL released, would drop the last extra reference of
  // the caller's tensor and take the GIL back for it (the tensor's Python object); the argument
  // list torch made drops it with the GIL held instead. Outside coalescing only: a coalesced
  // Work's result is its members'.
  auto work = c10::make_intrusive<BraidWork>(
      queue_, type, title, inputs,
      !call.asyncOp && !tracker_->coalescing() ? std::vector<at::Tensor>() : outputs,
      std::move(withTimeout));
  tracker_->issue(work, seq, *queue_);
  // A blocking call runs here when the queue is idle (it would run inline in wait() anyway);
  // an asynchronous one never does: running it at issue would block its caller until every peer
  // arrives, which deadlocks a program that issues it and then does what a peer waits for.
  if (!call.asyncOp && queue_->runIfIdle(*work)) return work;
  queue_->push(work, /*callerWaits=*/!call.asyncOp);
  return work;
}

}  // namespace braid_torch
