// Straggler attribution and metrics of a communicator (core/straggler.hpp, core/metrics.hpp):
// the exchanges of the ranks' waits through the store, the metrics thread, the summary at
// destruction.
#include <braid/comm.hpp>
#include <thread>

#include "core/comm_impl.hpp"

namespace braid {

using namespace std::chrono_literals;

namespace {

std::string waitsKey(const char* kind, int rank, std::uint64_t slot) {
  return std::string("straggler/") + kind + "/" + std::to_string(rank) + "/" + std::to_string(slot);
}

}  // namespace

void Comm::Impl::startObservability() {
  const bool metricsOn = !opts.metricsFile.empty() || opts.metricsPort >= 0;
  preciseEvery = opts.stragglerSample != 0         ? opts.stragglerSample
                 : metricsOn || opts.logLevel >= 2 ? Options::kDefaultStragglerSample
                                                   : 0;
  if (preciseEvery > 1 && (preciseEvery & (preciseEvery - 1)) == 0) preciseMask = preciseEvery - 1;
  recorder->setPreciseEvery(preciseEvery);
  if (preciseEvery != 0 && size > 1)
    straggler = std::make_unique<core::StragglerStats>(size, preciseEvery);
  if (!metricsOn) return;
  metrics = std::make_unique<core::Metrics>(id, rank, size, &opCounters);
  if (!opts.metricsFile.empty())
    metricsPath = core::Timeline::expandPath(opts.metricsFile, rank, id);
  core::MetricsServer::add(metrics.get());
  if (opts.metricsPort >= 0) {
    std::string error;
    const int port = core::MetricsServer::serve(opts.metricsAddress, opts.metricsPort, &error);
    if (port < 0)
      log(1, "metrics server not started: " + error);
    else
      log(2,
          "metrics at http://" +
              (opts.metricsAddress.find(':') != std::string::npos ? "[" + opts.metricsAddress + "]"
                                                                  : opts.metricsAddress) +
              ":" + std::to_string(port) + "/metrics");
  }
  metricsThread = std::make_unique<core::MetricsThread>(opts.metricsInterval, [this] {
    try {
      metricsTick();
    } catch (const std::exception& e) {
      log(3, std::string("metrics: ") + e.what());
    }
  });
}

void Comm::Impl::absorbWaits(
    const std::vector<std::optional<std::vector<core::WaitSample>>>& windows) {
  std::vector<core::StragglerVerdict> verdicts;
  straggler->analyze(windows, [&](const core::StragglerVerdict& v) { verdicts.push_back(v); });
  std::vector<core::Clock::time_point> started;
  recorder->annotate(verdicts, timeline ? &started : nullptr);
  if (timeline)
    for (std::size_t i = 0; i < verdicts.size(); ++i)
      if (started[i] != core::Clock::time_point{})
        timeline->straggler(verdicts[i].seq, verdicts[i].coll, verdicts[i].lastRank,
                            verdicts[i].lateNs, started[i]);
  if (metrics) metrics->setStraggler(*straggler);
}

void Comm::Impl::metricsTick() {
  // Every rank publishes its window; rank 0 joins those it finds (never waiting for one).
  if (straggler && !aborted.load()) {
    const std::uint64_t round = ++liveRound;
    commStore->set(waitsKey("live", rank, 0), core::encodeWaits(round, recorder->waits()));
    if (rank == 0) {
      std::vector<std::optional<std::vector<core::WaitSample>>> windows(size);
      bool all = true;
      for (int r = 0; r < size && all; ++r) {
        const std::string key = waitsKey("live", r, 0);
        if (!commStore->check({key})) {
          all = false;
          break;
        }
        if (auto d = core::decodeWaits(commStore->get(key, 1000ms))) windows[r] = d->second;
      }
      if (all) {
        std::lock_guard<std::mutex> lk(stragglerMu);
        absorbWaits(windows);
      }
    }
  }
  if (!metricsPath.empty() &&
      !core::writeMetricsFile(metricsPath, core::Metrics::render({metrics.get()})))
    log(1, "cannot write BRAID_METRICS_FILE " + metricsPath);
}

std::string Comm::Impl::stragglerReport() {
  if (size == 1) return "straggler report, communicator " + id + ", 1 rank: nothing to attribute\n";
  if (!straggler)
    throw Error(ErrorCode::InvalidArgument,
                "stragglerReport on rank " + std::to_string(rank) + " of communicator " + id +
                    ": straggler attribution is off (set BRAID_STRAGGLER=1 or "
                    "Options::stragglerSample before the communicator is created)");
  std::lock_guard<std::mutex> lk(stragglerMu);
  // Round k uses slot k % 2: a rank can be at round k + 2 only after every rank finished
  // reading round k + 1, hence round k.
  const std::uint64_t round = ++stragglerRound;
  commStore->set(waitsKey("round", rank, round % 2), core::encodeWaits(round, recorder->waits()));
  const auto until = std::chrono::steady_clock::now() + opts.execTimeout;
  std::vector<std::optional<std::vector<core::WaitSample>>> windows(size);
  for (int r = 0; r < size; ++r) {
    const std::string key = waitsKey("round", r, round % 2);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        throw Error(ErrorCode::Timeout, "stragglerReport on rank " + std::to_string(rank) +
                                            " of communicator " + id + ": rank " +
                                            std::to_string(r) + " did not publish its waits");
      const auto d = core::decodeWaits(commStore->get(key, left));
      if (d && d->first == round) {
        windows[r] = d->second;
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
  }
  absorbWaits(windows);
  // Rank 0 (whose process often serves the store) leaves only after every rank has read.
  const std::string done = "straggler/read/" + std::to_string(round);
  std::int64_t readers = commStore->add(done, 1);
  while (rank == 0 && readers < size) {
    if (std::chrono::steady_clock::now() > until)
      throw Error(ErrorCode::Timeout, "stragglerReport on rank 0 of communicator " + id +
                                          ": not every rank read the waits");
    std::this_thread::sleep_for(1ms);
    readers = commStore->add(done, 0);
  }
  return straggler->report(id);
}

void Comm::Impl::stopObservability() {
  if (metricsThread) metricsThread->stop();
  // The last exchange: every rank publishes; rank 0 waits up to BRAID_DIAG_GRACE for the
  // others (with BRAID_DEBUG=INFO or metrics), then summarizes (INFO) and writes the file.
  if (straggler && !aborted.load() && !failedOnce.load()) {
    try {
      commStore->set(waitsKey("final", rank, 0), core::encodeWaits(0, recorder->waits()));
      if (rank == 0) {
        std::vector<std::string> keys;
        for (int r = 0; r < size; ++r) keys.push_back(waitsKey("final", r, 0));
        bool all = commStore->check(keys);
        if (!all && (opts.logLevel >= 2 || metrics) && opts.diagGrace.count() > 0) {
          try {
            commStore->wait(keys, opts.diagGrace);
            all = true;
          } catch (const Error&) {
          }
        }
        if (all) {
          std::vector<std::optional<std::vector<core::WaitSample>>> windows(size);
          for (int r = 0; r < size; ++r)
            if (auto d = core::decodeWaits(commStore->get(keys[r], 1000ms))) windows[r] = d->second;
          std::lock_guard<std::mutex> lk(stragglerMu);
          absorbWaits(windows);
        }
        std::lock_guard<std::mutex> lk(stragglerMu);
        if (opts.logLevel >= 2)
          log(2, straggler->report(id) +
                     (all ? ""
                          : "(the ranks that had not reached destruction within "
                            "BRAID_DIAG_GRACE are missing from the last exchange)"));
      }
    } catch (const std::exception& e) {
      log(2, std::string("straggler summary unavailable: ") + e.what());
    }
  }
  if (metrics) {
    if (!metricsPath.empty() &&
        !core::writeMetricsFile(metricsPath, core::Metrics::render({metrics.get()})))
      log(1, "cannot write BRAID_METRICS_FILE " + metricsPath);
    core::MetricsServer::remove(metrics.get());
  }
}

}  // namespace braid
