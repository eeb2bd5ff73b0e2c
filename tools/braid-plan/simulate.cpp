#include "simulate.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "algo/algorithm.hpp"
#include "sim/simulate.hpp"
#include "topology/json.hpp"

namespace braid::plan {
namespace {

namespace json = topology::json;

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

double peakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux: KiB
}

}  // namespace

int runSimulate(const SimulateRequest& req, const topology::Topology& world) {
  const int n = world.size();
  const std::size_t modelChunk = std::min(req.chunk, req.buff / 2);
  const tuning::CostModel model(req.cost, world, n, std::max<std::size_t>(modelChunk, 1), req.piece,
                                req.buff);
  std::string name = req.algorithm;
  std::string why = "--algo";
  if (name.empty()) {
    // As the library selects: rules, then (one host with shared memory) the shm policy, else
    // the cost model or the fixed policy.
    const bool sharedMemory = !req.noShm && world.numNodes() == 1;
    tuning::SelectionInputs in{req.coll,     req.bytes, n,      req.smallMsg,
                               sharedMemory, false,     &model, &world};
    name = tuning::selectAlgorithm(req.rules, in);
    why = "selected as the library would";
  }
  const algo::AlgoInfo* a = algo::findAlgorithm(req.coll, name);
  if (a == nullptr) {
    std::fprintf(stderr, "braid-plan: %s has no algorithm '%s' (braid-info lists them)\n",
                 toString(req.coll), name.c_str());
    return 2;
  }
  if (sim::needsSharedMemory(*a)) {
    std::fprintf(stderr,
                 "braid-plan: %s %s (%s) needs a shared-memory group, which the simulated "
                 "transport does not have; the simulator does not run another algorithm in its "
                 "place. Name one with --algo, or --no-shm to select as the library does "
                 "without shared memory.\n",
                 toString(req.coll), a->name, why.c_str());
    return 2;
  }
  sim::SimOptions opts;
  opts.cost = req.cost;
  opts.chunkBytes = req.chunk;
  opts.scratchBytes = req.buff;
  opts.pieceBytes = req.piece;
  opts.root = req.root;
  const auto t0 = std::chrono::steady_clock::now();
  const sim::SimResult r = sim::simulate(*a, world, req.bytes, opts);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double rss = peakRssBytes();
  std::optional<tuning::Prediction> predicted = model.predict(req.coll, a->name, r.bytes);

  if (req.json) {
    json::Value out = json::Value::object();
    out.set("collective", json::Value::string(toString(req.coll)));
    out.set("algorithm", json::Value::string(a->name));
    out.set("ranks", json::Value::number(n));
    out.set("hosts", json::Value::number(world.numNodes()));
    out.set("ranks_per_host", json::Value::number(world.maxLocalSize()));
    out.set("topology", json::Value::string(world.summary()));
    out.set("bytes", json::Value::number(static_cast<double>(r.bytes)));
    out.set("elements", json::Value::number(static_cast<double>(r.elements)));
    out.set("chunk_bytes", json::Value::number(static_cast<double>(req.chunk)));
    out.set("scratch_bytes", json::Value::number(static_cast<double>(req.buff)));
    out.set("piece_bytes", json::Value::number(static_cast<double>(r.pieceBytes)));
    out.set("params", json::Value::string(req.cost.summary()));
    json::Value bpr = json::Value::object();
    bpr.set("max", json::Value::number(static_cast<double>(r.maxBytesPerRank)));
    bpr.set("min", json::Value::number(static_cast<double>(r.minBytesPerRank)));
    bpr.set("total", json::Value::number(static_cast<double>(r.totalBytes)));
    out.set("bytes_per_rank", bpr);
    json::Value link = json::Value::object();
    link.set("shm", json::Value::number(static_cast<double>(r.bytesByClass[1])));
    link.set("network", json::Value::number(static_cast<double>(r.bytesByClass[2])));
    out.set("bytes_by_link", link);
    json::Value msgs = json::Value::object();
    msgs.set("max", json::Value::number(static_cast<double>(r.maxMessagesPerRank)));
    msgs.set("total", json::Value::number(static_cast<double>(r.totalMessages)));
    out.set("messages", msgs);
    out.set("steps", json::Value::number(r.steps));
    out.set("predicted_seconds", json::Value::number(r.seconds));
    out.set("model_seconds", predicted ? json::Value::number(predicted->seconds) : json::Value());
    out.set("model_steps", predicted ? json::Value::string(predicted->steps) : json::Value());
    out.set("wall_seconds", json::Value::number(wall));
    out.set("peak_rss_bytes", json::Value::number(rss));
    out.set("fiber_switches", json::Value::number(static_cast<double>(r.switches)));
    std::printf("%s\n", json::write(out).c_str());
    return 0;
  }
  std::printf("braid-plan --simulate: %s %s (%s) on %s, %s (%zu fp32%s), chunk %s\n",
              toString(req.coll), a->name, why.c_str(), world.summary().c_str(),
              bytesText(static_cast<double>(r.bytes)).c_str(), r.elements,
              r.ranks > 1 && r.bytes != r.elements * 4 ? " per rank" : "",
              bytesText(static_cast<double>(req.chunk)).c_str());
  std::printf("cost parameters: %s\n\n", req.cost.summary().c_str());
  std::printf("bytes sent per rank: max %s, min %s; all ranks %s (shm %s, network %s)\n",
              bytesText(static_cast<double>(r.maxBytesPerRank)).c_str(),
              bytesText(static_cast<double>(r.minBytesPerRank)).c_str(),
              bytesText(static_cast<double>(r.totalBytes)).c_str(),
              bytesText(static_cast<double>(r.bytesByClass[1])).c_str(),
              bytesText(static_cast<double>(r.bytesByClass[2])).c_str());
  std::printf("messages: max %llu per rank, %llu in all\n",
              static_cast<unsigned long long>(r.maxMessagesPerRank),
              static_cast<unsigned long long>(r.totalMessages));
  std::printf("steps (longest chain of messages): %u\n", r.steps);
  std::printf("predicted time: %s simulated", tuning::formatSeconds(r.seconds).c_str());
  if (predicted)
    std::printf(", %s by the cost model (%s)\n", tuning::formatSeconds(predicted->seconds).c_str(),
                predicted->steps.c_str());
  else
    std::printf(" (the cost model has no formula for it)\n");
  std::printf("simulator: %.2f s wall, peak RSS %s, %llu fiber switches\n", wall,
              bytesText(rss).c_str(), static_cast<unsigned long long>(r.switches));
  return 0;
}

}  // namespace braid::plan
