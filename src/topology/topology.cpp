#include "topology/topology.hpp"

#include <algorithm>
#include <braid/error.hpp>
#include <unordered_map>

namespace braid::topology {

const char* toString(LinkClass c) noexcept {
  switch (c) {
    case LinkClass::Self:
      return "self";
    case LinkClass::Shm:
      return "shm";
    case LinkClass::Network:
      return "network";
  }
  return "?";
}

Topology buildTopology(std::vector<PeerInfo> peers) {
  Topology t;
  const auto n = peers.size();
  t.nodeOf_.assign(n, -1);
  t.localRank_.assign(n, -1);
  std::unordered_map<std::string, int> byHost;
  for (std::size_t r = 0; r < n; ++r) {
    const PeerInfo& p = peers[r];
    if (p.hostId.empty())
      throw Error(ErrorCode::InvalidArgument,
                  "topology: rank " + std::to_string(r) + " has an empty host id");
    auto [it, fresh] = byHost.emplace(p.hostId, static_cast<int>(t.nodes_.size()));
    if (fresh) t.nodes_.push_back(Node{p.hostId, p.hostname, {}});
    Node& node = t.nodes_[static_cast<std::size_t>(it->second)];
    t.nodeOf_[r] = it->second;
    t.localRank_[r] = static_cast<int>(node.ranks.size());
    node.ranks.push_back(static_cast<int>(r));
  }
  t.peers_ = std::move(peers);
  return t;
}

bool Topology::uniform() const noexcept {
  for (const Node& n : nodes_)
    if (n.ranks.size() != nodes_.front().ranks.size()) return false;
  return true;
}

int Topology::maxLocalSize() const noexcept {
  std::size_t m = 0;
  for (const Node& n : nodes_) m = std::max(m, n.ranks.size());
  return static_cast<int>(m);
}

LinkClass Topology::link(int from, int to) const {
  if (from == to) return LinkClass::Self;
  return nodeOf(from) == nodeOf(to) ? LinkClass::Shm : LinkClass::Network;
}

Topology Topology::subset(std::span<const int> members) const {
  std::vector<PeerInfo> peers;
  std::vector<char> seen(peers_.size(), 0);
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int r = members[i];
    if (r < 0 || r >= size())
      throw Error(ErrorCode::InvalidArgument,
                  "topology subset: member " + std::to_string(i) + " = rank " + std::to_string(r) +
                      " is outside [0, " + std::to_string(size()) + ")");
    if (seen[static_cast<std::size_t>(r)] != 0)
      throw Error(ErrorCode::InvalidArgument,
                  "topology subset: rank " + std::to_string(r) + " is listed twice");
    seen[static_cast<std::size_t>(r)] = 1;
    peers.push_back(peers_[static_cast<std::size_t>(r)]);
  }
  return buildTopology(std::move(peers));
}

std::string Topology::summary() const {
  const std::string nodes = std::to_string(numNodes()) + (numNodes() == 1 ? " node" : " nodes");
  if (nodes_.empty()) return "0 nodes";
  if (uniform())
    return nodes + " x " + std::to_string(nodes_.front().ranks.size()) + " ranks (" +
           std::to_string(size()) + " ranks)";
  std::size_t lo = nodes_.front().ranks.size();
  for (const Node& n : nodes_) lo = std::min(lo, n.ranks.size());
  return nodes + ", " + std::to_string(lo) + "-" + std::to_string(maxLocalSize()) +
         " ranks per node (" + std::to_string(size()) + " ranks)";
}

Topology uniformTopology(int nodes, int ranksPerNode, bool cyclic) {
  if (nodes < 1 || ranksPerNode < 1)
    throw Error(ErrorCode::InvalidArgument,
                "uniformTopology: nodes (" + std::to_string(nodes) + ") and ranksPerNode (" +
                    std::to_string(ranksPerNode) + ") must be positive");
  const int size = nodes * ranksPerNode;
  std::vector<PeerInfo> peers(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    const int node = cyclic ? r % nodes : r / ranksPerNode;
    PeerInfo& p = peers[static_cast<std::size_t>(r)];
    p.hostname = "node" + std::to_string(node);
    p.hostId = p.hostname;
  }
  return buildTopology(std::move(peers));
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::vector<int> s = cpus;
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t j = i;
    while (j + 1 < s.size() && s[j + 1] == s[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(s[i]);
    if (j > i) out += "-" + std::to_string(s[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace braid::topology
