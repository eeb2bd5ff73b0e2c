#include "core/topology_setup.hpp"

#include <braid/error.hpp>
#include <vector>

#include "store/all_gather.hpp"
#include "topology/json.hpp"
#include "topology/topology_json.hpp"

namespace braid::core {

namespace {

topology::Topology gather(Store& store, int rank, int size, std::span<const int> nodeOf,
                          std::chrono::milliseconds timeout) {
  const std::vector<std::string> texts =
      gatherByNode(store, "topo", rank, size, nodeOf,
                   topology::json::write(topology::peerToJson(topology::localPeerInfo())), timeout,
                   "their topology information");
  std::vector<topology::PeerInfo> peers;
  peers.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::string where = "rank " + std::to_string(r) + "'s topology information";
    peers.push_back(topology::peerFromJson(
        topology::json::parse(texts[static_cast<std::size_t>(r)], where), where));
  }
  return topology::buildTopology(std::move(peers));
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

topology::Topology setupTopology(Store& commStore, int rank, int size, const Options& opts,
                                 const topology::Topology* parent, std::span<const int> members,
                                 std::span<const int> nodeOf) {
  if (parent != nullptr) return parent->subset(members);
  topology::Topology t;
  if (!opts.topoFile.empty()) {
    t = topology::loadTopologyFile(opts.topoFile);
    if (t.size() != size)
      throw Error(ErrorCode::InvalidArgument,
                  "BRAID_TOPO_FILE='" + opts.topoFile + "' describes " + std::to_string(t.size()) +
                      " ranks but the communicator on rank " + std::to_string(rank) + " has " +
                      std::to_string(size));
  } else if (size == 1) {
    t = topology::buildTopology({topology::localPeerInfo()});
  } else {
    t = gather(commStore, rank, size, nodeOf, opts.connectTimeout);
  }
  if (!opts.topoDump.empty() && rank == 0) topology::dumpTopologyFile(t, opts.topoDump);
  return t;
}

std::string describeTopology(const topology::Topology& t, int rank) {
  const topology::PeerInfo& me = t.peer(rank);
  const int node = t.nodeOf(rank);
  std::string s = "topology " + t.summary() + "; this rank: node " + std::to_string(node) + " (" +
                  t.node(node).hostname + "), local rank " + std::to_string(t.localRank(rank)) +
                  " of " + std::to_string(t.localSize(rank)) + ", leader " +
                  std::to_string(t.node(node).leader()) + ", numa " +
                  (me.numaNode >= 0 ? std::to_string(me.numaNode) : std::string("?")) + ", cpus " +
                  (me.cpus.empty() ? std::string("?") : me.cpus) + ", netns " +
                  (me.netns.empty() ? std::string("?") : me.netns) + ", interfaces";
  if (me.interfaces.empty()) s += " ?";
  for (const auto& i : me.interfaces) {
    s += " " + i.name + "[";
    for (std::size_t k = 0; k < i.addresses.size(); ++k) s += (k ? " " : "") + i.addresses[k];
    s += "]";
  }
  s += "; nodes:";
  constexpr int kShown = 8;
  for (int n = 0; n < t.numNodes() && n < kShown; ++n)
    s += " " + t.node(n).hostname + "[" + rankList(t.node(n).ranks) + "]";
  if (t.numNodes() > kShown) s += " ... (" + std::to_string(t.numNodes() - kShown) + " more)";
  return s;
}

}  // namespace braid::core
