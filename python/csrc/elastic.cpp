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
#include <Python.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <braid/error.hpp>
#include <string>

#include "process_group.hpp"

namespace braid_torch {

namespace {

std::string listText(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// Releases the GIL for the scope when this thread holds it (the agreement waits for the other
/// ranks; torch's pybind binding of Backend.shrink may call in with the GIL held).
class NoGil {
 public:
  NoGil() : saved_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~NoGil() {
    if (saved_) PyEval_RestoreThread(saved_);
  }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  PyThreadState* saved_;
};

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
  comm_->revoke();
  p2p_->comm().revoke();
}

std::vector<int> ProcessGroupBraid::agreeShrink() {
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

}  // namespace braid_torch
