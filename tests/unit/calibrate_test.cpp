// BRAID_TUNE's measurement (src/core/calibrate.cpp) on ranks as threads over the inproc
// transport, with some hops slowed down on purpose: what the calibrated parameters must then
// contain, and that every rank holds the same ones.
#include "core/calibrate.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "store/memory_store.hpp"
#include "transport/inproc/inproc_transport.hpp"

namespace braid::core {
namespace {

using namespace std::chrono_literals;

/// Holds every message this rank sends to a peer in `slowTo` for `delay` before posting it.
class SlowHops final : public transport::Transport {
 public:
  SlowHops(std::unique_ptr<transport::Transport> inner, std::vector<int> slowTo,
           std::chrono::microseconds delay)
      : inner_(std::move(inner)), slowTo_(std::move(slowTo)), delay_(delay) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                transport::Request& req) override {
    for (int p : slowTo_)
      if (p == peer) std::this_thread::sleep_for(delay_);
    inner_->postSend(peer, data, bytes, tag, req);
  }
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                transport::Request& req) override {
    inner_->postRecv(peer, data, bytes, tag, req);
  }
  bool test(transport::Request& req) override { return inner_->test(req); }
  void wait(transport::Request& req, transport::Deadline deadline) override {
    inner_->wait(req, deadline);
  }
  std::string describePeer(int peer) const override { return inner_->describePeer(peer); }
  void abort(const std::string& why) override { inner_->abort(why); }

 private:
  std::unique_ptr<transport::Transport> inner_;
  std::vector<int> slowTo_;
  std::chrono::microseconds delay_;
};

/// Runs calibrate() on `size` threads; rank r's sends to the peers in slow[r] are delayed.
std::vector<tuning::CostParams> calibrateThreads(const topology::Topology& topo, int size,
                                                 const std::vector<std::vector<int>>& slow,
                                                 std::chrono::microseconds delay) {
  transport::InprocFabric fabric(size);
  MemoryStore store;
  std::vector<tuning::CostParams> params(static_cast<std::size_t>(size));
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    threads.emplace_back([&, r, ur] {
      errors[ur] = test::errorOf([&] {
        SlowHops tr(fabric.endpoint(r), slow[ur], delay);
        params[ur] = calibrate(tr, store, topo, r, size, tuning::CostParams{}, 0x7e57, 60000ms);
      });
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  return params;
}

// 2 hosts x 2 ranks, blocked: the ring of all ranks 0 -> 1 -> 2 -> 3 -> 0 crosses between the
// hosts on 1 -> 2 and 3 -> 0, which are slowed down by 4 ms; rank 0's ping-pong peers (1 in its
// host, 2 on the other) are not. So only the ring steps with every rank busy can see the 4 ms,
// and the network's alpha must carry them.
TEST(Calibration, NetworkLatencyIsTheBusyRingStepNotAnIdlePingPong) {
  const topology::Topology topo = topology::uniformTopology(2, 2);
  ASSERT_EQ(topo.nodeOf(1), 0);
  ASSERT_EQ(topo.nodeOf(2), 1);
  const auto delay = 4000us;
  const auto params = calibrateThreads(topo, 4, {{}, {2}, {}, {0}}, delay);
  for (int r = 0; r < 4; ++r) {
    const tuning::CostParams& p = params[static_cast<std::size_t>(r)];
    EXPECT_TRUE(p == params[0]) << "rank " << r << " holds " << p.summary() << ", rank 0 "
                                << params[0].summary();
    EXPECT_EQ(p.origin, "calibrated");
    EXPECT_GE(p.net.alpha, 4e-3) << "rank " << r << ": " << p.summary();
    EXPECT_GT(p.net.beta, 0) << p.summary();
    EXPECT_GT(p.gamma, 0) << p.summary();
  }
}

// The same layout with one hop inside rank 0's host slowed down instead (1 -> 0, by 2 ms): each
// step of the host ring 0 <-> 1 waits for it, so the shared memory's alpha must be at least
// 2 ms, where the ping-pong with rank 1 (one slow direction per round trip) gives only half.
TEST(Calibration, SharedMemoryLatencyIsTheHostRingStep) {
  const topology::Topology topo = topology::uniformTopology(2, 2);
  const auto params = calibrateThreads(topo, 4, {{}, {0}, {}, {}}, 2000us);
  for (int r = 0; r < 4; ++r) {
    const tuning::CostParams& p = params[static_cast<std::size_t>(r)];
    EXPECT_TRUE(p == params[0]) << "rank " << r << ": " << p.summary();
    EXPECT_GE(p.shm.alpha, 2e-3) << "rank " << r << ": " << p.summary();
  }
}

// One host (no topology of the communicator's size): only the shared-memory class is measured;
// the network keeps the base values.
TEST(Calibration, OneHostKeepsTheNetworkDefaults) {
  const topology::Topology none;
  const auto params = calibrateThreads(none, 3, {{}, {}, {}}, 0us);
  const tuning::CostParams defaults;
  for (const auto& p : params) {
    EXPECT_TRUE(p == params[0]) << p.summary();
    // Through the tuning-file text (six significant digits): equal up to rounding.
    EXPECT_NEAR(p.net.alpha, defaults.net.alpha, 1e-6 * defaults.net.alpha) << p.summary();
    EXPECT_NEAR(p.net.beta, defaults.net.beta, 1e-6 * defaults.net.beta) << p.summary();
    EXPECT_GT(p.shm.alpha, 0) << p.summary();
  }
}

}  // namespace
}  // namespace braid::core
