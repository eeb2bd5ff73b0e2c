// A view of some ranks of a transport as a transport of their own, so an algorithm can run
// another registered algorithm on a sub-group (the ranks of one node, the ranks with the same
// local rank on every node) instead of re-implementing it. Sub-group rank i is parent rank
// members[i]; messages keep the parent's ordering and the operation's tag, so sub-groups that
// run one after the other on the same pairs stay matched.
#pragma once

#include <braid/error.hpp>
#include <string>
#include <utility>
#include <vector>

#include "algo/algorithm.hpp"
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

}  // namespace braid::algo
