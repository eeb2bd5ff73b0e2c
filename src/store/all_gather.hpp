// The store-level all-gather that bootstrap steps (host identities, topology) share: every rank
// contributes one value and gets everyone's, gathered by node so that no rank reads every
// other rank's key (docs/architecture.md, "Bootstrap").
#pragma once

#include <braid/store.hpp>
#include <chrono>
#include <span>
#include <string>
#include <vector>

namespace braid {

/// Gathers one value per rank, in rank order, by node. `nodeOf[r]` names rank r's node (any
/// ints, equal for ranks of one node; empty: all ranks on one node, so rank 0 gathers alone).
/// A node's leader is its lowest rank; rank 0 is the leader of the leaders. Keys, under
/// `prefix`: r/<rank> (a non-leader's value), n/<leader> (a node's values, one blob), all (the
/// whole table, one blob). Requests to the store, per rank:
///   - a rank that is not its node's leader: 2 (SET its value, GET the table);
///   - the leader of a node of P ranks, other than rank 0: 2, plus 1 + (P - 1) when P > 1
///     (one WAIT for its members, a GET each);
///   - rank 0, leading a node of P0 ranks among H nodes: 1, plus P0 when P0 > 1, plus H when
///     H > 1 (WAITs and GETs of its members and of the other leaders' blobs, the SET of the
///     table).
/// In all, for N ranks on H nodes: 2N - 1 + (the ranks of nodes with more than one rank) + (H
/// when H > 1), at most 3N + H - 1 (3N - 1 with one node or one rank per node), against N(N + 2)
/// when every rank read every key. Every rank's own count is O(1) except the leaders': O(its
/// node), and for rank 0 O(its node + H). A rank that does not publish within `timeout` fails its
/// leader with Error(Timeout) naming this rank, the missing ranks and `what` ("their host"); the
/// others time out waiting for the table. Error(InvalidArgument) for a bad rank, size or nodeOf.
std::vector<std::string> gatherByNode(Store& store, const std::string& prefix, int rank, int size,
                                      std::span<const int> nodeOf, const std::string& mine,
                                      std::chrono::milliseconds timeout, const std::string& what);

/// gatherByNode with all ranks on one node.
std::vector<std::string> allGatherStrings(Store& store, const std::string& prefix, int rank,
                                          int size, const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          const std::string& what);

/// Node indices 0, 1, ... in order of first appearance: equal identities, equal index.
std::vector<int> nodeIndices(const std::vector<std::string>& identities);

}  // namespace braid
