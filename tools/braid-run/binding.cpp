#include "binding.hpp"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>
#include <utility>

namespace braid::run {

BindMode parseBindMode(std::string_view text) {
  if (text == "auto") return BindMode::Auto;
  if (text == "core") return BindMode::Core;
  if (text == "none") return BindMode::None;
  throw std::invalid_argument("--bind: expected auto, core or none, got '" + std::string(text) +
                              "'");
}

namespace {

int readTopology(int cpu, const char* file) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + file);
  int value = -1;
  if (!(in >> value)) return -1;
  return value;
}

}  // namespace

std::vector<Core> allowedCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  std::map<std::pair<int, int>, Core> byCore;
  std::vector<Core> out;
  for (int c : cpus) {
    const int package = readTopology(c, "physical_package_id");
    const int core = readTopology(c, "core_id");
    if (package < 0 || core < 0) {
      out.push_back({c});  // unknown topology: a core of its own
      continue;
    }
    byCore[{package, core}].push_back(c);
  }
  for (auto& [key, core] : byCore) out.push_back(std::move(core));
  std::sort(out.begin(), out.end(), [](const Core& a, const Core& b) { return a[0] < b[0]; });
  return out;
}

BindingPlan planBinding(BindMode mode, int nproc, int nnodes, const std::vector<Core>& cores) {
  BindingPlan plan;
  plan.cpus.assign(static_cast<std::size_t>(std::max(0, nproc)), {});
  const auto available = static_cast<int>(cores.size());
  if (mode == BindMode::None) {
    plan.note = "--bind none";
    return plan;
  }
  if (mode == BindMode::Auto && nnodes > 1) {
    plan.note = "not bound: --nnodes > 1 (pass --bind core to bind on real hosts)";
    return plan;
  }
  if (nproc > available) {
    if (mode == BindMode::Core)
      throw std::invalid_argument("--bind core: " + std::to_string(nproc) + " ranks but only " +
                                  std::to_string(available) +
                                  " cores in braid-run's CPU affinity mask");
    plan.note = "not bound: " + std::to_string(nproc) + " ranks on " + std::to_string(available) +
                " cores (oversubscribed)";
    return plan;
  }
  // Blocks of consecutive cores, as even as possible (the first cores % nproc ranks get one
  // more): a rank keeps room for its own threads (PyTorch's intra-op pool, braid's worker).
  const int per = available / nproc, extra = available % nproc;
  int next = 0;
  for (int i = 0; i < nproc; ++i) {
    std::vector<int>& mine = plan.cpus[static_cast<std::size_t>(i)];
    for (int k = 0; k < per + (i < extra ? 1 : 0); ++k, ++next)
      mine.insert(mine.end(), cores[next].begin(), cores[next].end());
  }
  return plan;
}

}  // namespace braid::run
