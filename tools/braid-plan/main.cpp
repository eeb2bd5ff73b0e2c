// braid-plan: communication-volume analysis of one training step. From a model (parameters,
// batch, sequence, hidden size, dtype), a cluster (hosts x ranks per host with link latencies
// and bandwidths, or a topology file) and a parallel layout (data parallel, ZeRO-2/3,
// pipeline stages) it lists the step's collectives, their volume, the predicted time of every
// algorithm by the library's own cost model (src/tuning/cost_model.hpp), the algorithm the
// library would select for them (tuning::selectAlgorithm, same inputs), the total, and whether
// it can hide behind a given compute time. docs/plan.md explains the model and how to check a
// plan against braid-perf. --simulate runs one collective's real schedule over the simulator
// (src/sim/, simulate.cpp here) instead.
#include <braid/braid.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algo/algorithm.hpp"
#include "sim/simulate.hpp"
#include "simulate.hpp"
#include "topology/json.hpp"
#include "topology/topology_json.hpp"
#include "tuning/cost_model.hpp"
#include "tuning/rules.hpp"

namespace braid::plan {
namespace {

namespace json = topology::json;

constexpr const char* kUsage = R"(usage: braid-plan [options]
       braid-plan --simulate COLL --ranks N --ranks-per-host P --size S [--algo A] [--json]

Per training step: every collective (data-parallel gradient allreduce, ZeRO reduce_scatter and
allgather, pipeline activations), its volume, the predicted time of each algorithm by braid's
cost model, the algorithm braid would select, the total, and whether it hides behind compute.

model:
  --params N          parameters: 125M, 1.3B, 7B, or a plain number (default: 12 x layers x
                      hidden^2 when --layers is given)
  --layers N          transformer layers (only to derive --params)
  --hidden N          hidden size (activations: batch x seq x hidden per pipeline boundary)
  --seq N             sequence length (default 1)
  --batch N           sequences per data-parallel replica per step (default 1)
  --micro-batches N   pipeline micro-batches per step (default: pp)
  --dtype T           gradient / parameter / activation type: fp32 (default), bf16, fp16
cluster:
  --hosts N           hosts (default 1)
  --ranks-per-host N  ranks per host (default 1)
  --topo FILE         a topology JSON (BRAID_TOPO_DUMP / docs/topology.md) instead of the two
  --intra-bw BW       shared-memory bandwidth: GB/s, or 10Gbit, 800Mbit (default 8)
  --intra-lat T       shared-memory latency: us, or 2us, 1ms (default 2)
  --inter-bw BW       network bandwidth per host (default 1.25 = 10 Gbit/s)
  --inter-lat T       network latency (default 25)
  --reduce-bw BW      reduction kernel speed (default 8)
  --tune-file FILE    parameters (and algo rules) from a BRAID_TUNE_FILE; flags above override
  --algo RULES        BRAID_ALGO rules, applied as the library applies them
  --chunk SIZE        BRAID_CHUNK_SIZE (default 256K); --buffsize SIZE BRAID_BUFFSIZE (4M)
  --piece SIZE|auto   BRAID_HIER_PIECE_SIZE (default auto: the model picks per size)
  --small-msg SIZE    BRAID_SMALL_MSG_SIZE (default 64K)
  --no-shm            ranks of one host do not share memory (BRAID_SHM_DISABLE=1)
layout:
  --dp N              data-parallel ranks (default: all ranks / pp)
  --zero 0|2|3        0: allreduce gradients; 2: reduce_scatter gradients + allgather params;
                      3: allgather params twice (forward, backward) + reduce_scatter gradients
  --pp N              pipeline stages (rank = stage x dp + replica, as Megatron orders them)
  --bucket SIZE       gradient bucket (fusion buffer) size (default 64M, BRAID_FUSION_THRESHOLD)
simulate one collective (the algorithm's own code, every rank a fiber, no wires):
  --simulate COLL     run COLL (allreduce, allgather, reducescatter, broadcast, reduce,
                      gather, scatter, alltoall, the v-variants, barrier) over the simulated
                      transport and print bytes sent per rank, messages, steps (the longest
                      chain of messages) and the predicted time beside the cost model's
                      (docs/plan.md, "Simulator"); up to thousands of ranks in one process
  --ranks N           ranks (with --ranks-per-host P: hosts of P ranks, the last one may
                      hold fewer; default --hosts x --ranks-per-host)
  --size S            the nccl-tests size in bytes (64K, 1M; required but for barrier):
                      fp32 elements
  --root R            root of broadcast, reduce, gather, scatter (default 0)
  --algo A            with --simulate: an algorithm of COLL (ring, recursive_doubling, ...),
                      or BRAID_ALGO rules; default: what the library would select (on one
                      host with shared memory its shm algorithms, which the simulator
                      refuses: give --no-shm or --algo)
output:
  --compute-ms T      compute time per step: does the communication hide behind it?
  --json              JSON instead of the table
  --print-tune        print the parameters in BRAID_TUNE_FILE format and exit
  -h, --help
)";

[[noreturn]] void usageError(const std::string& msg) {
  std::fprintf(stderr, "braid-plan: %s\n(braid-plan --help lists the options)\n", msg.c_str());
  std::exit(2);
}

std::optional<double> parseCount(std::string_view s) {
  double mult = 1;
  if (!s.empty()) {
    const char last = s.back();
    if (last == 'K' || last == 'k') mult = 1e3;
    if (last == 'M' || last == 'm') mult = 1e6;
    if (last == 'B' || last == 'b' || last == 'G' || last == 'g') mult = 1e9;
    if (last == 'T' || last == 't') mult = 1e12;
    if (mult != 1) s.remove_suffix(1);
  }
  char* end = nullptr;
  const std::string str(s);
  const double v = std::strtod(str.c_str(), &end);
  if (str.empty() || end != str.c_str() + str.size() || !(v > 0) || !std::isfinite(v))
    return std::nullopt;
  return v * mult;
}

long positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1)
    usageError(flag + " '" + v + "' is not a positive integer");
  return n;
}

std::string bytesText(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

/// One kind of collective in the step, run `count` times on groups of the same shape.
struct Entry {
  std::string what;  // "gradient allreduce (dp)"
  Collective coll;
  std::vector<int> members;                      // one representative group (ranks of the world)
  std::vector<std::pair<std::size_t, int>> ops;  // (bytes, times)
  bool p2p = false;
  bool network = false;  // p2p: crosses hosts
};

struct Row {
  std::string algorithm;
  double seconds;
  std::string steps;
};

double busFactor(Collective c, int n) {
  if (n <= 1) return 0;
  const double f = static_cast<double>(n - 1) / n;
  switch (c) {
    case Collective::Allreduce:
      return 2 * f;
    case Collective::Allgather:
    case Collective::ReduceScatter:
      return f;
    default:
      return 1;
  }
}

int run(int argc, char** argv) {
  std::optional<double> params;
  long layers = 0, hidden = 0, seq = 1, batch = 1, micro = 0;
  DataType dtype = DataType::Float32;
  long hosts = 1, perHost = 1, dp = 0, zero = 0, pp = 1;
  std::string topoFile, tuneFile, algoRules;
  std::optional<double> intraBw, intraLat, interBw, interLat, reduceBw, computeMs;
  std::size_t chunk = 256 * 1024, buff = 4 * 1024 * 1024, smallMsg = 64 * 1024;
  std::size_t piece = 0;  // auto
  std::size_t bucket = std::size_t{64} << 20;
  bool json = false, printTune = false, noShm = false;
  std::optional<Collective> simulate;
  long ranks = 0, root = 0;
  std::optional<std::size_t> simSize;

  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usageError(a + " needs a value");
      return argv[++i];
    };
    auto size = [&]() {
      const std::string v = value();
      auto s = tuning::parseSize(v);
      if (!s || *s == 0) usageError(a + " '" + v + "' is not a size (e.g. 64K, 4M)");
      return *s;
    };
    auto bw = [&]() {
      const std::string v = value();
      auto b = tuning::parseBandwidth(v);
      if (!b) usageError(a + " '" + v + "' is not a bandwidth (GB/s, or 10Gbit, 800Mbit)");
      return *b;
    };
    auto lat = [&]() {
      const std::string v = value();
      auto l = tuning::parseLatency(v);
      if (!l) usageError(a + " '" + v + "' is not a latency (us, or 2us, 1ms)");
      return *l;
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--params") {
      const std::string v = value();
      params = parseCount(v);
      if (!params) usageError("--params '" + v + "' is not a count (e.g. 125M, 1.3B, 7B)");
    } else if (a == "--layers") {
      layers = positive(a, value());
    } else if (a == "--hidden") {
      hidden = positive(a, value());
    } else if (a == "--seq") {
      seq = positive(a, value());
    } else if (a == "--batch") {
      batch = positive(a, value());
    } else if (a == "--micro-batches") {
      micro = positive(a, value());
    } else if (a == "--dtype") {
      const std::string v = value();
      auto t = parseDataType(v);
      if (!t) usageError("--dtype '" + v + "' is not a data type (fp32, bf16, fp16)");
      dtype = *t;
    } else if (a == "--hosts") {
      hosts = positive(a, value());
    } else if (a == "--ranks-per-host") {
      perHost = positive(a, value());
    } else if (a == "--topo") {
      topoFile = value();
    } else if (a == "--intra-bw") {
      intraBw = bw();
    } else if (a == "--intra-lat") {
      intraLat = lat();
    } else if (a == "--inter-bw") {
      interBw = bw();
    } else if (a == "--inter-lat") {
      interLat = lat();
    } else if (a == "--reduce-bw") {
      reduceBw = bw();
    } else if (a == "--tune-file") {
      tuneFile = value();
    } else if (a == "--algo") {
      algoRules = value();
    } else if (a == "--chunk") {
      chunk = size();
    } else if (a == "--buffsize") {
      buff = size();
    } else if (a == "--piece") {
      const std::string v = value();
      if (v != "auto") {
        const auto p = tuning::parseSize(v);
        if (!p || *p == 0) usageError("--piece '" + v + "' is not a positive size or auto");
        piece = *p;
      }
    } else if (a == "--small-msg") {
      smallMsg = size();
    } else if (a == "--bucket") {
      bucket = size();
    } else if (a == "--no-shm") {
      noShm = true;
    } else if (a == "--dp") {
      dp = positive(a, value());
    } else if (a == "--zero") {
      const std::string v = value();
      if (v != "0" && v != "2" && v != "3") usageError("--zero '" + v + "' is not 0, 2 or 3");
      zero = v[0] - '0';
    } else if (a == "--pp") {
      pp = positive(a, value());
    } else if (a == "--compute-ms") {
      const std::string v = value();
      char* end = nullptr;
      const double ms = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(ms >= 0))
        usageError("--compute-ms '" + v + "' is not >= 0");
      computeMs = ms;
    } else if (a == "--simulate") {
      const std::string v = value();
      simulate = parseCollective(v);
      if (!simulate || *simulate == Collective::Send || *simulate == Collective::Recv)
        usageError("--simulate '" + v + "' is not a collective (allreduce, allgather, ...)");
    } else if (a == "--ranks") {
      ranks = positive(a, value());
    } else if (a == "--size") {
      const std::string v = value();
      const auto sz = tuning::parseSize(v);
      if (!sz) usageError("--size '" + v + "' is not a size (e.g. 64K, 1M)");
      simSize = *sz;
    } else if (a == "--root") {
      const std::string v = value();
      char* end = nullptr;
      root = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || root < 0) usageError("--root '" + v + "' is not a rank");
    } else if (a == "--json") {
      json = true;
    } else if (a == "--print-tune") {
      printTune = true;
    } else {
      usageError("unknown option '" + a + "'");
    }
  }

  // With --simulate, --algo may name one algorithm instead of rules.
  std::string simAlgorithm;
  if (simulate && !algoRules.empty() && algo::findAlgorithm(*simulate, algoRules) != nullptr) {
    simAlgorithm = algoRules;
    algoRules.clear();
  }
  // Parameters: defaults, the tuning file, then the flags (the library reads the same file).
  std::vector<tuning::Rule> rules = tuning::parseRules(algoRules, "--algo");
  tuning::CostParams cp;
  if (!tuneFile.empty()) cp = tuning::loadCostParams(tuneFile, "--tune-file", &rules);
  const bool flags = intraBw || intraLat || interBw || interLat || reduceBw;
  if (intraBw) cp.shm.beta = 1.0 / *intraBw;
  if (intraLat) cp.shm.alpha = *intraLat;
  if (interBw) cp.net.beta = 1.0 / *interBw;
  if (interLat) cp.net.alpha = *interLat;
  if (reduceBw) cp.gamma = 1.0 / *reduceBw;
  if (flags) cp.origin = tuneFile.empty() ? "command line" : "file " + tuneFile + " + command line";
  if (printTune) {
    std::fputs(cp.format().c_str(), stdout);
    return 0;
  }

  if (simulate) {
    if (!simSize && *simulate == Collective::Barrier) simSize = 0;
    if (!simSize) usageError("--simulate needs --size");
    if (ranks > 0 && !topoFile.empty()) usageError("--ranks and --topo exclude each other");
    if (ranks > 65536) usageError("--ranks " + std::to_string(ranks) + " is above 65536");
    const topology::Topology world =
        !topoFile.empty() ? topology::loadTopologyFile(topoFile)
        : ranks > 0       ? sim::blockedTopology(static_cast<int>(ranks), static_cast<int>(perHost))
                    : topology::uniformTopology(static_cast<int>(hosts), static_cast<int>(perHost));
    if (root >= world.size())
      usageError("--root " + std::to_string(root) + " is not a rank of " +
                 std::to_string(world.size()));
    SimulateRequest req{*simulate, simAlgorithm, rules, *simSize, static_cast<int>(root),
                        cp,        chunk,        buff,  piece,    smallMsg,
                        noShm,     json};
    return runSimulate(req, world);
  }
  if (ranks > 0 || simSize) usageError("--ranks and --size need --simulate");

  const topology::Topology world =
      topoFile.empty()
          ? topology::uniformTopology(static_cast<int>(hosts), static_cast<int>(perHost))
          : topology::loadTopologyFile(topoFile);
  const int n = world.size();
  if (n % pp != 0)
    usageError("--pp " + std::to_string(pp) + " does not divide the " + std::to_string(n) +
               " ranks");
  if (dp == 0) dp = n / pp;
  if (dp * pp != n)
    usageError("--dp " + std::to_string(dp) + " x --pp " + std::to_string(pp) + " = " +
               std::to_string(dp * pp) + " ranks, but the cluster has " + std::to_string(n));
  if (!params && layers > 0 && hidden > 0)
    params = 12.0 * static_cast<double>(layers) * static_cast<double>(hidden) *
             static_cast<double>(hidden);
  if (!params) usageError("--params (or --layers and --hidden) is required");
  if (pp > 1 && hidden == 0) usageError("--pp needs --hidden (activation size)");
  if (micro == 0) micro = pp;
  const std::size_t es = dataTypeSize(dtype);
  const double stageParams = *params / static_cast<double>(pp);
  const auto stageBytes = static_cast<std::size_t>(std::ceil(stageParams)) * es;
  const std::size_t modelChunk = std::min(chunk, buff / 2);

  // Stage 0's data-parallel group (every stage's group has the same shape in a uniform
  // cluster; the tool reports stage 0's).
  std::vector<int> dpGroup;
  for (int r = 0; r < dp; ++r) dpGroup.push_back(r);

  auto bucketed = [&](std::size_t total) {
    std::vector<std::pair<std::size_t, int>> ops;
    if (total == 0) return ops;
    const std::size_t full = total / bucket;
    if (full > 0) ops.emplace_back(bucket, static_cast<int>(full));
    if (total % bucket != 0) ops.emplace_back(total % bucket, 1);
    return ops;
  };
  std::vector<Entry> entries;
  if (dp > 1) {
    if (zero == 0) {
      entries.push_back({"gradient allreduce (data parallel)", Collective::Allreduce, dpGroup,
                         bucketed(stageBytes)});
    } else {
      entries.push_back({"gradient reduce_scatter (ZeRO-" + std::to_string(zero) + ")",
                         Collective::ReduceScatter, dpGroup, bucketed(stageBytes)});
      auto gathers = bucketed(stageBytes);
      if (zero == 3)
        for (auto& g : gathers) g.second *= 2;  // forward and backward
      entries.push_back({zero == 3 ? "parameter allgather (ZeRO-3, forward + backward)"
                                   : "parameter allgather (ZeRO-2, after the step)",
                         Collective::Allgather, dpGroup, gathers});
    }
  }
  if (pp > 1) {
    // Every micro-batch's activations forward and their gradients backward, per boundary;
    // stage boundaries run in parallel, the slowest (a cross-host one if any) reported.
    const std::size_t act = static_cast<std::size_t>(
                                std::ceil(static_cast<double>(batch) / static_cast<double>(micro) *
                                          static_cast<double>(seq) * static_cast<double>(hidden))) *
                            es;
    bool net = false;
    for (int s = 0; s + 1 < pp; ++s)
      net = net || world.link(s * static_cast<int>(dp), (s + 1) * static_cast<int>(dp)) ==
                       topology::LinkClass::Network;
    Entry e{"activation send/recv (pipeline, per boundary)",
            Collective::Send,
            {0, static_cast<int>(dp)},
            {{act, static_cast<int>(2 * micro)}}};
    e.p2p = true;
    e.network = net;
    entries.push_back(e);
  }

  json::Value out = json::Value::object();
  json::Value cluster = json::Value::object();
  cluster.set("ranks", json::Value::number(n));
  cluster.set("hosts", json::Value::number(world.numNodes()));
  cluster.set("summary", json::Value::string(world.summary()));
  cluster.set("params", json::Value::string(cp.summary()));
  cluster.set("shm_latency_s", json::Value::number(cp.shm.alpha));
  cluster.set("shm_bandwidth_Bps", json::Value::number(1.0 / cp.shm.beta));
  cluster.set("net_latency_s", json::Value::number(cp.net.alpha));
  cluster.set("net_bandwidth_Bps", json::Value::number(1.0 / cp.net.beta));
  cluster.set("reduce_bandwidth_Bps", json::Value::number(1.0 / cp.gamma));
  cluster.set("chunk_bytes", json::Value::number(static_cast<double>(modelChunk)));
  out.set("cluster", cluster);
  json::Value layout = json::Value::object();
  layout.set("params", json::Value::number(*params));
  layout.set("dtype", json::Value::string(toString(dtype)));
  layout.set("dp", json::Value::number(static_cast<double>(dp)));
  layout.set("zero", json::Value::number(static_cast<double>(zero)));
  layout.set("pp", json::Value::number(static_cast<double>(pp)));
  layout.set("micro_batches", json::Value::number(static_cast<double>(micro)));
  out.set("layout", layout);

  if (!json) {
    std::printf(
        "braid-plan: %s; layout dp %ld x pp %ld, ZeRO-%ld; %.4g parameters "
        "(%s), %s per stage\n",
        world.summary().c_str(), dp, pp, zero, *params, toString(dtype),
        bytesText(static_cast<double>(stageBytes)).c_str());
    std::printf("cost model: %s; chunk %s\n\n", cp.summary().c_str(),
                bytesText(static_cast<double>(modelChunk)).c_str());
  }

  double total = 0;
  json::Value list = json::Value::array();
  for (const Entry& e : entries) {
    json::Value je = json::Value::object();
    je.set("name", json::Value::string(e.what));
    je.set("collective", json::Value::string(e.p2p ? "sendrecv" : toString(e.coll)));
    je.set("group_size", json::Value::number(static_cast<double>(e.members.size())));
    double volume = 0;
    for (auto [b, k] : e.ops) volume += static_cast<double>(b) * k;
    je.set("volume_bytes", json::Value::number(volume));
    const topology::Topology group = world.subset(e.members);
    const tuning::CostModel model(cp, group, group.size(), modelChunk, piece, buff);
    if (!json) std::printf("%s: %s per step", e.what.c_str(), bytesText(volume).c_str());
    double seconds = 0;
    json::Value ops = json::Value::array();
    if (e.p2p) {
      const tuning::LinkCost l = e.network ? cp.net : cp.shm;
      for (auto [b, k] : e.ops) seconds += k * (l.alpha + static_cast<double>(b) * l.beta);
      if (!json)
        std::printf(" (%d x %s over %s)\n  predicted %s\n\n", e.ops[0].second,
                    bytesText(static_cast<double>(e.ops[0].first)).c_str(),
                    e.network ? "the network" : "shared memory",
                    tuning::formatSeconds(seconds).c_str());
      je.set("link", json::Value::string(e.network ? "network" : "shm"));
    } else {
      const double bus = volume * busFactor(e.coll, group.size());
      je.set("bus_bytes_per_rank", json::Value::number(bus));
      if (!json)
        std::printf(" on groups of %zu ranks (%s), each rank sends >= %s\n", e.members.size(),
                    group.summary().c_str(), bytesText(bus).c_str());
      bool sharedMemory = !noShm && group.numNodes() == 1;
      for (auto [bytes, times] : e.ops) {
        tuning::SelectionInputs in{e.coll,       bytes, group.size(), smallMsg,
                                   sharedMemory, false, &model,       &group};
        const std::string chosen = tuning::selectAlgorithm(rules, in);
        json::Value op = json::Value::object();
        op.set("bytes", json::Value::number(static_cast<double>(bytes)));
        op.set("times", json::Value::number(times));
        op.set("chosen", json::Value::string(chosen));
        json::Value preds = json::Value::array();
        std::optional<double> chosenSeconds;
        double best = -1;
        if (!json)
          std::printf("  %d x %s:\n", times, bytesText(static_cast<double>(bytes)).c_str());
        for (const auto& p : model.candidates(e.coll, bytes)) {
          json::Value jp = json::Value::object();
          jp.set("algorithm", json::Value::string(p.algorithm));
          jp.set("seconds", json::Value::number(p.seconds));
          jp.set("steps", json::Value::string(p.steps));
          preds.push(jp);
          if (p.algorithm == chosen) chosenSeconds = p.seconds;
          if (best < 0 || p.seconds < best) best = p.seconds;
          if (!json)
            std::printf("    %-20s %12s  (%s)%s\n", p.algorithm.c_str(),
                        tuning::formatSeconds(p.seconds).c_str(), p.steps.c_str(),
                        p.algorithm == chosen ? "  <- chosen" : "");
        }
        op.set("predictions", preds);
        // A choice the model has no formula for (one host's shared-memory algorithms): the
        // best modelled candidate stands in, and the output says so.
        const bool modelled = chosenSeconds.has_value();
        const double t = modelled ? *chosenSeconds : std::max(best, 0.0);
        op.set("seconds", json::Value::number(t));
        op.set("modelled", json::Value::boolean(modelled));
        if (!json) {
          if (!modelled)
            std::printf("    chosen %s: not modelled (shared memory), counted as %s\n",
                        chosen.c_str(), tuning::formatSeconds(t).c_str());
        }
        seconds += t * times;
        ops.push(op);
      }
      if (!json) std::printf("  predicted %s per step\n\n", tuning::formatSeconds(seconds).c_str());
    }
    je.set("ops", ops);
    je.set("seconds", json::Value::number(seconds));
    list.push(je);
    total += seconds;
  }
  out.set("collectives", list);
  out.set("total_seconds", json::Value::number(total));
  if (computeMs) {
    const double compute = *computeMs / 1e3;
    out.set("compute_seconds", json::Value::number(compute));
    out.set("hidden", json::Value::boolean(total <= compute));
    out.set("exposed_seconds", json::Value::number(std::max(0.0, total - compute)));
  }
  if (json) {
    std::printf("%s\n", json::write(out).c_str());
    return 0;
  }
  std::printf("total communication: %s per step", tuning::formatSeconds(total).c_str());
  if (computeMs) {
    const double compute = *computeMs / 1e3;
    if (total <= compute)
      std::printf("; hides behind %s of compute if fully overlapped (%.0f%% of it)\n",
                  tuning::formatSeconds(compute).c_str(),
                  compute > 0 ? 100 * total / compute : 0.0);
    else
      std::printf("; does NOT hide behind %s of compute: %s exposed per step\n",
                  tuning::formatSeconds(compute).c_str(),
                  tuning::formatSeconds(total - compute).c_str());
  } else {
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace braid::plan

int main(int argc, char** argv) {
  try {
    return braid::plan::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-plan: %s\n", e.what());
    return 1;
  }
}
