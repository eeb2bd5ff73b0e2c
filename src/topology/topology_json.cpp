#include "topology/topology_json.hpp"

#include <braid/error.hpp>
#include <cmath>

namespace braid::topology {

namespace {

constexpr int kVersion = 1;
constexpr double kMaxRanks = 1 << 24;

using json::Value;

[[noreturn]] void fail(std::string_view source, const Value& at, const std::string& what) {
  throw Error(ErrorCode::InvalidArgument, std::string(source) + ":" + std::to_string(at.line) +
                                              ":" + std::to_string(at.column) + ": " + what);
}

const char* kindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::Null:
      return "null";
    case Value::Kind::Bool:
      return "a boolean";
    case Value::Kind::Number:
      return "a number";
    case Value::Kind::String:
      return "a string";
    case Value::Kind::Array:
      return "an array";
    case Value::Kind::Object:
      return "an object";
  }
  return "?";
}

void expectKind(std::string_view source, const Value& v, Value::Kind k, std::string_view what) {
  if (v.kind() != k)
    fail(source, v, std::string(what) + " must be " + kindName(k) + ", not " + kindName(v.kind()));
}

/// Member `key` of object `obj`, of kind `k`; nullptr when absent and not required.
const Value* member(std::string_view source, const Value& obj, std::string_view key, Value::Kind k,
                    bool required) {
  const Value* v = obj.find(key);
  if (v == nullptr) {
    if (required) fail(source, obj, "missing member \"" + std::string(key) + "\"");
    return nullptr;
  }
  expectKind(source, *v, k, "\"" + std::string(key) + "\"");
  return v;
}

int integer(std::string_view source, const Value& v, std::string_view what, double lo, double hi) {
  expectKind(source, v, Value::Kind::Number, what);
  const double d = v.asNumber();
  if (std::floor(d) != d || d < lo || d > hi)
    fail(source, v,
         std::string(what) + " must be an integer in [" + std::to_string(static_cast<long>(lo)) +
             ", " + std::to_string(static_cast<long>(hi)) + "]");
  return static_cast<int>(d);
}

std::string stringOr(std::string_view source, const Value& obj, std::string_view key,
                     std::string def) {
  const Value* v = member(source, obj, key, Value::Kind::String, false);
  return v != nullptr ? v->asString() : std::move(def);
}

Value intArray(const std::vector<int>& xs) {
  Value a = Value::array();
  for (int x : xs) a.push(Value::number(x));
  return a;
}

}  // namespace

json::Value peerToJson(const PeerInfo& p) {
  Value v = Value::object();
  v.set("hostname", Value::string(p.hostname));
  v.set("host_id", Value::string(p.hostId));
  v.set("netns", Value::string(p.netns));
  v.set("numa_node", Value::number(p.numaNode));
  v.set("cpus", Value::string(p.cpus));
  Value itfs = Value::array();
  for (const Interface& i : p.interfaces) {
    Value o = Value::object();
    o.set("name", Value::string(i.name));
    Value addrs = Value::array();
    for (const auto& a : i.addresses) addrs.push(Value::string(a));
    o.set("addresses", std::move(addrs));
    itfs.push(std::move(o));
  }
  v.set("interfaces", std::move(itfs));
  return v;
}

PeerInfo peerFromJson(const json::Value& v, std::string_view source) {
  expectKind(source, v, Value::Kind::Object, "a rank entry");
  PeerInfo p;
  p.hostId = member(source, v, "host_id", Value::Kind::String, true)->asString();
  if (p.hostId.empty()) fail(source, v, "\"host_id\" must not be empty");
  p.hostname = stringOr(source, v, "hostname", p.hostId);
  p.netns = stringOr(source, v, "netns", "");
  p.cpus = stringOr(source, v, "cpus", "");
  if (const Value* n = v.find("numa_node"))
    p.numaNode = integer(source, *n, "\"numa_node\"", -1, 4095);
  if (const Value* itfs = member(source, v, "interfaces", Value::Kind::Array, false)) {
    for (const Value& i : itfs->items()) {
      expectKind(source, i, Value::Kind::Object, "an interface");
      Interface itf;
      itf.name = member(source, i, "name", Value::Kind::String, true)->asString();
      if (const Value* addrs = member(source, i, "addresses", Value::Kind::Array, false)) {
        for (const Value& a : addrs->items()) {
          expectKind(source, a, Value::Kind::String, "an address");
          itf.addresses.push_back(a.asString());
        }
      }
      p.interfaces.push_back(std::move(itf));
    }
  }
  return p;
}

std::string toJson(const Topology& t) {
  Value root = Value::object();
  root.set("version", Value::number(kVersion));
  root.set("size", Value::number(t.size()));
  Value nodes = Value::array();
  for (const Node& n : t.nodes()) {
    Value o = Value::object();
    o.set("host", Value::string(n.hostname));
    o.set("host_id", Value::string(n.hostId));
    o.set("leader", Value::number(n.leader()));
    o.set("ranks", intArray(n.ranks));
    nodes.push(std::move(o));
  }
  root.set("nodes", std::move(nodes));
  Value ranks = Value::array();
  for (int r = 0; r < t.size(); ++r) {
    Value o = Value::object();
    o.set("rank", Value::number(r));
    o.set("node", Value::number(t.nodeOf(r)));
    o.set("local_rank", Value::number(t.localRank(r)));
    const Value peer = peerToJson(t.peer(r));
    for (const auto& [k, v] : peer.members()) o.set(k, v);
    ranks.push(std::move(o));
  }
  root.set("ranks", std::move(ranks));
  return json::write(root);
}

Topology fromJson(std::string_view text, std::string_view source) {
  const Value root = json::parse(text, source);
  expectKind(source, root, Value::Kind::Object, "the document");
  if (const Value* ver = root.find("version")) {
    if (integer(source, *ver, "\"version\"", 0, 1 << 20) != kVersion)
      fail(source, *ver,
           "unsupported version (this braid reads version " + std::to_string(kVersion) + ")");
  }
  const Value* sizeV = root.find("size");
  const int declared = sizeV != nullptr ? integer(source, *sizeV, "\"size\"", 1, kMaxRanks) : -1;
  const Value* ranksV = member(source, root, "ranks", Value::Kind::Array, false);
  const Value* nodesV = member(source, root, "nodes", Value::Kind::Array, ranksV == nullptr);

  std::vector<PeerInfo> peers;
  if (ranksV != nullptr) {
    if (ranksV->items().size() > static_cast<std::size_t>(kMaxRanks))
      fail(source, *ranksV, "too many ranks");
    for (std::size_t i = 0; i < ranksV->items().size(); ++i) {
      const Value& e = ranksV->items()[i];
      peers.push_back(peerFromJson(e, source));
      if (const Value* r = e.find("rank")) {
        if (integer(source, *r, "\"rank\"", 0, kMaxRanks) != static_cast<int>(i))
          fail(source, *r, "\"rank\" must be " + std::to_string(i) + " (entries in rank order)");
      }
    }
  } else {
    int total = 0;
    for (const Value& n : nodesV->items()) {
      expectKind(source, n, Value::Kind::Object, "a node");
      total +=
          static_cast<int>(member(source, n, "ranks", Value::Kind::Array, true)->items().size());
      if (total > kMaxRanks) fail(source, n, "too many ranks");
    }
    peers.resize(static_cast<std::size_t>(total));
    std::vector<char> seen(peers.size(), 0);
    for (const Value& n : nodesV->items()) {
      const std::string host = member(source, n, "host", Value::Kind::String, true)->asString();
      if (host.empty()) fail(source, n, "\"host\" must not be empty");
      const std::string hostId = stringOr(source, n, "host_id", host);
      for (const Value& r : n.find("ranks")->items()) {
        const int rank = integer(source, r, "a rank", 0, total - 1);
        if (seen[static_cast<std::size_t>(rank)] != 0)
          fail(source, r, "rank " + std::to_string(rank) + " appears twice");
        seen[static_cast<std::size_t>(rank)] = 1;
        PeerInfo& p = peers[static_cast<std::size_t>(rank)];
        p.hostname = host;
        p.hostId = hostId;
      }
    }
  }
  if (peers.empty()) fail(source, root, "the topology has no ranks");
  if (declared >= 0 && declared != static_cast<int>(peers.size()))
    fail(source, *sizeV,
         "\"size\" is " + std::to_string(declared) + " but " + std::to_string(peers.size()) +
             " ranks are listed");
  Topology t = buildTopology(std::move(peers));

  // Derived fields must agree with what the grouping implies.
  if (ranksV != nullptr) {
    for (int r = 0; r < t.size(); ++r) {
      const Value& e = ranksV->items()[static_cast<std::size_t>(r)];
      if (const Value* n = e.find("node");
          n != nullptr && integer(source, *n, "\"node\"", 0, kMaxRanks) != t.nodeOf(r))
        fail(source, *n,
             "rank " + std::to_string(r) + " is on node " + std::to_string(t.nodeOf(r)) +
                 " (nodes are numbered by lowest rank)");
      if (const Value* l = e.find("local_rank");
          l != nullptr && integer(source, *l, "\"local_rank\"", 0, kMaxRanks) != t.localRank(r))
        fail(source, *l,
             "rank " + std::to_string(r) + " has local rank " + std::to_string(t.localRank(r)));
    }
  }
  if (nodesV != nullptr) {
    if (nodesV->items().size() != static_cast<std::size_t>(t.numNodes()))
      fail(source, *nodesV,
           "lists " + std::to_string(nodesV->items().size()) + " nodes but the ranks are on " +
               std::to_string(t.numNodes()));
    for (int i = 0; i < t.numNodes(); ++i) {
      const Value& n = nodesV->items()[static_cast<std::size_t>(i)];
      expectKind(source, n, Value::Kind::Object, "a node");
      const Value* rs = member(source, n, "ranks", Value::Kind::Array, true);
      std::vector<int> listed;
      for (const Value& r : rs->items())
        listed.push_back(integer(source, r, "a rank", 0, kMaxRanks));
      if (listed != t.node(i).ranks)
        fail(source, *rs,
             "node " + std::to_string(i) +
                 " must list the ranks of its host in ascending order, and nodes "
                 "must be ordered by their lowest rank");
      if (const Value* l = n.find("leader");
          l != nullptr && integer(source, *l, "\"leader\"", 0, kMaxRanks) != t.node(i).leader())
        fail(source, *l,
             "the leader of node " + std::to_string(i) + " is its lowest rank " +
                 std::to_string(t.node(i).leader()));
    }
  }
  return t;
}

Topology loadTopologyFile(const std::string& path) {
  return fromJson(json::readFile(path), path);
}

void dumpTopologyFile(const Topology& t, const std::string& path) {
  json::writeFile(path, toJson(t));
}

}  // namespace braid::topology
