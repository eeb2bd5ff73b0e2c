// Hierarchies on real sub-communicators (docs/architecture.md, "Hierarchies"): the node
// sub-communicator (the ranks of this rank's node) and the cross-node one (local rank l of every
// node), built by the first collective that selects a hierarchical row, then kept. Every phase a
// hierarchical algorithm runs on them is an operation of that sub-communicator: its own
// selection (shm_ll / shm_direct inside a host), tag, flight recorder and timeout. They share the
// parent's TCP connections on their own lanes (no socket is opened); the node one brings its own
// shared-memory segments.
#include <chrono>
#include <cstdio>
#include <mutex>

#include "core/comm_impl.hpp"

namespace braid::core {
namespace {

class ChildGroup final : public algo::Group {
 public:
  explicit ChildGroup(std::unique_ptr<Comm::Impl> impl) : impl_(std::move(impl)) {}

  int rank() const noexcept override { return impl_->rank; }
  int size() const noexcept override { return impl_->size; }

  void run(const algo::CollArgs& a) override {
    impl_->runBlocking(impl_->internalOp(a));
    const algo::AlgoInfo* ran = impl_->selectionMemo[static_cast<std::size_t>(a.coll)].algorithm;
    note(std::string(toString(a.coll)) + " " + (ran != nullptr ? ran->name : "?"));
  }

  transport::Transport& transport() override {
    note("point-to-point");
    return *impl_->transport;
  }

  Comm::Impl& impl() noexcept { return *impl_; }

  /// The distinct phases run since the last call, in first-run order, ", "-joined.
  std::string takeNotes() {
    std::string out;
    for (const std::string& n : notes_) out += (out.empty() ? "" : ", ") + n;
    notes_.clear();
    return out;
  }

 private:
  void note(std::string what) {
    if (impl_->opts.logLevel < 2) return;  // only BRAID_DEBUG=INFO reports them
    for (const std::string& n : notes_)
      if (n == what) return;
    notes_.push_back(std::move(what));
  }

  std::unique_ptr<Comm::Impl> impl_;
  std::vector<std::string> notes_;
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

  std::string takePhases() override {
    std::lock_guard<std::mutex> lk(mu_);
    std::string out;
    if (node_) {
      const std::string n = node_->takeNotes();
      if (!n.empty()) out += "node: " + n;
    }
    if (slice_) {
      const std::string s = slice_->takeNotes();
      if (!s.empty()) out += (out.empty() ? "" : "; ") + std::string("leaders: ") + s;
    }
    return out;
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
      node_ = std::make_unique<ChildGroup>(std::move(nodeImpl));
      if (sliceImpl) slice_ = std::make_unique<ChildGroup>(std::move(sliceImpl));
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
};

}  // namespace

std::unique_ptr<CommGroups> makeCommGroups(Comm::Impl& parent) {
  return std::make_unique<Hierarchy>(parent);
}

}  // namespace braid::core
