#include "core/topology_setup.hpp"

#include <braid/error.hpp>
#include <vector>

#include "topology/json.hpp"
#include "topology/topology_json.hpp"

namespace braid::core {

namespace {

std::string topoKey(int rank) {
  return "topo/" + std::to_string(rank);
}

topology::Topology gather(Store& store, int rank, int size, std::chrono::milliseconds timeout) {
  store.setString(topoKey(rank),
                  topology::json::write(topology::peerToJson(topology::localPeerInfo())));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(topoKey(r));
  try {
    store.wait(keys, timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({keys[static_cast<std::size_t>(r)]}))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank) + " timed out after " +
                                        std::to_string(timeout.count()) + " ms waiting for ranks " +
                                        missing + " to publish their topology information");
  }
  std::vector<topology::PeerInfo> peers;
  peers.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::string& key = keys[static_cast<std::size_t>(r)];
    const std::string text = store.getString(key, timeout);
    peers.push_back(topology::peerFromJson(topology::json::parse(text, "store key " + key),
                                           "store key " + key));
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
                                 const topology::Topology* parent, std::span<const int> members) {
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
    t = gather(commStore, rank, size, opts.connectTimeout);
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
