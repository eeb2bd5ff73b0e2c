// braid-plan --simulate: one collective of one algorithm run by the simulator (src/sim/) on a
// fabricated cluster of up to thousands of ranks, with the cost model's prediction beside it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "topology/topology.hpp"
#include "tuning/cost_model.hpp"
#include "tuning/rules.hpp"

namespace braid::plan {

struct SimulateRequest {
  Collective coll;
  std::string algorithm;  // a registered name, or "" to select as the library would
  std::vector<tuning::Rule> rules;
  std::size_t bytes;
  int root = 0;
  tuning::CostParams cost;
  std::size_t chunk, buff, piece, smallMsg;
  bool noShm = false;
  bool json = false;
};

/// Prints the simulation (table or JSON); returns the exit status (2 for an algorithm the
/// simulator cannot run, with the reason on stderr).
int runSimulate(const SimulateRequest& req, const topology::Topology& world);

}  // namespace braid::plan
