// Every rank publishes one value under `prefix/<rank>` and reads everyone's: the store-level
// all-gather that bootstrap steps (host identities, topology) share.
#pragma once

#include <braid/store.hpp>
#include <chrono>
#include <string>
#include <vector>

namespace braid {

/// Sets `prefix/<rank>` = mine, waits for every rank's key and returns the values in rank
/// order. A rank that does not publish within `timeout` fails with Error(Timeout) naming this
/// rank, the missing ranks and `what` ("their host", "their topology information").
std::vector<std::string> allGatherStrings(Store& store, const std::string& prefix, int rank,
                                          int size, const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          const std::string& what);

}  // namespace braid
