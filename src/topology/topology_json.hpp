// The topology as JSON: written by BRAID_TOPO_DUMP=FILE, read by BRAID_TOPO_FILE=FILE, and the
// form in which each rank publishes its PeerInfo through the store at bootstrap.
//
//   {
//     "version": 1,
//     "size": 4,
//     "nodes": [ {"host": "a", "host_id": "...", "leader": 0, "ranks": [0, 1]}, ... ],
//     "ranks": [ {"rank": 0, "node": 0, "local_rank": 0, "hostname": "a", "host_id": "...",
//                 "netns": "4026531840", "numa_node": 0, "cpus": "0-1",
//                 "interfaces": [{"name": "lo", "addresses": ["127.0.0.1/8"]}]}, ... ]
//   }
//
// A fabricated topology may leave out "ranks": then "nodes" alone defines it, each node with a
// "host" (its identity unless "host_id" is given) and its "ranks", which must cover 0..size-1
// exactly once. When both are present, "nodes" must agree with the grouping "ranks" implies.
// "node", "local_rank" and "leader" are derived and, when present, must be right.
#pragma once

#include <string>
#include <string_view>

#include "topology/json.hpp"
#include "topology/topology.hpp"

namespace braid::topology {

json::Value peerToJson(const PeerInfo& p);
/// Throws Error(InvalidArgument) "SOURCE:LINE:COLUMN: ..." for a malformed entry.
PeerInfo peerFromJson(const json::Value& v, std::string_view source);

std::string toJson(const Topology& t);
/// Throws Error(InvalidArgument) naming `source` with line and column.
Topology fromJson(std::string_view text, std::string_view source);

/// fromJson of the file's contents (the file name is the source of errors).
Topology loadTopologyFile(const std::string& path);
/// Writes toJson(t) to `path` atomically (temporary file, then rename).
void dumpTopologyFile(const Topology& t, const std::string& path);

}  // namespace braid::topology
