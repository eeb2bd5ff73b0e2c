// Where braid-run binds its local ranks (--bind): cores of their own, like Open MPI's default
// for small jobs, split evenly so that each rank keeps room for its threads. Unbound ranks that
// wait for each other can end up on one CPU: in this VM a 2-rank 8 B broadcast then took 5-11 us
// instead of 0.3 until Linux moved one of them, tens of ms later (docs/benchmarks.md, "Binding").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace braid::run {

enum class BindMode { Auto, Core, None };

/// "auto", "core" or "none"; throws std::invalid_argument naming the value otherwise.
BindMode parseBindMode(std::string_view text);

/// One CPU core: the logical CPUs (hardware threads) of one physical core that braid-run's own
/// affinity mask allows, ascending.
using Core = std::vector<int>;

/// The cores braid-run may use: its affinity mask grouped by (package, core id) as
/// /sys/devices/system/cpu/cpuN/topology says (each CPU a core of its own where that is
/// unreadable), ordered by their first CPU.
std::vector<Core> allowedCores();

struct BindingPlan {
  std::vector<std::vector<int>> cpus;  // per local rank; empty: not bound
  std::string note;                    // why nothing is bound (auto), for --report-bindings
};

/// Auto binds each local rank to a block of consecutive cores of its own (cores / nproc each,
/// the first cores % nproc ranks one more) when the job has one node and every rank gets at
/// least one core; else nothing (several nodes may be emulated on one machine, e.g. by
/// scripts/emucluster.sh, and would pile onto the same cores). Core always binds and throws
/// std::invalid_argument when there are fewer cores than ranks. None binds nothing.
BindingPlan planBinding(BindMode mode, int nproc, int nnodes, const std::vector<Core>& cores);

}  // namespace braid::run
