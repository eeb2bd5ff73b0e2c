#include "check_args.hpp"

#include <charconv>
#include <cmath>
#include <string_view>

#include "common/text.hpp"

namespace braid::check {

const char* const kCheckUsage = R"(usage: braid-check [options]

Checks that a braid job works, rank by rank and pair by pair, and exits 0 only if everything
passed. Run one process per rank under any launcher (braid-run, torchrun-style RANK/WORLD_SIZE/
MASTER_ADDR/MASTER_PORT, mpirun, srun):   braid-run -n 4 braid-check

Checks, in order (rank 0 prints the report):
  1 store        every rank reaches the store within the timeout
  2 ranks        every rank joins (host, address, pid)
  3 pairs        every pair of ranks exchanges a message both ways; the path (shm+cma, shm, tcp)
  4 performance  ping-pong latency and bandwidth of every pair, as matrices; outliers flagged
  5 collectives  every collective once, outputs compared with independently computed values

Options:
  --json FILE            write the results as JSON (rank 0; '-': stdout, the report then
                         goes to stderr)
  --quick                smaller probes and fewer iterations (a few seconds per check)
  --timeout SEC          bound on connecting, on each operation and on waiting for a rank
                         (default: BRAID_CONNECT_TIMEOUT / BRAID_EXEC_TIMEOUT)
  --latency-size B       latency probe message size (default 8)
  --bandwidth-size B     bandwidth probe message size (default 4M, --quick 256K)
  --latency-iters N      round trips per pair for latency (default 200, --quick 20)
  --bandwidth-iters N    round trips per pair for bandwidth (default 20, --quick 3)
  --collective-size B    bytes per collective (default 1M, --quick 64K)
  --strict               outliers fail the check (default: reported as warnings)
  -h, --help

Exit status: 0 everything passed; 1 a check failed (pair, collective, data, outlier with
--strict); 2 usage or environment error; 3 this rank could not reach the store; 4 a rank did
not join or did not report within the timeout.
)";

namespace {

std::size_t parseSize(std::string_view option, const std::string& text, std::size_t min) {
  const auto v = tools::parseByteSize(text);
  if (!v)
    throw UsageError(std::string(option) + ": expected a size like 8, 64K, 4M, got '" + text + "'");
  if (*v < min)
    throw UsageError(std::string(option) + ": must be at least " + std::to_string(min) +
                     " bytes, got '" + text + "'");
  return *v;
}

int parseCount(std::string_view option, const std::string& text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 1 || v > 1000000)
    throw UsageError(std::string(option) + ": expected a count in [1, 1000000], got '" + text +
                     "'");
  return v;
}

std::chrono::milliseconds parseSeconds(std::string_view option, const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(v > 0) || v > 1e6)
    throw UsageError(std::string(option) + ": expected seconds > 0, got '" + text + "'");
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(v * 1000)));
}

}  // namespace

CheckArgs parseCheckArgs(int argc, char** argv) {
  CheckArgs args;
  std::optional<std::size_t> bandwidthBytes, collectiveBytes;
  std::optional<int> latencyIters, bandwidthIters;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::optional<std::string> inlineValue;
    if (arg.rfind("--", 0) == 0) {
      const std::size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        inlineValue = arg.substr(eq + 1);
        arg.resize(eq);
      }
    }
    auto value = [&]() -> std::string {
      if (inlineValue) return *inlineValue;
      if (i + 1 >= argc) throw UsageError(arg + ": missing value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      args.help = true;
    } else if (arg == "--json") {
      args.jsonPath = value();
      if (args.jsonPath->empty()) throw UsageError("--json: empty file name");
    } else if (arg == "--quick") {
      args.quick = true;
    } else if (arg == "--strict") {
      args.strict = true;
    } else if (arg == "--timeout") {
      args.timeout = parseSeconds(arg, value());
    } else if (arg == "--latency-size") {
      args.latencyBytes = parseSize(arg, value(), 1);
    } else if (arg == "--bandwidth-size") {
      bandwidthBytes = parseSize(arg, value(), 1);
    } else if (arg == "--collective-size") {
      collectiveBytes = parseSize(arg, value(), 0);
    } else if (arg == "--latency-iters") {
      latencyIters = parseCount(arg, value());
    } else if (arg == "--bandwidth-iters") {
      bandwidthIters = parseCount(arg, value());
    } else {
      throw UsageError("unknown option '" + arg + "'");
    }
  }
  if (args.quick) {
    args.bandwidthBytes = std::size_t{256} << 10;
    args.latencyIters = 20;
    args.bandwidthIters = 3;
    args.collectiveBytes = std::size_t{64} << 10;
  }
  if (bandwidthBytes) args.bandwidthBytes = *bandwidthBytes;
  if (collectiveBytes) args.collectiveBytes = *collectiveBytes;
  if (latencyIters) args.latencyIters = *latencyIters;
  if (bandwidthIters) args.bandwidthIters = *bandwidthIters;
  return args;
}

}  // namespace braid::check
