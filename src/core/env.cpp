// The one place braid reads its environment. Every variable is listed in kVariables (printed by
// `braid-info --env`, documented in docs/env.md).
#include <algorithm>
#include <braid/error.hpp>
#include <braid/options.hpp>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bootstrap/pmix.hpp"
#include "bootstrap/slurm.hpp"
#include "common/address_filter.hpp"
#include "common/peer_policy.hpp"
#include "common/socket_address.hpp"
#include "kernels/reduce.hpp"
#include "tuning/rules.hpp"

namespace braid {
namespace {

const std::vector<EnvVarDoc> kVariables = {
    {"BRAID_RANK", "-", "rank of this process (highest precedence launch convention)"},
    {"BRAID_WORLD_SIZE", "-", "number of ranks in the job"},
    {"BRAID_LOCAL_RANK", "-", "rank within this host"},
    {"BRAID_STORE", "-", "HOST:PORT of the rendezvous store (else MASTER_ADDR:MASTER_PORT)"},
    {"BRAID_STORE_EXTERNAL", "0", "1: the store is served elsewhere; rank 0 does not serve it"},
    {"RANK / WORLD_SIZE / LOCAL_RANK", "-", "torchrun's launch variables (second precedence)"},
    {"MASTER_ADDR / MASTER_PORT", "-", "torchrun's store address, used when BRAID_STORE is unset"},
    {"TORCHELASTIC_USE_AGENT_STORE", "-",
     "True (torchrun's agent serves torch's store at MASTER_PORT): braid's is at MASTER_PORT + 1"},
    {"OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK", "-", "Open MPI's (third precedence)"},
    {"SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID", "-", "Slurm's (fourth precedence)"},
    {"SLURM_STEP_NODELIST / SLURM_JOB_NODELIST / SLURM_NODELIST", "-",
     "Slurm: the store is on the first host of the first one set (no BRAID_STORE needed)"},
    {"SLURM_JOB_ID / SLURM_STEP_ID / SLURM_NODEID", "-",
     "Slurm: the store port is derived from the job and step id (20000-29999)"},
    {"PMIX_NAMESPACE / OMPI_COMM_WORLD_LOCAL_SIZE", "-",
     "Open MPI: the store address is exchanged through mpirun's PMIx server"},
    {"BRAID_CHUNK_SIZE", "256K", "pipelining unit: large transfers are cut into chunks this big"},
    {"BRAID_BUFFSIZE", "4M", "scratch memory per communicator, allocated once (bounds chunking)"},
    {"BRAID_SMALL_MSG_SIZE", "64K", "allreduce up to this size uses recursive doubling"},
    {"BRAID_ALGO", "", "algorithm rules, e.g. 'ring' or 'allreduce:0-64K:recursive_doubling'"},
    {"BRAID_ALGO_FORCE", "0",
     "1: a BRAID_ALGO rule whose algorithm cannot run an operation fails it (else: skipped)"},
    {"BRAID_CONNECT_TIMEOUT", "60000",
     "bound on store and peer connection setup: 500ms, 60s, 5m, 1h (a bare number is ms)"},
    {"BRAID_EXEC_TIMEOUT", "300000",
     "bound on one operation: 500ms, 300s, 5m, 1h (a bare number is ms)"},
    {"BRAID_SPIN_US", "50", "us a waiting thread polls before it sleeps"},
    {"BRAID_LISTEN_ADDR", "",
     "address to listen on for peers (default: the one reaching the store)"},
    {"BRAID_DEBUG", "WARN", "log level: NONE, WARN, INFO, TRACE"},
    {"BRAID_SHM_DISABLE", "0", "1: ranks of one host use TCP instead of shared memory"},
    {"BRAID_TRANSPORT", "auto",
     "between hosts: auto, tcp or ucx (auto: ucx with an RDMA device, else tcp)"},
    {"BRAID_SHM_SLOTS", "8", "shared-memory ring slots per ordered pair of local ranks"},
    {"BRAID_SHM_SLOT_SIZE", "64K", "bytes per ring slot (power of two, 4K..16M)"},
    {"BRAID_SHM_MAX_SEGMENT", "256M",
     "bound on one host's shared segment (slots shrink, then staging, then lane groups)"},
    {"BRAID_SHM_CMA_THRESHOLD", "auto",
     "shm blocks and send/recv this big go single-copy (CMA); auto: measured at creation "
     "(a crowded host: collectives stage, send/recv from 64K)"},
    {"BRAID_SHM_CMA_DISABLE", "0",
     "1: never use process_vm_readv (everything via the rings and staging)"},
    {"BRAID_SHM_HOST_CPUS", "auto",
     "CPUs the host's ranks can use (auto: affinity masks capped by cgroup limits)"},
    {"BRAID_SHM_LIGHT_WAKE", "1",
     "0: shm wakers always fence (1: sleepers use membarrier instead, where available)"},
    {"BRAID_SHM_NAMED", "0",
     "1: the shm segment is a named POSIX shm object (unlinked once mapped), not a memfd"},
    {"BRAID_SHM_STAGING", "2M",
     "staging bytes per rank for the direct shm collectives (two halves; 0: none)"},
    {"BRAID_SHM_CHUNK_SIZE", "auto",
     "pipelining unit of the direct shm collectives (auto: measured per rank count, with a CPU "
     "per rank; BRAID_CHUNK_SIZE when set)"},
    {"BRAID_AUTH_KEY", "", "per-job secret: store and peer connections are authenticated (HMAC)"},
    {"BRAID_AUTH_KEY_FILE", "",
     "FILE holding the per-job secret instead (owned by you, mode 0600 or stricter)"},
    {"BRAID_STORE_MAX_BYTES", "1G",
     "bound on the store server's memory (stored keys, requests, replies); beyond it: refused"},
    {"BRAID_STORE_MAX_PEER_BYTES", "256M",
     "the same bound per client host while the store has no BRAID_AUTH_KEY"},
    {"BRAID_WHITELIST", "",
     "FILE of peer addresses/CIDR networks allowed to connect (no implied loopback)"},
    {"BRAID_DETERMINISTIC", "0",
     "1: reductions combine ranks in rank order, bitwise reproducible (rank-ordered algorithms)"},
    {"BRAID_KERNEL_ISA", "auto", "reduction kernels: auto, scalar, avx2, avx512, avx512bf16"},
    {"BRAID_LLC_SIZE", "auto",
     "last-level cache size decisions derive from (auto: the OS's report, bounded to 4M-64M)"},
    {"BRAID_TOPO_FILE", "", "FILE: a (fabricated) topology JSON used instead of the gathered one"},
    {"BRAID_TOPO_DUMP", "", "FILE: rank 0 writes the communicator's topology there as JSON"},
    {"BRAID_FUSION_THRESHOLD", "64M", "fusion buffer: send queued tensors once this many bytes"},
    {"BRAID_CYCLE_TIME", "1", "ms (fractions allowed): fusion buffer sends what waited this long"},
    {"BRAID_FLIGHT_RECORDER", "128", "operations each communicator keeps for dumps (0: none)"},
    {"BRAID_FLIGHT_DIR", "", "DIR: flight recorder dumps go to files there instead of stderr"},
    {"BRAID_FLIGHT_SIGNAL", "1", "0: do not install the SIGUSR1 handler that dumps the recorder"},
    {"BRAID_TIMELINE", "", "FILE: Chrome-trace JSON of every operation, per rank (%r -> rank)"},
    {"BRAID_DIAG_STALL", "1000", "ms: an op running this long publishes its rank's position"},
    {"BRAID_STRAGGLER", "0",
     "N: stamp every N-th collective precisely (1: all) and name the rank that arrived last"},
    {"BRAID_METRICS_FILE", "",
     "FILE: OpenMetrics text per rank (%r -> rank), at an interval and "
     "at destruction"},
    {"BRAID_METRICS_INTERVAL", "10s", "how often BRAID_METRICS_FILE is written (10s, 500ms, 1m)"},
    {"BRAID_METRICS_PORT", "", "PORT: serve GET /metrics (OpenMetrics) on it; 0 picks a free one"},
    {"BRAID_METRICS_ADDR", "127.0.0.1", "the address the metrics server listens on"},
    {"BRAID_DIAG_GRACE", "2000", "ms: a failing rank waits this long for the others' reports"},
    {"BRAID_FINGERPRINT", "1", "0: measurement switch only, collective tags carry no fingerprint"},
    {"BRAID_SOCKET_IFNAME", "",
     "interfaces for the TCP data listener: name prefixes, '^' excludes, '=' exact (NCCL's)"},
    {"BRAID_SOCKET_FAMILY", "", "AF_INET or AF_INET6 (4, 6, ipv4, ipv6): data listener family"},
    {"BRAID_PORT_RANGE", "", "LO-HI: TCP data listeners bind a port in this range"},
    {"BRAID_TUNE", "0",
     "1: measure the cost model (latency, bandwidth per link class, reduction speed) at creation"},
    {"BRAID_TUNE_FILE", "", "FILE: cost-model parameters and 'algo = RULES' lines (docs/plan.md)"},
    {"BRAID_TUNE_CACHE", "",
     "FILE of machine measurements kept between runs (default ~/.cache/braid/machine.tune; off)"},
    {"BRAID_TUNE_MAX_BUSY", "20",
     "percent of a measurement a rank may spend off its CPU for BRAID_TUNE_CACHE to keep it"},
    {"BRAID_SOCKET_NTHREADS", "1",
     "TCP streams per peer = this x BRAID_NSOCKS_PERTHREAD (product <= 16), one engine each"},
    {"BRAID_NSOCKS_PERTHREAD", "1", "sockets per BRAID_SOCKET_NTHREADS group (product <= 16)"},
    {"BRAID_CONNECT", "lazy",
     "when TCP pairs connect: eager (all at creation) or lazy (a pair on its first message)"},
    {"BRAID_SHARE_CONNECTIONS", "1",
     "0: every sub-communicator opens sockets of its own instead of sharing its parent's"},
    {"BRAID_STORE_CLEANUP", "1",
     "0 keeps a communicator's store keys (bootstrap, liveness) to inspect them; 1 deletes them"},
    {"BRAID_SOCKET_STRIPE_MIN", "256K",
     "TCP messages this big are cut into one piece per stream (with several streams)"},
    {"BRAID_TORCH_GRACE_US", "1000",
     "PyTorch backend: us a queued collective waits for a caller about to wait() on it"},
    {"BRAID_HIER_PIECE_SIZE", "auto",
     "hierarchical allreduce: pieces this big overlap their in-host and network phases "
     "(auto: the cost model picks per size)"},
};

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

Error badValue(const char* name, const char* value, const char* expected) {
  return Error(ErrorCode::InvalidArgument,
               std::string("environment variable ") + name + "='" + value + "' is not " + expected);
}

// Sizes are bounded too (1 TiB unless a variable says less), so none reaches an allocation or a
// multiplication that cannot hold it.
constexpr std::size_t kMaxSizeVar = std::size_t{1} << 40;
std::size_t sizeVar(const char* name, std::size_t def, std::size_t lo = 0,
                    std::size_t hi = kMaxSizeVar) {
  const char* v = get(name);
  if (v == nullptr) return def;
  auto s = tuning::parseSize(v);
  if (!s || *s < lo || *s > hi) {
    const std::string range =
        "a size (e.g. 65536, 64K, 4M) between " + std::to_string(lo) + " and " + std::to_string(hi);
    throw badValue(name, v, range.c_str());
  }
  return *s;
}

// Every integer variable has a range; a value outside it (or one that does not fit a long long)
// is an InvalidArgument naming the variable and the range, never a silent cast.
long long intVar(const char* name, long long def, long long lo, long long hi) {
  const char* v = get(name);
  if (v == nullptr) return def;
  long long out = 0;
  std::string_view sv(v);
  auto [p, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), out);
  if (ec != std::errc() || p != sv.data() + sv.size() || out < lo || out > hi) {
    const std::string range =
        "an integer between " + std::to_string(lo) + " and " + std::to_string(hi);
    throw badValue(name, v, range.c_str());
  }
  return out;
}

bool boolVar(const char* name, bool def) {
  return intVar(name, def ? 1 : 0, 0, 1) != 0;
}

// Timeouts: a whole number with a unit (ms, s, m, h) or a bare number of milliseconds; at least
// 1 ms (0 would fail everything at once; it has no meaning), at most 30 days, so that now +
// timeout never overflows a clock. nullopt when `text` is none of these.
constexpr long long kMaxTimeoutMs = 30LL * 24 * 3600 * 1000;
struct Duration {
  long long ms = 0;
  bool bare = false;  // no unit: milliseconds
};
std::optional<Duration> parseDuration(std::string_view text) {
  long long n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p == text.data() || n < 0) return std::nullopt;
  const std::string_view unit(p, static_cast<std::size_t>(text.data() + text.size() - p));
  long long scale = 0;
  if (unit.empty() || unit == "ms") scale = 1;
  if (unit == "s") scale = 1000;
  if (unit == "m" || unit == "min") scale = 60 * 1000;
  if (unit == "h") scale = 3600 * 1000;
  if (scale == 0 || n > kMaxTimeoutMs / scale) return std::nullopt;
  return Duration{n * scale, unit.empty()};
}
std::chrono::milliseconds timeoutVar(const char* name, std::chrono::milliseconds def) {
  const char* v = get(name);
  if (v == nullptr) return def;
  const auto d = parseDuration(v);
  if (!d || d->ms < 1 || d->ms > kMaxTimeoutMs)
    throw badValue(name, v,
                   "a duration between 1 ms and 30 days: a number with a unit (500ms, 60s, 5m, "
                   "1h) or a bare number of milliseconds");
  return std::chrono::milliseconds(d->ms);
}

// Levenshtein distance, for naming the known variable closest to a misspelt one.
std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// BRAID_* variables that are not the library's: set by braid-run for the application, or read
// by braid's tests, benchmarks and scripts (docs/env.md, "Variables of the tools and tests").
constexpr std::string_view kNotTheLibrarys[] = {"BRAID_NODE_RANK",
                                                "BRAID_LOCAL_WORLD_SIZE",
                                                "BRAID_RUN",
                                                "BRAID_VENV_PYTHON",
                                                "BRAID_SOAK_",
                                                "BRAID_CHAOS_",
                                                "BRAID_SANITIZE",
                                                "BRAID_FUZZ_",
                                                "BRAID_SUITE_",
                                                "BRAID_TEST_",
                                                "BRAID_TRAINING_",
                                                "BRAID_SHAPED_LINK_",
                                                "BRAID_HOSTILE_SOAK_",
                                                "BRAID_ELASTIC_",
                                                "BRAID_AB_"};

/// Milliseconds as a decimal number ("1", "0.5", "2.5"), returned in microseconds.
std::chrono::microseconds millisecondsVar(const char* name, std::chrono::microseconds def) {
  const char* v = get(name);
  if (v == nullptr) return def;
  double ms = 0;
  std::string_view sv(v);
  auto [p, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), ms);
  if (ec != std::errc() || p != sv.data() + sv.size() || !(ms >= 0) || ms > 3.6e6)
    throw badValue(name, v, "a number of milliseconds between 0 and 3600000");
  return std::chrono::microseconds(static_cast<long long>(ms * 1000.0 + 0.5));
}

// Slurm gives every task the step's node list and the job and step ids, so every task derives
// the same address: the first host of the list (loopback when the step has one node), and a port
// of the job and step (bootstrap::slurmStorePort). Task 0 runs on the step's first node (node id
// 0) under every distribution but arbitrary; a task 0 elsewhere is an error naming it.
void slurmStore(LaunchInfo& li) {
  const char* listVar = nullptr;
  for (const char* v : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (get(v) != nullptr) {
      listVar = v;
      break;
    }
  }
  const char* jobVar = get("SLURM_JOB_ID") != nullptr ? "SLURM_JOB_ID" : "SLURM_JOBID";
  const char* stepVar = get("SLURM_STEP_ID") != nullptr ? "SLURM_STEP_ID" : "SLURM_STEPID";
  if (listVar == nullptr || get(jobVar) == nullptr)
    throw Error(
        ErrorCode::InvalidArgument,
        "launch environment (slurm, rank " + std::to_string(li.rank) +
            "): no store "
            "address: SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) and SLURM_JOB_ID are needed "
            "to derive one (run the program with srun), or set BRAID_STORE=HOST:PORT");
  const auto job = static_cast<std::uint64_t>(intVar(jobVar, 0, 0, 4294967295LL));
  const auto step = static_cast<std::uint64_t>(intVar(stepVar, 0, 0, 4294967295LL));
  const auto hosts = bootstrap::expandHostList(get(listVar), listVar, 2);
  const bool oneNode = hosts.size() == 1;
  if (li.rank == 0 && !oneNode && intVar("SLURM_NODEID", 0, 0, INT_MAX) != 0)
    throw Error(ErrorCode::InvalidArgument,
                "launch environment (slurm): task 0 runs on node " +
                    std::string(get("SLURM_NODEID")) + " of " + listVar + "='" + get(listVar) +
                    "', not on its first host " + hosts[0] +
                    " where the other tasks look for the store; set BRAID_STORE=HOST:PORT (or "
                    "use a distribution that places task 0 first)");
  li.storeHost = oneNode ? "127.0.0.1" : hosts[0];
  li.storeBindAny = !oneNode;
  li.storePort = bootstrap::slurmStorePort(job, step);
  li.storeSource = "slurm";
  li.jobId = "slurm job " + std::to_string(job) + " step " + std::to_string(step);
  li.storeDetail =
      (oneNode ? std::string("loopback (") + listVar + "='" + get(listVar) + "' is one node)"
               : "first host of " + std::string(listVar) + "='" + get(listVar) + "'") +
      ", port " + std::to_string(bootstrap::kSlurmPortLow) + " + (" + jobVar + "=" +
      std::to_string(job) + " mod 625) x 16 + (" + stepVar + "=" + std::to_string(step) +
      " mod 16)";
}

// Open MPI's mpirun is a PMIx server: the address is exchanged through it when the
// communicator is created (bootstrap::pmixExchange). Loopback when every rank is on one host.
void pmixStore(LaunchInfo& li) {
  const char* ns = get("PMIX_NAMESPACE");
  if (ns == nullptr || !bootstrap::pmixBuilt())
    throw Error(ErrorCode::InvalidArgument,
                "launch environment (openmpi, rank " + std::to_string(li.rank) +
                    "): no store address: " +
                    (ns == nullptr ? "the launcher set no PMIX_NAMESPACE (it is not a PMIx server)"
                                   : "this braid was built without PMIx (libpmix-dev)") +
                    "; set BRAID_STORE=HOST:PORT (or MASTER_ADDR and MASTER_PORT)");
  const bool oneHost =
      intVar("OMPI_COMM_WORLD_LOCAL_SIZE", 0, 0, INT_MAX) == static_cast<long long>(li.size);
  li.storeHost = oneHost ? "127.0.0.1" : "";
  li.storePort = 0;
  li.storeSource = "pmix";
  li.jobId = std::string("openmpi PMIx namespace ") + ns;
  li.storeDetail = std::string("exchanged through the launcher's PMIx server (namespace ") + ns +
                   ") when the communicator is created; rank 0 serves it on " +
                   (oneHost ? "loopback (every rank is on one host)"
                            : "its first interface address (BRAID_LISTEN_ADDR / "
                              "BRAID_SOCKET_IFNAME choose another)") +
                   ", on a free port";
}

}  // namespace

const std::vector<EnvVarDoc>& environmentVariables() {
  return kVariables;
}

std::vector<std::string> environmentWarnings(char** env) {
  std::vector<std::string> out;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::size_t eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : entry.substr(eq + 1);
    if (name.rfind("BRAID_", 0) != 0) continue;
    bool known = false;
    for (const EnvVarDoc& d : kVariables) known = known || name == d.name;
    for (std::string_view prefix : kNotTheLibrarys)
      known = known || (prefix.back() == '_' ? name.rfind(prefix, 0) == 0 : name == prefix);
    if (!known) {
      const char* closest = nullptr;
      std::size_t best = SIZE_MAX;
      for (const EnvVarDoc& d : kVariables) {
        if (std::string_view(d.name).rfind("BRAID_", 0) != 0) continue;
        const std::size_t dist = editDistance(name, d.name);
        if (dist < best) {
          best = dist;
          closest = d.name;
        }
      }
      std::string w = "unknown environment variable " + std::string(name) + " is ignored";
      if (closest != nullptr && best <= 3) w += std::string(": did you mean ") + closest + "?";
      w += " (braid-info --env lists the variables braid reads)";
      out.push_back(std::move(w));
      continue;
    }
    // A bare number is milliseconds; below a second it is almost surely meant as seconds.
    if (name == "BRAID_CONNECT_TIMEOUT" || name == "BRAID_EXEC_TIMEOUT") {
      const auto d = parseDuration(value);
      if (d && d->bare && d->ms >= 1 && d->ms < 1000)
        out.push_back(std::string(name) + "=" + std::string(value) + " is " + std::string(value) +
                      " ms (a bare number is milliseconds); write " + std::string(value) +
                      "s for seconds or " + std::string(value) +
                      "ms to keep it and silence this warning");
    }
  }
  return out;
}

Options Options::fromEnv() {
  Options o;
  o.chunkBytes = sizeVar("BRAID_CHUNK_SIZE", o.chunkBytes);
  if (o.chunkBytes == 0) throw badValue("BRAID_CHUNK_SIZE", "0", "a positive size");
  o.bufferBytes = sizeVar("BRAID_BUFFSIZE", o.bufferBytes, 64, std::size_t{16} << 30);
  if (const char* v = get("BRAID_HIER_PIECE_SIZE"); v != nullptr && std::string_view(v) != "auto") {
    o.hierPieceBytes = sizeVar("BRAID_HIER_PIECE_SIZE", 0);
    if (o.hierPieceBytes == 0)
      throw badValue("BRAID_HIER_PIECE_SIZE", v, "a positive size or auto");
  }
  o.smallMessageBytes = sizeVar("BRAID_SMALL_MSG_SIZE", o.smallMessageBytes);
  if (const char* v = get("BRAID_ALGO")) o.algo = v;
  o.connectTimeout = timeoutVar("BRAID_CONNECT_TIMEOUT", o.connectTimeout);
  o.execTimeout = timeoutVar("BRAID_EXEC_TIMEOUT", o.execTimeout);
  o.spin = std::chrono::microseconds(intVar("BRAID_SPIN_US", o.spin.count(), 0, 1000000));
  if (const char* v = get("BRAID_LISTEN_ADDR")) o.listenAddress = v;
  o.shmDisable = boolVar("BRAID_SHM_DISABLE", false);
  o.shareConnections = boolVar("BRAID_SHARE_CONNECTIONS", o.shareConnections);
  if (const char* v = get("BRAID_TRANSPORT")) {
    const std::string t = v;
    if (t != "auto" && t != "tcp" && t != "ucx")
      throw badValue("BRAID_TRANSPORT", v, "auto, tcp or ucx");
    o.interHostTransport = t;
  }
  o.shmSlots = sizeVar("BRAID_SHM_SLOTS", o.shmSlots, 1, 4096);
  o.shmSlotBytes = sizeVar("BRAID_SHM_SLOT_SIZE", o.shmSlotBytes);
  o.shmMaxSegmentBytes = sizeVar("BRAID_SHM_MAX_SEGMENT", o.shmMaxSegmentBytes);
  if (const char* v = get("BRAID_SHM_CMA_THRESHOLD"); v != nullptr && std::string_view(v) != "auto")
    o.shmCmaThresholdBytes = sizeVar("BRAID_SHM_CMA_THRESHOLD", 0);
  o.shmCmaDisable = boolVar("BRAID_SHM_CMA_DISABLE", false);
  if (const char* v = get("BRAID_SHM_HOST_CPUS"); v != nullptr && std::string_view(v) != "auto")
    o.shmHostCpus = static_cast<std::size_t>(intVar("BRAID_SHM_HOST_CPUS", 0, 1, 1 << 20));
  o.shmLightWake = boolVar("BRAID_SHM_LIGHT_WAKE", true);
  o.shmNamedSegment = boolVar("BRAID_SHM_NAMED", false);
  o.shmStagingBytes = sizeVar("BRAID_SHM_STAGING", o.shmStagingBytes);
  if (const char* v = get("BRAID_SHM_CHUNK_SIZE"); v != nullptr && std::string_view(v) != "auto") {
    o.shmChunkBytes = sizeVar("BRAID_SHM_CHUNK_SIZE", 0);
    if (o.shmChunkBytes == 0)
      throw badValue("BRAID_SHM_CHUNK_SIZE", "0", "a positive size or auto");
  }
  if (const char* v = get("BRAID_DEBUG")) {
    std::string_view s(v);
    if (s == "NONE" || s == "none" || s == "0")
      o.logLevel = 0;
    else if (s == "WARN" || s == "warn" || s == "1")
      o.logLevel = 1;
    else if (s == "INFO" || s == "info" || s == "2")
      o.logLevel = 2;
    else if (s == "TRACE" || s == "trace" || s == "3")
      o.logLevel = 3;
    else
      throw badValue("BRAID_DEBUG", v, "one of NONE, WARN, INFO, TRACE");
  }
  if (const char* v = get("BRAID_AUTH_KEY")) {
    if (get("BRAID_AUTH_KEY_FILE") != nullptr)
      throw Error(ErrorCode::InvalidArgument,
                  "environment variables BRAID_AUTH_KEY and BRAID_AUTH_KEY_FILE are both set; "
                  "set one of them");
    o.security.authKey = v;
  } else if (const char* f = get("BRAID_AUTH_KEY_FILE")) {
    o.security.authKey = security::readAuthKeyFile(f);
  }
  o.security.storeMaxBytes =
      sizeVar("BRAID_STORE_MAX_BYTES", o.security.storeMaxBytes, std::size_t{1} << 20);
  o.security.storeMaxPeerBytes =
      sizeVar("BRAID_STORE_MAX_PEER_BYTES", o.security.storeMaxPeerBytes, std::size_t{1} << 20);
  if (const char* v = get("BRAID_WHITELIST"))
    o.security.allowedPeers = security::readWhitelistFile(v);
  o.security.logRejections = o.logLevel >= 1;
  o.deterministic = boolVar("BRAID_DETERMINISTIC", false);
  o.algoForce = boolVar("BRAID_ALGO_FORCE", false);
  if (const char* v = get("BRAID_KERNEL_ISA")) {
    std::string_view s(v);
    if (s != "auto" && s != "AUTO") {
      auto isa = kernels::parseIsa(s);
      if (!isa)
        throw badValue("BRAID_KERNEL_ISA", v, "one of auto, scalar, avx2, avx512, avx512bf16");
      if (!kernels::isaSupported(*isa)) {
        std::string levels;
        for (auto l : kernels::supportedIsas()) levels += std::string(" ") + kernels::toString(l);
        levels = "supported by this CPU (supported:" + levels + ")";
        throw badValue("BRAID_KERNEL_ISA", v, levels.c_str());
      }
      o.kernelIsa = kernels::toString(*isa);
    }
  }
  if (const char* v = get("BRAID_LLC_SIZE"); v != nullptr && std::string_view(v) != "auto") {
    o.llcBytes = sizeVar("BRAID_LLC_SIZE", 0, 4096);
  }
  if (const char* v = get("BRAID_TOPO_FILE")) o.topoFile = v;
  if (const char* v = get("BRAID_TOPO_DUMP")) o.topoDump = v;
  o.fusionThresholdBytes = sizeVar("BRAID_FUSION_THRESHOLD", o.fusionThresholdBytes);
  o.cycleTime = millisecondsVar("BRAID_CYCLE_TIME", o.cycleTime);
  const long long flight =
      intVar("BRAID_FLIGHT_RECORDER", static_cast<long long>(o.flightRecorderOps), 0, 1 << 20);
  o.flightRecorderOps = static_cast<std::size_t>(flight);
  if (const char* v = get("BRAID_FLIGHT_DIR")) o.flightDir = v;
  o.flightSignal = boolVar("BRAID_FLIGHT_SIGNAL", true);
  if (const char* v = get("BRAID_TIMELINE")) o.timeline = v;
  o.diagStall =
      std::chrono::milliseconds(intVar("BRAID_DIAG_STALL", o.diagStall.count(), 0, kMaxTimeoutMs));
  o.diagGrace =
      std::chrono::milliseconds(intVar("BRAID_DIAG_GRACE", o.diagGrace.count(), 0, kMaxTimeoutMs));
  o.opFingerprint = boolVar("BRAID_FINGERPRINT", true);
  o.stragglerSample = static_cast<unsigned>(intVar("BRAID_STRAGGLER", 0, 0, 1 << 20));
  if (const char* v = get("BRAID_METRICS_FILE")) o.metricsFile = v;
  o.metricsInterval = timeoutVar("BRAID_METRICS_INTERVAL", o.metricsInterval);
  if (const char* v = get("BRAID_METRICS_PORT"); v != nullptr && *v != '\0')
    o.metricsPort = static_cast<int>(intVar("BRAID_METRICS_PORT", 0, 0, 65535));
  if (const char* v = get("BRAID_METRICS_ADDR"); v != nullptr && *v != '\0') o.metricsAddress = v;
  if (const char* v = get("BRAID_SOCKET_IFNAME")) o.socketIfname = v;
  if (const char* v = get("BRAID_SOCKET_FAMILY")) {
    std::string s(v);
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "af_inet" || s == "4" || s == "ipv4" || s == "inet")
      o.socketFamily = 4;
    else if (s == "af_inet6" || s == "6" || s == "ipv6" || s == "inet6")
      o.socketFamily = 6;
    else
      throw badValue("BRAID_SOCKET_FAMILY", v, "one of AF_INET, AF_INET6, 4, 6, ipv4, ipv6");
  }
  if (const char* v = get("BRAID_PORT_RANGE")) {
    std::string_view sv(v);
    const auto dash = sv.find('-');
    unsigned lo = 0, hi = 0;
    bool ok = dash != std::string_view::npos;
    if (ok) {
      auto [p1, e1] = std::from_chars(sv.data(), sv.data() + dash, lo);
      auto [p2, e2] = std::from_chars(sv.data() + dash + 1, sv.data() + sv.size(), hi);
      ok = e1 == std::errc() && p1 == sv.data() + dash && e2 == std::errc() &&
           p2 == sv.data() + sv.size() && lo >= 1 && lo <= hi && hi <= 65535;
    }
    if (!ok) throw badValue("BRAID_PORT_RANGE", v, "LO-HI with 1 <= LO <= HI <= 65535");
    o.portRangeLow = static_cast<std::uint16_t>(lo);
    o.portRangeHigh = static_cast<std::uint16_t>(hi);
  }
  if (const char* v = get("BRAID_TUNE")) {
    std::string_view s(v);
    if (s != "0" && s != "1") throw badValue("BRAID_TUNE", v, "0 or 1");
    o.tune = s == "1";
  }
  if (const char* v = get("BRAID_TUNE_FILE")) o.tuneFile = v;
  if (const char* v = get("BRAID_TUNE_CACHE")) o.tuneCache = v;
  o.tuneMaxBusyPercent =
      static_cast<int>(intVar("BRAID_TUNE_MAX_BUSY", o.tuneMaxBusyPercent, 0, 100));
  {
    const long long threads = intVar("BRAID_SOCKET_NTHREADS", o.socketThreads, 1, 16);
    const long long perThread = intVar("BRAID_NSOCKS_PERTHREAD", o.socketsPerThread, 1, 16);
    if (threads < 1 || perThread < 1 || threads > 16 || perThread > 16 || threads * perThread > 16)
      throw Error(ErrorCode::InvalidArgument,
                  "environment variables BRAID_SOCKET_NTHREADS=" + std::to_string(threads) +
                      " x BRAID_NSOCKS_PERTHREAD=" + std::to_string(perThread) +
                      ": each must be >= 1 and the product (sockets per peer) at most 16");
    o.socketThreads = static_cast<int>(threads);
    o.socketsPerThread = static_cast<int>(perThread);
  }
  if (const char* v = get("BRAID_CONNECT")) {
    const std::string_view c(v);
    if (c != "lazy" && c != "eager") throw badValue("BRAID_CONNECT", v, "lazy or eager");
    o.lazyConnect = c == "lazy";
  }
  o.storeCleanup = boolVar("BRAID_STORE_CLEANUP", o.storeCleanup);
  o.socketStripeMinBytes = sizeVar("BRAID_SOCKET_STRIPE_MIN", o.socketStripeMinBytes);
  if (o.socketStripeMinBytes == 0)
    throw badValue("BRAID_SOCKET_STRIPE_MIN", get("BRAID_SOCKET_STRIPE_MIN"), "a positive size");
  return o;
}

LaunchInfo LaunchInfo::fromEnv() {
  LaunchInfo li;
  struct Convention {
    const char* source;
    const char* rank;
    const char* size;
    const char* local;
  };
  static constexpr Convention kConventions[] = {
      {"braid", "BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const auto& c : kConventions) {
    if (get(c.rank) == nullptr) continue;
    if (get(c.size) == nullptr)
      throw Error(ErrorCode::InvalidArgument,
                  std::string(c.rank) + " is set but " + c.size + " is not");
    li.source = c.source;
    li.size = static_cast<int>(intVar(c.size, 1, 1, INT_MAX));
    li.rank = static_cast<int>(intVar(c.rank, 0, 0, li.size - 1));
    li.localRank = static_cast<int>(intVar(c.local, li.rank, 0, li.size - 1));
    break;
  }
  if (li.size < 1 || li.rank < 0 || li.rank >= li.size)
    throw Error(ErrorCode::InvalidArgument,
                "launch environment (" + li.source + "): rank " + std::to_string(li.rank) +
                    " is outside world size " + std::to_string(li.size));
  // Store address: BRAID_STORE, then torchrun's, then what the rank convention's launcher gives.
  if (const char* s = get("BRAID_STORE")) {
    const std::optional<HostPort> store = parseHostPort(s);
    if (!store) throw badValue("BRAID_STORE", s, "HOST:PORT");
    li.storeHost = store->host;
    li.storePort = store->port;
    li.storeSource = "BRAID_STORE";
  } else if (get("MASTER_ADDR") != nullptr && get("MASTER_PORT") != nullptr) {
    li.storeHost = get("MASTER_ADDR");
    const long long p = intVar("MASTER_PORT", 0, 1, 65535);
    li.storePort = static_cast<std::uint16_t>(p);
    li.storeSource = "MASTER_ADDR/MASTER_PORT";
    // torchrun's agent (torch 2) serves torch's own store at MASTER_PORT and tells its workers
    // so; braid's rank 0 then serves braid's store on the next port.
    if (const char* a = get("TORCHELASTIC_USE_AGENT_STORE");
        a != nullptr && (std::string_view(a) == "True" || std::string_view(a) == "1")) {
      if (p == 65535)
        throw badValue("MASTER_PORT", get("MASTER_PORT"),
                       "below 65535 under torchrun's agent store");
      li.storePort = static_cast<std::uint16_t>(p + 1);
      li.storeDetail =
          "MASTER_PORT + 1 (torchrun's agent serves torch's store at MASTER_PORT: "
          "TORCHELASTIC_USE_AGENT_STORE=" +
          std::string(a) + ")";
    }
  } else if (li.size > 1 && li.source == "slurm") {
    slurmStore(li);
  } else if (li.size > 1 && li.source == "openmpi") {
    pmixStore(li);
  } else if (li.size > 1) {
    throw Error(ErrorCode::InvalidArgument,
                "launch environment (" + li.source + ", rank " + std::to_string(li.rank) +
                    "): no store address; set BRAID_STORE=HOST:PORT (or MASTER_ADDR and "
                    "MASTER_PORT), or start the job with braid-run");
  }
  li.storeExternal = boolVar("BRAID_STORE_EXTERNAL", false);
  if (li.storeExternal && (li.storeSource == "slurm" || li.storeSource == "pmix"))
    throw Error(ErrorCode::InvalidArgument,
                "BRAID_STORE_EXTERNAL=1 needs the external store's address in BRAID_STORE (the "
                "address " +
                    li.storeSource + " gives is one rank 0 serves)");
  return li;
}

}  // namespace braid
