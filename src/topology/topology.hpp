// Who runs where: what each rank publishes about itself at bootstrap (PeerInfo) and the pure
// function that turns the gathered PeerInfo of every rank into nodes, local ranks, node leaders
// and the class of the link between any two ranks. Algorithms see the result as data
// (algo::Context::topo); it never names a transport.
//
// A node is a set of ranks with equal hostId (transport/host_identity.hpp: hostname, boot id,
// network and pid namespaces), i.e. ranks that can share memory. Nodes are numbered in the
// order of their lowest rank; inside a node, local ranks follow global rank order, and the
// leader is local rank 0. The same structure can be loaded from a JSON file (topology_json.hpp),
// so layouts that cannot run here (64 hosts x 8 ranks) can be planned and tested.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid::topology {

/// What carries bytes between two ranks.
enum class LinkClass : std::uint8_t {
  Self = 0,     // the rank itself: a local copy
  Shm = 1,      // another rank of the same host: shared memory
  Network = 2,  // a rank of another host (or network namespace): the network
};
inline constexpr int kLinkClasses = 3;
const char* toString(LinkClass c) noexcept;

struct Interface {
  std::string name;                    // "eth0"
  std::vector<std::string> addresses;  // "10.0.0.2/24", "fe80::1/64"
  friend bool operator==(const Interface&, const Interface&) = default;
};

/// What one rank publishes about itself. Only hostId decides the grouping; the rest is
/// reported (logs, dumps) and for later use (NUMA-aware placement, interface selection).
struct PeerInfo {
  std::string hostname;
  std::string hostId;  // equal for ranks that share memory (transport::hostIdentity())
  std::string netns;   // network namespace inode ("4026531840"), "" when unknown
  int numaNode = -1;   // NUMA node of the CPUs this rank may run on, -1 when unknown or mixed
  std::string cpus;    // CPU list this rank may run on, Linux list syntax ("0-3,8")
  std::vector<Interface> interfaces;  // up, with addresses; loopback included
  friend bool operator==(const PeerInfo&, const PeerInfo&) = default;
};

struct Node {
  std::string hostId;
  std::string hostname;
  std::vector<int> ranks;  // ascending; ranks[0] is the leader
  int leader() const noexcept { return ranks.front(); }
};

class Topology {
 public:
  /// An empty topology (size 0). Use buildTopology.
  Topology() = default;

  int size() const noexcept { return static_cast<int>(peers_.size()); }
  int numNodes() const noexcept { return static_cast<int>(nodes_.size()); }
  const std::vector<Node>& nodes() const noexcept { return nodes_; }
  const Node& node(int n) const { return nodes_.at(static_cast<std::size_t>(n)); }
  const PeerInfo& peer(int rank) const { return peers_.at(static_cast<std::size_t>(rank)); }

  int nodeOf(int rank) const { return nodeOf_.at(static_cast<std::size_t>(rank)); }
  /// Index of `rank` among the ranks of its node.
  int localRank(int rank) const { return localRank_.at(static_cast<std::size_t>(rank)); }
  /// Number of ranks on `rank`'s node.
  int localSize(int rank) const { return static_cast<int>(node(nodeOf(rank)).ranks.size()); }
  bool isLeader(int rank) const { return localRank(rank) == 0; }
  /// Every node holds the same number of ranks.
  bool uniform() const noexcept;
  /// The largest number of ranks on one node.
  int maxLocalSize() const noexcept;

  LinkClass link(int from, int to) const;

  /// The topology of the sub-communicator made of `members` (ranks of this topology, new rank
  /// i = members[i]). Throws Error(InvalidArgument) for a rank outside or listed twice.
  Topology subset(std::span<const int> members) const;

  /// "2 nodes x 4 ranks (uniform)" or "3 nodes, 1-4 ranks per node".
  std::string summary() const;

  friend Topology buildTopology(std::vector<PeerInfo> peers);

 private:
  std::vector<PeerInfo> peers_;
  std::vector<Node> nodes_;
  std::vector<int> nodeOf_;
  std::vector<int> localRank_;
};

/// The pure function from the PeerInfo of every rank (index = rank) to the topology.
/// Throws Error(InvalidArgument) for a PeerInfo with an empty hostId.
Topology buildTopology(std::vector<PeerInfo> peers);

/// A fabricated topology: `nodes` hosts named "node<i>" with `ranksPerNode` ranks each, ranks
/// numbered node by node (blocked: 0..L-1 on node 0) or round-robin over the nodes (cyclic:
/// rank r on node r % nodes). For tests and planning.
Topology uniformTopology(int nodes, int ranksPerNode, bool cyclic = false);

/// This process's PeerInfo, read from the system (hostname, /proc, /sys, getifaddrs,
/// sched_getaffinity). `hostId` overrides transport::hostIdentity() when not empty. Parts that
/// cannot be read are left empty / -1.
PeerInfo localPeerInfo(std::string_view hostId = {});

/// "0-3,8" for {0,1,2,3,8}.
std::string formatCpuList(const std::vector<int>& cpus);

}  // namespace braid::topology
