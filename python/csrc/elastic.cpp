// Keep going when a rank dies (docs/pytorch.md "Shrink", docs/reliability.md): the backend's
// side of torch.distributed.shrink_group and braid_torch.shrink.
//
// braid decides who is in the shrunk group by agreement through the store (braid::Comm::shrink:
// the ranks that are alive and call it), while torch's shrink_group is told which ranks to leave
// out. agreeShrink runs braid's agreement once per group and keeps the result; shrink() returns
// it when torch's list is exactly the ranks the agreement left out, and otherwise fails naming
// both lists (the result stays, so calling again with the agreed list returns it). braid's
// agreement cannot leave out a rank that is alive and takes part, so torch's contract (an
// excluded rank does not call shrink_group) is what makes the lists equal: an excluded rank that
// destroyed its group is gone at once, one that died or exited too where braid's store watches
// the ranks (store_adapter.hpp, bootstrapStore); any other is left out once the group's timeout
// passed.
//
// Reconfigure (torch.distributed._reconfigure, docs/pytorch.md "Reconfigure"): a process's
// handle names its group object ("braid;host=H;pid=P;id=X", X random, the same for the object's
// life). reconfigure(uuid, handles) meets the other members through the group's store, under
// "braid-reconfigure/<uuid>/": the first member of the list publishes the list, every other
// member compares its own with it (so members given different lists fail at once, naming both,
// instead of waiting out the timeout), and all of them create a communicator with
// braid::Comm::create in a namespace of the uuid and the list's hash. The new communicator then
// serves every later operation; the old one is released when the operations issued to it are
// done. The first member deletes the list once the communicator exists. The store is the one the
// group was created on, so every member (a replacement process too) must have joined the same
// rendezvous: init_process_group with the same MASTER_ADDR and MASTER_PORT, or the same
// init_method.
#include <Python.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <braid/error.hpp>
#include <cstdio>
#include <random>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <variant>

#include "gil.hpp"
#include "process_group.hpp"
#include "store_adapter.hpp"

namespace braid_torch {

namespace {

std::string listText(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

ProcessGroupBraid::ProcessGroupBraid(std::unique_ptr<braid::Comm> comm,
                                     std::unique_ptr<braid::Comm> p2pComm,
                                     const BackendConfig& config)
    : BackendBase(comm->rank(), comm->size()), config_(config), timeoutMs_(config.timeout.count()) {
  // A shrunk communicator starts with the parent's Options; the group's bound may have changed
  // since (set_timeout) or be overridden (shrink_group's pg_options).
  comm->setOpTimeout(config.timeout);
  p2pComm->setOpTimeout(config.timeout);
  comm_ = std::move(comm);
  p2p_ = std::make_shared<P2P>(std::move(p2pComm));
  queue_ = std::make_shared<OpQueue>(config.grace);
  init();
}

void ProcessGroupBraid::revoke() {
  checkInitialized("revoke");
  comm_->revoke();
  p2p_->comm().revoke();
}

std::vector<int> ProcessGroupBraid::agreeShrink() {
  checkInitialized("shrink");
  NoGil nogil;
  std::lock_guard<std::mutex> lk(shrinkMu_);
  if (shrunk_) return shrunkOut_;
  // Every pending and queued operation of both communicators fails now, on every rank, so the
  // queue drains at once (Comm::shrink would revoke the collectives' communicator itself).
  comm_->revoke();
  p2p_->comm().revoke();
  std::unique_ptr<braid::Comm> comm, p2p;
  std::vector<std::int32_t> members;
  // On the group's worker, behind what was queued: the thread that issues every operation of
  // the collectives' communicator.
  runInOrder("braid:shrink", [&](braid::Comm& old) {
    comm = old.shrink();
    // Comm::shrink keeps the members' order but does not say which old ranks they were.
    members.resize(static_cast<std::size_t>(comm->size()));
    const std::int32_t mine = rank_;
    comm->allgather(&mine, members.data(), 1, braid::DataType::Int32);
    // The point-to-point communicator is split off the shrunk one rather than shrunk on its
    // own: two agreements could keep different ranks if one died between them.
    p2p = comm->split(0, comm->rank());
  });
  std::vector<int> out;
  for (int r = 0; r < size_; ++r)
    if (std::find(members.begin(), members.end(), r) == members.end()) out.push_back(r);
  BackendConfig config = config_;
  config.timeout = timeout();
  shrunk_ = c10::make_intrusive<ProcessGroupBraid>(std::move(comm), std::move(p2p), config);
  shrunkOut_ = out;
  return out;
}

c10::intrusive_ptr<ProcessGroupBraid> ProcessGroupBraid::shrunkGroup() {
  std::lock_guard<std::mutex> lk(shrinkMu_);
  return shrunk_;
}

#if BRAID_TORCH_HAS_SHRINK
c10::intrusive_ptr<c10d::Backend> ProcessGroupBraid::shrink(
    const std::vector<std::int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  const std::string self = "braid: shrink_group on rank " + std::to_string(rank_) +
                           " of a group of " + std::to_string(size_);
  // 0 (SHRINK_DEFAULT) and 1 (SHRINK_ABORT): braid revokes the group first either way.
  TORCH_CHECK(shrinkFlags == 0 || shrinkFlags == 1, self, ": shrink_flags ", shrinkFlags,
              " is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)");
  std::vector<int> wanted;
  for (std::int64_t r : ranksToExclude) {
    TORCH_CHECK(r >= 0 && r < size_, self, ": ranks_to_exclude has rank ", r,
                ", outside the group [0, ", size_, ")");
    TORCH_CHECK(r != rank_, self, ": ranks_to_exclude has this rank (", r,
                "); an excluded rank does not call shrink_group");
    wanted.push_back(static_cast<int>(r));
  }
  std::sort(wanted.begin(), wanted.end());
  TORCH_CHECK(std::adjacent_find(wanted.begin(), wanted.end()) == wanted.end(), self,
              ": ranks_to_exclude ", listText(wanted), " names a rank twice");
  const std::vector<int> out = agreeShrink();
  TORCH_CHECK(out == wanted, self, ": ranks_to_exclude is ", listText(wanted),
              " but braid's agreement left out ", listText(out),
              " (braid keeps exactly the ranks that are alive and shrink this group; a rank "
              "to exclude must be dead, have exited or destroyed the group, or not call "
              "shrink_group within the group's timeout). The shrunk group is kept: call "
              "shrink_group again with ranks_to_exclude=",
              listText(out), ", or braid_torch.shrink(group), which passes braid's list");
  auto group = shrunkGroup();
  if (optsOverride && optsOverride->timeout.count() > 0) group->setTimeout(optsOverride->timeout);
  return group;
}
#endif

std::string newReconfigureHandle() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0)
    std::snprintf(host.data(), host.size(), "?");
  std::random_device rd;
  const std::uint64_t id = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  std::array<char, 17> hex{};
  std::snprintf(hex.data(), hex.size(), "%016llx", static_cast<unsigned long long>(id));
  return "braid;host=" + std::string(host.data()) + ";pid=" + std::to_string(::getpid()) +
         ";id=" + hex.data();
}

#if BRAID_TORCH_HAS_RECONFIGURE
namespace {

std::string joinedList(const std::vector<std::string>& handles) {
  std::string s;
  for (const auto& h : handles) s += h + "\n";
  return s;
}

// The list as an error shows it: "[a, b, c]".
std::string shownList(const std::string& joined) {
  std::string s = "[";
  for (std::size_t at = 0, next; (next = joined.find('\n', at)) != std::string::npos; at = next + 1)
    s += (at ? ", " : "") + joined.substr(at, next - at);
  return s + "]";
}

std::string fnv1aHex(const std::string& text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  std::array<char, 17> hex{};
  std::snprintf(hex.data(), hex.size(), "%016llx", static_cast<unsigned long long>(h));
  return hex.data();
}

}  // namespace

c10d::ReconfigureHandle ProcessGroupBraid::get_reconfigure_handle() const {
  TORCH_CHECK(store_, "braid: get_reconfigure_handle on rank ", rank_,
              ": this group was derived from another group's communicator (it shares that "
              "group's connections) and has no store to reconfigure through; reconfigure the "
              "group it came from, or create it with a store of its own "
              "(BRAID_SHARE_CONNECTIONS=0)");
  return handle_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reconfigure(
    const c10d::ReconfigureOptions& opts) {
  const std::string self = "braid: reconfigure (uuid " + std::to_string(opts.uuid) + ") on rank " +
                           std::to_string(rank_);
  get_reconfigure_handle();  // throws for a group without a store
  TORCH_CHECK(!shutDown_, self,
              ": the process group was shut down (destroy_process_group or shutdown()); an "
              "aborted group can be reconfigured, a shut-down one cannot");
  TORCH_CHECK(opts.hints.empty(), self, ": braid takes no hints, got '", opts.hints.begin()->first,
              "'");
  std::vector<std::string> handles;
  std::visit([&](const auto& hs) { handles.assign(hs.begin(), hs.end()); }, opts.handles);
  // A set leaves the order to the backend: sorted, so every member derives the same ranks.
  if (std::holds_alternative<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles))
    std::sort(handles.begin(), handles.end());
  TORCH_CHECK(!handles.empty(), self, ": no handles");
  for (std::size_t i = 0; i < handles.size(); ++i)
    TORCH_CHECK(handles[i].rfind("braid;", 0) == 0, self, ": handle ", i, " ('", handles[i],
                "') is not a braid handle (torch.distributed._get_reconfigure_handle() of a "
                "braid group)");
  {
    std::vector<std::string> sorted = handles;
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    TORCH_CHECK(twice == sorted.end(), self, ": handle '", twice == sorted.end() ? "" : *twice,
                "' is listed twice");
  }
  const auto me = std::find(handles.begin(), handles.end(), handle_);
  TORCH_CHECK(me != handles.end(), self, ": this process's handle (", handle_,
              ") is not among the ", handles.size(), " handles");
  TORCH_CHECK(std::find(usedUuids_.begin(), usedUuids_.end(), opts.uuid) == usedUuids_.end(), self,
              ": uuid ", opts.uuid, " was used before on this group; pass a fresh one");
  usedUuids_.push_back(opts.uuid);  // also when this attempt fails: its keys may be in the store
  const int newRank = static_cast<int>(me - handles.begin());
  const int newSize = static_cast<int>(handles.size());
  BackendConfig config = config_;
  config.timeout = opts.timeout ? *opts.timeout : timeout();
  TORCH_CHECK(config.timeout.count() > 0, self, ": the timeout must be positive, got ",
              config.timeout.count(), " ms");

  const std::string base = "braid-reconfigure/" + std::to_string(opts.uuid) + "/";
  const std::string joined = joinedList(handles);
  std::shared_ptr<braid::Comm> comm;
  std::shared_ptr<P2P> p2p;
  {
    NoGil nogil;  // the rendezvous waits for the other members
    // The members must be given the same list: the first publishes it, the others compare.
    if (newRank == 0) {
      store_->set(base + "members", std::vector<std::uint8_t>(joined.begin(), joined.end()));
    } else {
      try {
        store_->wait({base + "members"}, config.timeout);
      } catch (const std::exception& e) {
        TORCH_CHECK(false, self, ": the first member of the list (", handles[0],
                    ") did not publish it within ", config.timeout.count(), " ms: ", e.what());
      }
      const auto got = store_->get(base + "members");
      const std::string theirs(got.begin(), got.end());
      TORCH_CHECK(theirs == joined, self, ": the members were given different lists: the first (",
                  handles[0], ") has ", shownList(theirs), ", this rank ", shownList(joined));
    }
    auto store = c10::make_intrusive<c10d::PrefixStore>(base + fnv1aHex(joined) + "/", store_);
    const braid::Options options = makeOptions(config);
    comm = braid::Comm::create(bootstrapStore(store, newRank, options), newRank, newSize, options);
    // Every member read the list before it could take part in the creation: the first one
    // deletes it (a store without deleteKey, FileStore, keeps it).
    if (newRank == 0) {
      try {
        store_->deleteKey(base + "members");
      } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): kept, as said above
      }
    }
    p2p = std::make_shared<P2P>(comm->split(0, newRank));
  }
  // Operations issued before keep the communicator they captured; later ones get this one.
  comm_ = std::move(comm);
  p2p_ = std::move(p2p);
  rank_ = newRank;
  size_ = newSize;
  timeoutMs_ = config.timeout.count();
  {
    std::lock_guard<std::mutex> lk(shrinkMu_);
    shrunk_.reset();
    shrunkOut_.clear();
  }
  if (closed_.load()) {  // aborted: its queue was stopped
    queue_ = std::make_shared<OpQueue>(config_.grace);
    closed_ = false;
  }
  // Completes behind the operations queued before (on the old communicator).
  auto work = c10::make_intrusive<BraidWork>(queue_, c10d::OpType::UNKNOWN, "braid:reconfigure",
                                             std::vector<at::Tensor>{}, std::vector<at::Tensor>{},
                                             BraidWork::RunFn([] {}));
  queue_->push(work);
  return work;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupBraid::merge(
    const c10::intrusive_ptr<c10d::Store>& store,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts, const int& rank, const int& size) {
  TORCH_CHECK(size > 0 && rank >= 0 && rank < size, "braid: merge_remote_group on rank ", rank_,
              ": rank ", rank, " is outside the merged group of ", size);
  BackendConfig config = config_;
  config.enableReconfigure = false;
  config.timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout();
  NoGil nogil;  // bootstrap waits for the other ranks
  return c10::make_intrusive<ProcessGroupBraid>(store->clone(), rank, size, config);
}
#endif

void ProcessGroupBraid::runAbortHooks(const std::string& why) {
  std::vector<std::pair<std::int64_t, std::shared_ptr<const std::function<void()>>>> hooks;
  {
    std::lock_guard<std::mutex> lk(abortHooksMu_);
    hooks = abortHooks_;
  }
  for (auto& [id, hook] : hooks) {
    // A Python hook needs the GIL; this may be the group's worker thread, which holds none.
    // (Every thread that waits on this group's operations releases the GIL meanwhile.)
    const bool python = Py_IsInitialized() != 0;
    const PyGILState_STATE gil = python ? PyGILState_Ensure() : PyGILState_UNLOCKED;
    try {
      (*hook)();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[braid WARN rank %d] abort hook %lld (run because %s) raised: %s\n",
                   rank_, static_cast<long long>(id), why.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "[braid WARN rank %d] abort hook %lld (run because %s) raised\n", rank_,
                   static_cast<long long>(id), why.c_str());
    }
    if (python) PyGILState_Release(gil);
  }
}

#if BRAID_TORCH_HAS_ABORT_HOOKS
void ProcessGroupBraid::registerAbortHook(std::int64_t hookId, c10d::AbortHook hook) {
  TORCH_CHECK(hook, "braid: register_abort_hook on rank ", rank_, ": hook ", hookId, " is empty");
  std::lock_guard<std::mutex> lk(abortHooksMu_);
  for (const auto& [id, h] : abortHooks_)
    TORCH_CHECK(id != hookId, "braid: register_abort_hook on rank ", rank_, ": hook id ", hookId,
                " is registered already");
  abortHooks_.emplace_back(hookId, std::make_shared<const std::function<void()>>(std::move(hook)));
  hasAbortHooks_.store(true, std::memory_order_release);
}

void ProcessGroupBraid::unregisterAbortHook(std::int64_t hookId) {
  std::lock_guard<std::mutex> lk(abortHooksMu_);
  const auto it = std::find_if(abortHooks_.begin(), abortHooks_.end(),
                               [&](const auto& h) { return h.first == hookId; });
  TORCH_CHECK(it != abortHooks_.end(), "braid: unregister_abort_hook on rank ", rank_,
              ": no hook with id ", hookId);
  abortHooks_.erase(it);
  hasAbortHooks_.store(!abortHooks_.empty(), std::memory_order_release);
}
#endif

}  // namespace braid_torch
