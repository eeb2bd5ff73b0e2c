// Every collective of the API, run once with checked data and timed: the nccl-tests operations
// through tools/common's BenchRunner (allreduce, allgather, reducescatter, broadcast, reduce,
// alltoall, gather, scatter, sendrecv), and here the barrier and the variable-count forms
// (allgatherv, reducescatterv, alltoallv) with uneven counts. Expected values come from
// tools/common/check_data.hpp, computed without braid.
#pragma once

#include <braid/comm.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/bench_ops.hpp"

namespace braid::check {

struct CollectiveOutcome {
  std::string algo;        // what the communicator selects for this size
  std::size_t bytes = 0;   // the nccl-tests size of the operation
  double seconds = 0;      // this rank's time for the one operation (after a barrier)
  std::int64_t wrong = 0;  // this rank's output elements that differ from the expected values
};

class CollectiveChecker {
 public:
  /// Operations move about `bytes` (fp32 elements; rooted ones use the last rank as the root).
  CollectiveChecker(Comm& comm, std::size_t bytes);

  /// Names of the checks, in the order they run.
  static const std::vector<std::string>& names();
  /// Runs check `index` of names(). Throws the communicator's braid::Error.
  CollectiveOutcome run(std::size_t index);

 private:
  CollectiveOutcome runBench(const tools::BenchOpInfo& op);
  CollectiveOutcome runBarrier();
  CollectiveOutcome runAllgatherv();
  CollectiveOutcome runReduceScatterv();
  CollectiveOutcome runAlltoallv();
  std::string algorithm(Collective c, std::size_t bytes) const;
  /// Uneven per-rank element counts: base + r.
  std::vector<std::size_t> unevenCounts() const;

  Comm& comm_;
  std::size_t count_;  // fp32 elements
  std::vector<float> send_, recv_;
};

}  // namespace braid::check
