// braid-info: what this build of braid can do and how it is configured here: version, the
// instruction set the reduction kernels dispatch to, the algorithms of every collective, the
// launch environment and every environment variable braid reads.
#include <braid/braid.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "algo/algorithm.hpp"
#include "core/machine_profile.hpp"
#include "core/process_settings.hpp"

namespace braid::info {
namespace {

constexpr const char* kUsage = R"(usage: braid-info [--env] [--algos] [--paths] [--tune] [-h|--help]

Prints the braid version, the instruction set the reduction kernels use on this CPU (and
the levels it supports), the size from which outputs are written with non-temporal stores
and the cache size it derives from (BRAID_LLC_SIZE, else the machine profile's measurement:
--tune), the CPUs
this process can use (affinity mask capped by the cgroup's CPU limit), the algorithms available for each collective, the launch environment and the options as braid
would read them here, and every environment variable braid reads (value if set, default,
meaning). Without options everything is printed.

  --env     only the environment variables
  --algos   only the algorithms
  --paths   join the job (run it under a launcher: braid-run -n 4 braid-info --paths) and
            print, on rank 0, how every pair of ranks talks (shm+cma, shm, tcp) and from
            which size shared-memory collectives and messages go single copy, and why
  --tune    the decisions braid derives from this machine (streaming-store threshold,
            effective cache, chunk size, shared-memory single-copy threshold): each value and
            where it came from: a BRAID_* override, the profile file (BRAID_TUNE_CACHE: its path
            and the date of the measurement), a measurement now (kept in that file), a default
  -h, --help
)";

void printAlgorithms() {
  std::printf("algorithms:\n");
  const auto algos = algo::registry();
  // Grouped by collective, in the order of the Collective enum; registry order within a group.
  for (int c = 0; c <= static_cast<int>(Collective::Recv); ++c) {
    const auto coll = static_cast<Collective>(c);
    bool first = true;
    for (const algo::AlgoInfo& a : algos) {
      if (a.coll != coll) continue;
      if (first) std::printf("  %s\n", toString(coll));
      first = false;
      std::printf("    %-24s %s%s\n", a.name, a.summary != nullptr ? a.summary : "",
                  a.rankOrdered ? " [rank-ordered: BRAID_DETERMINISTIC]" : "");
      std::printf("    %-24s needs: %s\n", "", algo::describeConstraints(a).c_str());
    }
  }
  if (algos.empty()) std::printf("  (none registered)\n");
}

/// One documented row may name several variables: "MASTER_ADDR / MASTER_PORT", or
/// "OMPI_COMM_WORLD_RANK / _SIZE" where a leading '_' continues the first name's stem.
std::vector<std::string> variableNames(std::string_view names) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < names.size()) {
    std::size_t end = names.find('/', start);
    if (end == std::string_view::npos) end = names.size();
    std::string_view name = names.substr(start, end - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (!name.empty() && name.front() == '_' && !out.empty()) {
      const std::size_t stem = out.front().rfind('_');
      out.push_back(out.front().substr(0, stem == std::string::npos ? 0 : stem) +
                    std::string(name));
    } else if (!name.empty()) {
      out.emplace_back(name);
    }
    start = end + 1;
  }
  return out;
}

void printEnvironment() {
  std::printf("environment variables (* = set here):\n");
  for (const EnvVarDoc& d : environmentVariables()) {
    std::string current;
    for (const std::string& name : variableNames(d.name)) {
      if (const char* v = std::getenv(name.c_str())) {
        if (!current.empty()) current += ", ";
        // Secrets are never printed, only whether they are set.
        current += name + "=" +
                   (name.find("AUTH_KEY") != std::string::npos
                        ? "(set, " + std::to_string(std::string(v).size()) + " characters)"
                        : std::string(v));
      }
    }
    const std::string def =
        d.defaultValue != nullptr && *d.defaultValue != '\0' ? d.defaultValue : "(empty)";
    const char mark = current.empty() ? ' ' : '*';
    if (std::string_view(d.name).size() <= 26) {
      std::printf("%c %-26s default %-8s %s\n", mark, d.name, def.c_str(), d.meaning);
    } else {
      std::printf("%c %s\n  %-26s default %-8s %s\n", mark, d.name, "", def.c_str(), d.meaning);
    }
    if (!current.empty()) std::printf("    current: %s\n", current.c_str());
  }
}

void printLaunchAndOptions() {
  try {
    const LaunchInfo li = LaunchInfo::fromEnv();
    // The launcher detected (whose rank variables are used) and where the store address came
    // from: BRAID_STORE, MASTER_ADDR/MASTER_PORT, derived from Slurm's variables, or PMIx.
    std::printf("launch: %s, rank %d of %d, local rank %d\n", li.source.c_str(), li.rank, li.size,
                li.localRank);
    if (li.storeSource == "pmix")
      std::printf("store: from pmix: %s\n", li.storeDetail.c_str());
    else if (li.storeSource == "none")
      std::printf("store: none (one rank: in-process store)\n");
    else
      std::printf("store: %s:%u%s, from %s%s%s\n", li.storeHost.c_str(),
                  static_cast<unsigned>(li.storePort), li.storeExternal ? " (external)" : "",
                  li.storeSource.c_str(), li.storeDetail.empty() ? "" : ": ",
                  li.storeDetail.c_str());
  } catch (const std::exception& e) {
    std::printf("launch: invalid environment: %s\n", e.what());
  }
  try {
    const Options o = Options::fromEnv();
    std::printf(
        "options: chunk %zu B, buffer %zu B, small messages up to %zu B, algo '%s', "
        "connect timeout %lld ms, exec timeout %lld ms, spin %lld us, listen '%s', log level "
        "%d\n",
        o.chunkBytes, o.bufferBytes, o.smallMessageBytes, o.algo.c_str(),
        static_cast<long long>(o.connectTimeout.count()),
        static_cast<long long>(o.execTimeout.count()), static_cast<long long>(o.spin.count()),
        o.listenAddress.c_str(), o.logLevel);
  } catch (const std::exception& e) {
    std::printf("options: invalid environment: %s\n", e.what());
  }
}

// Collective: every rank sends its row of paths to rank 0, which prints the matrix.
int printPaths() {
  auto comm = Comm::fromEnv();
  const int n = comm->size();
  constexpr std::size_t kWidth = 8;  // "shm+cma" plus a terminating zero
  std::vector<char> row(n * kWidth, 0), all(static_cast<std::size_t>(n) * n * kWidth, 0);
  for (int p = 0; p < n; ++p) {
    std::string path = comm->pathTo(p).substr(0, kWidth - 1);
    std::copy(path.begin(), path.end(), row.begin() + p * kWidth);
  }
  comm->gather(row.data(), all.data(), row.size(), DataType::Uint8, 0);
  if (comm->rank() != 0) return 0;
  std::printf("paths between ranks (row: from, column: to)\n%6s", "");
  for (int p = 0; p < n; ++p) std::printf(" %8d", p);
  std::printf("\n");
  for (int r = 0; r < n; ++r) {
    std::printf("%6d", r);
    for (int p = 0; p < n; ++p)
      std::printf(" %8s", &all[(static_cast<std::size_t>(r) * n + p) * kWidth]);
    std::printf("\n");
  }
  const std::string single = comm->singleCopy();
  if (!single.empty()) std::printf("single copy over shared memory (rank 0): %s\n", single.c_str());
  return 0;
}

int run(int argc, char** argv) {
  bool env = false;
  bool algos = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--env") {
      env = true;
    } else if (arg == "--algos") {
      algos = true;
    } else if (arg == "--paths") {
      return printPaths();
    } else if (arg == "--tune") {
      std::fputs(core::tuneReport(Options::fromEnv()).c_str(), stdout);
      return 0;
    } else {
      std::fprintf(stderr, "braid-info: unknown option '%s'\n(braid-info --help shows the usage)\n",
                   argv[i]);
      return 2;
    }
  }
  const bool all = !env && !algos;
  if (all) {
    std::printf("braid %s\n", braid::version());
    core::applyProcessSettings(Options::fromEnv());  // BRAID_KERNEL_ISA, BRAID_LLC_SIZE
    // The streaming threshold a communicator would use: the machine profile's (--tune).
    core::applyMachineProfile(Options::fromEnv());
    std::printf("kernels: %s\n", core::processSettingsText().c_str());
    printLaunchAndOptions();
  }
  if (all || algos) printAlgorithms();
  if (all || env) printEnvironment();
  return 0;
}

}  // namespace
}  // namespace braid::info

int main(int argc, char** argv) {
  try {
    return braid::info::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-info: %s\n", e.what());
    return 1;
  }
}
