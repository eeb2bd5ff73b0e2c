// Hierarchies on real sub-communicators (docs/architecture.md, "Hierarchies"): the node
// sub-communicator (the ranks of this rank's node) and the cross-node one (local rank l of every
// node), built by the first collective that selects a hierarchical row, then kept. Every phase a
// hierarchical algorithm runs on them is an operation of that sub-communicator: its own
// selection (shm_ll / shm_direct inside a host), tag, flight recorder and timeout. They share the
// parent's TCP connections on their own lanes (no socket is opened); the node one brings its own
// shared-memory segments.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "core/comm_impl.hpp"

namespace braid::core {
namespace {

/// One phase kind a group ran: a collective and its row, or point-to-point messages (coll
/// Send, name "point-to-point").
struct Ran {
  int group = 0;  // 0 node, 1 slice
  Collective coll = Collective::Barrier;
  const char* name = nullptr;  // static storage: the registry's names, a literal
  bool operator==(const Ran&) const = default;
};

class ChildGroup final : public algo::Group {
 public:
  ChildGroup(std::unique_ptr<Comm::Impl> impl, int group) : impl_(std::move(impl)), group_(group) {
    ran_.reserve(4);
  }

  int rank() const noexcept override { return impl_->rank; }
  int size() const noexcept override { return impl_->size; }

  void run(const algo::CollArgs& a) override {
    impl_->runBlocking(impl_->internalOp(a));
    const algo::AlgoInfo* row = impl_->selectionMemo[static_cast<std::size_t>(a.coll)].algorithm;
    note({group_, a.coll, row != nullptr ? row->name : "?"});
  }

  transport::Transport& transport() override {
    note({group_, Collective::Send, "point-to-point"});
    return *impl_->transport;
  }

  Comm::Impl& impl() noexcept { return *impl_; }

  /// Appends what ran since the last call, in first-run order, and forgets it.
  void drain(std::vector<Ran>& out) {
    out.insert(out.end(), ran_.begin(), ran_.end());
    ran_.clear();
  }

 private:
  void note(const Ran& r) {  // a few entries, compared by pointer: no allocation once warm
    for (const Ran& x : ran_)
      if (x == r) return;
    ran_.push_back(r);
  }

  std::unique_ptr<Comm::Impl> impl_;
  int group_;
  std::vector<Ran> ran_;
};

class Hierarchy final : public CommGroups {
 public:
  explicit Hierarchy(Comm::Impl& parent) : parent_(parent) {}

  algo::Group& node() override {
    ensure();
    return *node_;
  }
  algo::Group* slice() override {
    ensure();
    return slice_.get();
  }

  const char* takePhases(std::deque<std::string>& names) override {
    std::lock_guard<std::mutex> lk(mu_);
    key_.clear();
    if (node_) node_->drain(key_);
    if (slice_) slice_->drain(key_);
    if (key_.empty()) return nullptr;
    if (last_ != nullptr && key_ == lastKey_) return last_;  // the common case: as last time
    std::string text = "hierarchical(";
    for (std::size_t i = 0; i < key_.size(); ++i) {
      const bool first = i == 0 || key_[i - 1].group != key_[i].group;
      if (first && i > 0) text += "; ";
      if (first) text += key_[i].group == 0 ? "node: " : "leaders: ";
      if (!first) text += ", ";
      if (key_[i].coll != Collective::Send) text += std::string(toString(key_[i].coll)) + " ";
      text += key_[i].name;
    }
    text += ")";
    auto at = std::find(names.begin(), names.end(), text);
    if (at == names.end()) at = names.insert(names.end(), std::move(text));
    lastKey_ = key_;
    last_ = at->c_str();
    return last_;
  }

  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lk(mu_);
    for (ChildGroup* g : {node_.get(), slice_.get()}) {
      if (g == nullptr) continue;
      g->impl().aborted.store(true, std::memory_order_release);
      g->impl().transport->abort(why);
    }
  }

 private:
  // Every rank builds its node's communicator first, then its slice's, whatever the first
  // hierarchical collective is: the members of each meet in the same order.
  void ensure() {
    if (built_) return;
    const auto start = std::chrono::steady_clock::now();
    const topology::Topology& topo = parent_.topo;
    const int node = topo.nodeOf(parent_.rank);
    const auto local = static_cast<std::size_t>(topo.localRank(parent_.rank));
    auto nodeImpl =
        parent_.makeChild(topo.node(node).ranks, parent_.id + "/hn" + std::to_string(node));
    std::vector<int> sliceRanks;
    for (const topology::Node& n : topo.nodes()) {
      if (n.ranks.size() <= local) {
        sliceRanks.clear();
        break;
      }
      sliceRanks.push_back(n.ranks[local]);
    }
    std::unique_ptr<Comm::Impl> sliceImpl;
    if (!sliceRanks.empty())
      sliceImpl = parent_.makeChild(sliceRanks, parent_.id + "/hl" + std::to_string(local));
    char ms[32];
    std::snprintf(
        ms, sizeof ms, "%.1f",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    parent_.log(2,
                "hierarchy: node sub-communicator " + nodeImpl->id + " (" +
                    std::to_string(nodeImpl->size) + " ranks" +
                    (nodeImpl->transport->sharedGroup() != nullptr ? ", shared memory" : "") +
                    "), cross-node " +
                    (sliceImpl ? sliceImpl->id + " (" + std::to_string(sliceImpl->size) + " ranks)"
                               : std::string("none (local rank beyond the smallest node)")) +
                    ", built in " + std::string(ms) + " ms");
    {
      std::lock_guard<std::mutex> lk(mu_);
      node_ = std::make_unique<ChildGroup>(std::move(nodeImpl), 0);
      if (sliceImpl) slice_ = std::make_unique<ChildGroup>(std::move(sliceImpl), 1);
      built_ = true;
    }
    // An abort of the parent while they were built did not reach them.
    if (parent_.aborted.load(std::memory_order_acquire))
      abort("communicator " + parent_.id + " was aborted on rank " + std::to_string(parent_.rank));
  }

  Comm::Impl& parent_;
  std::mutex mu_;  // node_ / slice_ against abort() from another thread
  bool built_ = false;
  std::unique_ptr<ChildGroup> node_;
  std::unique_ptr<ChildGroup> slice_;
  std::vector<Ran> key_, lastKey_;  // takePhases: what ran, and what ran the time before
  const char* last_ = nullptr;      // ... and its text (in the caller's names)
};

}  // namespace

std::unique_ptr<CommGroups> makeCommGroups(Comm::Impl& parent) {
  return std::make_unique<Hierarchy>(parent);
}

}  // namespace braid::core
