// Runs an algorithm's ranks as threads over the inproc transport, with a tiny chunk and scratch
// so the pipelining paths run, and a deadline so a hang fails instead of blocking.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "algo/algorithm.hpp"
#include "algo/subgroup.hpp"
#include "topology/traffic_transport.hpp"
#include "transport/inproc/inproc_transport.hpp"

namespace braid::test {

struct RankSetup {
  int size = 1;
  std::size_t chunkBytes = 64;
  std::size_t scratchBytes = 4096;
  /// Bound on every transport wait; a rank stuck past it gets Error(Timeout).
  std::chrono::milliseconds deadline{20000};
  std::uint64_t tag = 0x5eedull << 8;
  /// Per-rank tag override (empty: every rank uses `tag`).
  std::vector<std::uint64_t> tags;
  std::chrono::microseconds spin{20};
  /// Given to every rank as Context::topo (its size must be `size`); nullptr: none.
  const topology::Topology* topo = nullptr;
  /// When set (and topo too), each rank's transport counts its traffic by link class, stored
  /// here by rank once the rank finished.
  std::vector<topology::Traffic>* traffic = nullptr;
};

using RankBody = std::function<void(algo::Context&)>;

/// Runs body on every rank, each on its own thread with its own endpoint and scratch. Returns
/// each rank's exception (null when it succeeded). If a rank is still running 10 s after the
/// deadline (stuck outside the transport), the process aborts naming it.
inline std::vector<std::exception_ptr> runRanks(const RankSetup& setup, const RankBody& body) {
  const int n = setup.size;
  if (setup.traffic != nullptr) setup.traffic->assign(static_cast<std::size_t>(n), {});
  transport::InprocFabric fabric(n, setup.spin);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<char> done(static_cast<std::size_t>(n), 0);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  const auto deadline = transport::Clock::now() + setup.deadline;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r, ep = fabric.endpoint(r)]() mutable {
      const auto ur = static_cast<std::size_t>(r);
      try {
        std::vector<std::uint8_t> scratch(setup.scratchBytes);
        std::unique_ptr<topology::TrafficCountingTransport> counting;
        if (setup.traffic != nullptr && setup.topo != nullptr)
          counting = std::make_unique<topology::TrafficCountingTransport>(*ep, *setup.topo);
        transport::Transport& tr = counting ? *counting : *ep;
        algo::Context ctx{tr,
                          r,
                          n,
                          setup.chunkBytes,
                          scratch,
                          deadline,
                          setup.tags.empty() ? setup.tag : setup.tags[ur],
                          /*deterministic=*/false,
                          setup.topo};
        // A topology's hierarchies run their phases on views of this transport (no
        // communicator, so no sub-communicators).
        std::optional<algo::ViewGroups> views;
        if (setup.topo != nullptr) {
          views.emplace(ctx);
          ctx.groups = &*views;
        }
        body(ctx);
        if (counting) (*setup.traffic)[ur] = counting->traffic();
      } catch (...) {
        errors[ur] = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(mu);
      done[ur] = 1;
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_until(lk, deadline + std::chrono::seconds(10), [&] { return finished == n; })) {
      for (int r = 0; r < n; ++r)
        if (!done[static_cast<std::size_t>(r)]) std::fprintf(stderr, "rank %d is stuck\n", r);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  return errors;
}

/// The message of a rank's exception, or "" when it succeeded.
inline std::string errorText(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace braid::test
