// ProcessGroupBraid's lifecycle: creation (from torch's store, or as a sub-group sharing the
// parent's connections), split, shutdown and abort, the in-order queue every operation goes
// through, the monitored barrier and sequence numbers (the operations are in
// process_group_ops.cpp).
#include "process_group.hpp"

#include <Python.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <braid/error.hpp>
#include <braid/options.hpp>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>

#include "gil.hpp"
#include "store_adapter.hpp"
#include "tensor_util.hpp"

namespace braid_torch {

braid::Options makeOptions(const BackendConfig& config) {
  braid::Options o = braid::Options::fromEnv();
  if (config.timeout.count() > 0) {
    o.execTimeout = config.timeout;
    o.connectTimeout = std::min(o.connectTimeout, config.timeout);
  }
  if (!config.listenAddress.empty() && o.listenAddress.empty())
    o.listenAddress = config.listenAddress;
  return o;
}

ProcessGroupBraid::ProcessGroupBraid(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, const BackendConfig& config)
    : BackendBase(rank, size), config_(config), timeoutMs_(config.timeout.count()) {
  store_ = store;
  handle_ = newReconfigureHandle();
  queue_ = std::make_shared<OpQueue>(config.grace);
  if (!config.enableReconfigure) {
    const braid::Options options = makeOptions(config);
    auto adapter = bootstrapStore(store, rank, options);
    comm_ = braid::Comm::create(adapter, rank, size, options);
    // Split off the collectives' communicator: it shares that one's connections.
    p2p_ = std::make_shared<P2P>(comm_->split(0, rank));
  }
  init();
}

namespace {

int positionOf(const std::vector<int>& parentRanks, int parentRank, const std::string& name) {
  const auto it = std::find(parentRanks.begin(), parentRanks.end(), parentRank);
  TORCH_CHECK(it != parentRanks.end(), "braid: group '", name, "': this rank (", parentRank,
              " in the parent group) is not among the group's ranks");
  return static_cast<int>(it - parentRanks.begin());
}

std::string rankList(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// braid's INFO lines (BRAID_DEBUG=INFO), for the group's communicator.
void logInfo(const braid::Comm& comm, const std::string& group, const std::string& text) {
  if (comm.options().logLevel < 2) return;
  std::fprintf(stderr, "[braid INFO rank %d comm %s] torch group '%s': %s\n", comm.rank(),
               comm.id().c_str(), group.c_str(), text.c_str());
}

/// The braid name of a torch group: torch's name with a hash of its ranks. torch's group names
/// are not unique across disjoint groups: new_subgroups(group=G) run by the members of two
/// disjoint groups G at once gives each sub-group of both the same name (torch counts groups per
/// process), and braid's memberSubgroup takes a name to name one group among the parent's ranks
/// (two first-listed ranks under one name fail as a disagreement). The members of one torch
/// group pass the same ranks, so they still agree on the braid name without talking.
std::string braidGroupName(const std::string& name, const std::vector<int>& ranks) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the ranks
  for (int r : ranks)
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<std::uint32_t>(r) >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return name + "@" + hex;
}

}  // namespace

ProcessGroupBraid::ProcessGroupBraid(ProcessGroupBraid& parent, const std::vector<int>& parentRanks,
                                     const std::string& name, const BackendConfig& config)
    : BackendBase(positionOf(parentRanks, parent.comm().rank(), name),
                  static_cast<int>(parentRanks.size())),
      config_(config),
      timeoutMs_(config.timeout.count()) {
  // The parent's Options, with this group's bound on every operation.
  comm_ = parent.comm_->memberSubgroup(parentRanks, braidGroupName(name, parentRanks));
  comm_->setOpTimeout(config.timeout);
  p2p_ = std::make_shared<P2P>(comm_->split(0, comm_->rank()));
  p2p_->comm().setOpTimeout(config.timeout);
  queue_ = std::make_shared<OpQueue>(config.grace);
  init();
}

c10::intrusive_ptr<ProcessGroupBraid> ProcessGroupBraid::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const BackendConfig& config,
    ProcessGroupBraid* parent, const std::vector<int>& parentRanks, const std::string& name,
    const std::string& why) {
  if (parent) {
    TORCH_CHECK(static_cast<int>(parentRanks.size()) == size, "braid: group '", name, "' on rank ",
                rank, ": ", parentRanks.size(), " global ranks for a group of ", size);
    auto pg = c10::make_intrusive<ProcessGroupBraid>(*parent, parentRanks, name, config);
    TORCH_CHECK(pg->getRank() == rank, "braid: group '", name, "': torch says this is rank ", rank,
                " of the group, but it is listed at ", pg->getRank(), " in ",
                rankList(parentRanks));
    logInfo(pg->comm(), name,
            "shares the connections of braid communicator " + parent->comm().id() +
                " (Comm::memberSubgroup of its ranks " + rankList(parentRanks) + ")");
    return pg;
  }
  auto pg = c10::make_intrusive<ProcessGroupBraid>(store, rank, size, config);
  if (!pg->initialized()) return pg;  // enable_reconfigure: no communicator to log about yet
  logInfo(pg->comm(), name,
          "connections of its own, bootstrapped through torch's store (Comm::create): " + why);
  return pg;
}

ProcessGroupBraid::~ProcessGroupBraid() {
  stopQueue();
  tracker_->stop();  // after the queue: its last operations' hooks run first
}

void ProcessGroupBraid::stopQueue() {
  // The worker may run a Python future callback, which needs the GIL this thread may hold.
  NoGil nogil;
  queue_->shutdown();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::doneWork(c10d::OpType type) {
  std::atomic<c10d::Work*>& slot = doneWorks_[static_cast<std::size_t>(type)];
  c10d::Work* w = slot.load(std::memory_order_acquire);
  if (w == nullptr) {
    std::lock_guard<std::mutex> lk(doneMu_);
    w = slot.load(std::memory_order_relaxed);
    if (w == nullptr) {
      doneOwned_.push_back(c10::make_intrusive<DoneWork>(type));
      w = doneOwned_.back().get();
      slot.store(w, std::memory_order_release);
    }
  }
  return c10::intrusive_ptr<c10d::Work>::unsafe_reclaim_from_nonowning(w);
}

void ProcessGroupBraid::checkOpen(const char* op) const {
  TORCH_CHECK(!closed_.load(), "braid: ", op, " on rank ", rank_,
              ": the process group was shut down (destroy_process_group, shutdown() or abort()); "
              "it takes no new operations");
  checkInitialized(op);
}

void ProcessGroupBraid::checkInitialized(const char* op) const {
  TORCH_CHECK(comm_ != nullptr, "braid: ", op, " on rank ", rank_,
              ": the process group was created with enable_reconfigure=True and has no "
              "communicator until torch.distributed._reconfigure() (ProcessGroup.reconfigure) "
              "is called");
}

void ProcessGroupBraid::shutdown() {
  closed_ = true;
  shutDown_ = true;
  stopQueue();
}

// ---------------------------------------------------------------- coalescing, timing, hooks

void ProcessGroupBraid::startCoalescing() {
  // Allowed on a closed group: torch's abort path brackets abort() calls with it.
  tracker_->startCoalescing();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::endCoalescing() {
  return tracker_->endCoalescing(queue_);
}

void ProcessGroupBraid::enableCollectivesTiming() {
  tracker_->enableTiming();
}

void ProcessGroupBraid::registerOnCompletionHook(
    std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) {
  TORCH_CHECK(hook, "braid: _register_on_completion_hook on rank ", rank_, ": the hook is empty");
  TORCH_CHECK(!onCompletionHook_, "braid: _register_on_completion_hook on rank ", rank_,
              ": a hook is registered already (one per group)");
  // torch's hasHooks() (destroy_process_group waits for pending works when it is true) reads
  // the base class's member, so the hook lives there; the tracker's thread calls it, and is
  // stopped before this group goes.
  onCompletionHook_ = std::move(hook);
  tracker_->setInfoHook([this](std::shared_ptr<c10d::WorkInfo> info) { onCompletionHook_(info); });
}

void ProcessGroupBraid::waitForPendingWorks() {
  tracker_->checkNotHookThread();
  // Collectives run one at a time in issue order: once a no-op queued now has run, so has every
  // one issued before it. A stopped queue ran what it held.
  if (!closed_.load()) {
    auto marker = c10::make_intrusive<BraidWork>(
        queue_, c10d::OpType::UNKNOWN, "braid:wait_for_pending_works", std::vector<at::Tensor>{},
        std::vector<at::Tensor>{}, [] {});
    bool queued = true;
    try {
      queue_->push(marker);
    } catch (const std::exception&) {
      queued = false;  // shut down meanwhile
    }
    if (queued) {
      NoGil nogil;  // a future callback on the worker may need it
      marker->wait();
    }
  }
  tracker_->waitForPending(*queue_, timeout());
}

#if BRAID_TORCH_HAS_COMPLETION_HOOKS
void ProcessGroupBraid::registerCompletionHook(std::int64_t hookId, c10d::CompletionHook hook) {
  TORCH_CHECK(hook, "braid: register_completion_hook on rank ", rank_, ": hook ", hookId,
              " is empty");
  tracker_->registerHook(hookId, std::move(hook));
}

void ProcessGroupBraid::unregisterCompletionHook(std::int64_t hookId) {
  tracker_->unregisterHook(hookId);
}
#endif

void ProcessGroupBraid::abort() {
  // Pending and later operations of both communicators fail with braid's Aborted error; the
  // queue then runs what is left (each fails at once) and refuses new operations.
  if (hasAbortHooks_.load(std::memory_order_acquire)) runAbortHooks("abort() was called");
  closed_ = true;
  if (comm_) {
    comm_->abort();
    p2p_->comm().abort();
  }
  stopQueue();
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupBraid::getBackendOptions() {
  auto o = c10::make_intrusive<c10d::Backend::Options>("braid", timeout());
  return o;
}

void ProcessGroupBraid::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK(timeout.count() > 0, "braid: set_timeout on rank ", rank_,
              ": the timeout must be positive, got ", timeout.count(), " ms");
  if (comm_) {
    comm_->setOpTimeout(timeout);
    p2p_->comm().setOpTimeout(timeout);
  }
  timeoutMs_ = timeout.count();
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupBraid::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  checkOpen("split_group");
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;  // not a member of the new group
  for (int r : ranks)
    TORCH_CHECK(r >= 0 && r < size_, "braid: split_group on rank ", rank_, ": rank ", r,
                " is outside the parent group [0, ", size_, ")");
  BackendConfig config = config_;
  config.timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout();
  // Derived from this group's communicator (its connections shared) where sharing is on and
  // torch named the group; else through the child store, as new_group's fallback.
  const std::string name = opts ? opts->group_name : std::string();
  const bool derive = comm_->options().shareConnections && !name.empty();
  const std::string why = !comm_->options().shareConnections ? "BRAID_SHARE_CONNECTIONS=0"
                                                             : "torch passed split() no group name";
  // Bootstrap waits for the other members: let other Python threads run meanwhile.
  NoGil nogil;
  return create(store->clone(), static_cast<int>(it - ranks.begin()),
                static_cast<int>(ranks.size()), config, derive ? this : nullptr, ranks,
                name.empty() ? "split" : name, why);
}

void ProcessGroupBraid::runInOrder(const char* title, std::function<void(braid::Comm&)> fn) {
  auto comm = comm_;
  auto work =
      enqueue(c10d::OpType::UNKNOWN, title, {}, {}, [comm, fn = std::move(fn)] { fn(*comm); });
  work->wait();
}

c10::intrusive_ptr<c10::ivalue::Future> ProcessGroupBraid::runAsync(
    const char* title, std::vector<at::Tensor> tensors, std::function<void(braid::Comm&)> fn) {
  auto comm = comm_;
  auto work = enqueue(c10d::OpType::UNKNOWN, title, tensors, tensors,
                      [comm, fn = std::move(fn)] { fn(*comm); });
  return work->getFuture();  // also tells the worker to run it now (OpQueue::expedite)
}

// ---------------------------------------------------------------- monitored barrier

void ProcessGroupBraid::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  using Clock = std::chrono::steady_clock;
  // Tags of its own, so a stray user message is reported instead of taken for a token.
  constexpr int kArriveTag = -0x6d62;
  constexpr int kReleaseTag = -0x6d63;
  checkOpen("monitored_barrier");
  const auto timeout = opts.timeout == c10d::kUnsetTimeout ? this->timeout() : opts.timeout;
  at::Tensor token = at::full({1}, rank_, at::kLong);
  if (rank_ != 0) {
    // Only rank 0 enforces the timeout, so that it, not a bystander, names the missing rank.
    try {
      // The same bound as rank 0's (gloo's semantics): when rank 0 gives up on a missing rank
      // it sends no release, and every waiting rank fails after `timeout` instead of hanging.
      p2p_->send(queue_, token, 0, kArriveTag)->wait(timeout);
      p2p_->recv(queue_, token, 0, kReleaseTag)->wait(timeout);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "Rank ", rank_,
                  " successfully reached monitoredBarrier, but received errors while waiting "
                  "for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n "
                  "Original exception: \n",
                  e.what());
    }
    return;
  }
  const auto start = Clock::now();
  auto waitAll = [&](std::vector<std::pair<int, c10::intrusive_ptr<BraidWork>>>& works) {
    std::vector<int> failed;
    for (auto& [peer, work] : works) {
      auto left = timeout;
      if (!waitAllRanks) {
        left =
            std::chrono::duration_cast<std::chrono::milliseconds>(timeout - (Clock::now() - start));
        TORCH_CHECK(left.count() > 0, "Rank 0 timed out in monitoredBarrier after ",
                    timeout.count(), " ms.");
      }
      try {
        work->wait(left);
      } catch (const std::exception& e) {
        if (!waitAllRanks)
          TORCH_CHECK(false, "[Rank 0]: Rank ", peer, " failed to pass monitoredBarrier in ",
                      timeout.count(), " ms\n Original exception: \n", e.what());
        failed.push_back(peer);
      }
    }
    if (!failed.empty()) {
      std::string ranks;
      for (int r : failed) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      TORCH_CHECK(false, "[Rank 0]: Ranks ", ranks, " failed to pass monitoredBarrier in ",
                  timeout.count(), " ms");
    }
  };
  std::vector<std::pair<int, c10::intrusive_ptr<BraidWork>>> arrivals, releases;
  for (int r = 1; r < size_; ++r)
    arrivals.emplace_back(r, p2p_->recv(queue_, at::empty({1}, at::kLong), r, kArriveTag));
  waitAll(arrivals);
  for (int r = 1; r < size_; ++r)
    releases.emplace_back(r, p2p_->send(queue_, token, r, kReleaseTag));
  waitAll(releases);
}

// ---------------------------------------------------------------- sequence numbers

void ProcessGroupBraid::setSequenceNumberForGroup() {
  seq_ = 0;
}

std::uint64_t ProcessGroupBraid::getSequenceNumberForGroup() {
  return seq_.load();
}

}  // namespace braid_torch
