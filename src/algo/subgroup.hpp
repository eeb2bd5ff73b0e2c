// A view of some ranks of a transport as a transport of their own, and ViewGroups: the
// algo::Groups of a hierarchy (algo/group.hpp) as such views, each running one fixed registered
// algorithm (ring, binomial tree) on the caller's transport. For callers without a
// communicator, whose sub-communicators the hierarchical algorithms otherwise run on: the
// simulator (src/sim) and tests calling algorithms directly. Sub-group rank i is parent rank
// members[i]; messages keep the parent's ordering and the operation's tag, so sub-groups that
// run one after the other on the same pairs stay matched.
#pragma once

#include <braid/error.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "algo/algorithm.hpp"
#include "algo/group.hpp"
#include "transport/transport.hpp"

namespace braid::algo {

class SubgroupTransport final : public transport::Transport {
 public:
  /// `members` lists parent ranks (distinct, in sub-group rank order) and includes
  /// parent.rank(); throws Error(Internal) otherwise. `parent` must outlive the view.
  SubgroupTransport(transport::Transport& parent, std::vector<int> members)
      : parent_(parent), members_(std::move(members)) {
    for (std::size_t i = 0; i < members_.size(); ++i)
      if (members_[i] == parent.rank()) rank_ = static_cast<int>(i);
    if (rank_ < 0)
      throw Error(ErrorCode::Internal, "rank " + std::to_string(parent.rank()) +
                                           " is not a member of its own sub-group");
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  /// The parent rank of sub-group rank `r`.
  int parentRank(int r) const { return members_.at(static_cast<std::size_t>(r)); }
  const std::vector<int>& members() const noexcept { return members_; }

  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                transport::Request& req) override {
    parent_.postSend(parentRank(peer), data, bytes, tag, req);
  }
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                transport::Request& req) override {
    parent_.postRecv(parentRank(peer), data, bytes, tag, req);
  }
  bool test(transport::Request& req) override { return parent_.test(req); }
  void wait(transport::Request& req, transport::Deadline deadline) override {
    parent_.wait(req, deadline);
  }
  std::string describePeer(int peer) const override {
    return parent_.describePeer(parentRank(peer));
  }
  void abort(const std::string& why) override { parent_.abort(why); }

 private:
  transport::Transport& parent_;
  std::vector<int> members_;
  int rank_ = -1;
};

/// The context for running an algorithm on `view`: the parent's chunking, scratch, deadline
/// and tag, the sub-group's rank and size, and `topo` (the sub-group's topology, or nullptr).
inline Context subgroupContext(const Context& parent, SubgroupTransport& view,
                               const topology::Topology* topo) {
  Context c{view,
            view.rank(),
            view.size(),
            parent.chunkBytes,
            parent.scratch,
            parent.deadline,
            parent.tag,
            parent.deterministic,
            topo};
  c.pieceBytes = parent.pieceBytes;
  return c;
}

void ringAllreduce(Context&, const CollArgs&);
void ringAllgatherv(Context&, const CollArgs&);
void ringReduceScatter(Context&, const CollArgs&);
void ringReduceScatterv(Context&, const CollArgs&);
void binomialTreeBroadcast(Context&, const CollArgs&);
void binomialTreeReduce(Context&, const CollArgs&);

/// The groups of `parent` (which has a topology of several nodes) as views of its transport.
/// Each group runs ring (allreduce, allgatherv, reduce_scatter(v)) or binomial tree
/// (broadcast, reduce) with the parent's chunking, deadline and tag, and the second half of the
/// parent's scratch (the hierarchical algorithms keep the first half for themselves).
class ViewGroups final : public Groups {
 public:
  explicit ViewGroups(const Context& parent) : parent_(parent) {}

  Group& node() override {
    ensure();
    return *node_;
  }
  Group* slice() override {
    ensure();
    return slice_.get();
  }

 private:
  class View final : public Group {
   public:
    View(const Context& parent, std::vector<int> members)
        : tr_(parent.tr, std::move(members)), ctx_(subgroupContext(parent, tr_, nullptr)) {
      ctx_.scratch = parent.scratch.subspan(parent.scratch.size() / 2);
    }
    int rank() const noexcept override { return tr_.rank(); }
    int size() const noexcept override { return tr_.size(); }
    transport::Transport& transport() override { return tr_; }
    void run(const CollArgs& a) override {
      switch (a.coll) {
        case Collective::Allreduce:
          return ringAllreduce(ctx_, a);
        case Collective::Allgatherv:
          return ringAllgatherv(ctx_, a);
        case Collective::ReduceScatter:
          return ringReduceScatter(ctx_, a);
        case Collective::ReduceScatterv:
          return ringReduceScatterv(ctx_, a);
        case Collective::Broadcast:
          return binomialTreeBroadcast(ctx_, a);
        case Collective::Reduce:
          return binomialTreeReduce(ctx_, a);
        default:
          throw Error(ErrorCode::Internal,
                      std::string("a sub-group view cannot run ") + toString(a.coll));
      }
    }

   private:
    SubgroupTransport tr_;
    Context ctx_;
  };

  void ensure() {
    if (node_) return;
    const topology::Topology& topo = *parent_.topo;
    const int local = topo.localRank(parent_.rank);
    node_ = std::make_unique<View>(parent_, topo.node(topo.nodeOf(parent_.rank)).ranks);
    std::vector<int> sliceRanks;
    for (const topology::Node& n : topo.nodes()) {
      if (static_cast<int>(n.ranks.size()) <= local) return;
      sliceRanks.push_back(n.ranks[static_cast<std::size_t>(local)]);
    }
    slice_ = std::make_unique<View>(parent_, std::move(sliceRanks));
  }

  const Context& parent_;
  std::unique_ptr<View> node_;
  std::unique_ptr<View> slice_;
};

}  // namespace braid::algo
