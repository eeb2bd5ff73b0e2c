#include "core/calibrate.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/reduce.hpp"

namespace braid::core {
namespace {

using Clock = std::chrono::steady_clock;

// Bandwidth is the slope between two large sizes, so constant costs (and a shaper's burst
// allowance, e.g. tc tbf's, which lets the first ~256 KiB through at line rate) cancel out.
constexpr std::size_t kSmall = 8;
constexpr std::size_t kMedium = 256 * 1024;
constexpr std::size_t kLarge = 1024 * 1024;
constexpr int kSmallTrips = 10;  // after 2 warm-up trips
constexpr int kLargeTrips = 3;   // after 1 warm-up trip, for each large size
constexpr int kWarmSmall = 2;
constexpr int kWarmLarge = 1;
constexpr int kRingBlocks = 15;  // after 1 warm-up block
constexpr int kRingStepsPerBlock = 8;

/// Rank 0's side of a ping-pong (initiator) or the peer's (echo): `trips` round trips of
/// `bytes`; returns the best round trip in seconds (initiator only).
double pingPong(transport::Transport& tr, int peer, bool initiator, std::vector<std::uint8_t>& buf,
                std::size_t bytes, int warm, int trips, std::uint64_t tag,
                transport::Deadline deadline) {
  double best = 1e30;
  for (int i = 0; i < warm + trips; ++i) {
    transport::Request a, b;
    const auto t0 = Clock::now();
    if (initiator) {
      tr.postSend(peer, buf.data(), bytes, tag, a);
      tr.postRecv(peer, buf.data() + kLarge, bytes, tag, b);
      tr.wait(a, deadline);
      tr.wait(b, deadline);
    } else {
      tr.postRecv(peer, buf.data(), bytes, tag, b);
      tr.wait(b, deadline);
      tr.postSend(peer, buf.data(), bytes, tag, a);
      tr.wait(a, deadline);
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i >= warm) best = std::min(best, s);
  }
  return best;
}

/// One dependent step of a ring: send kSmall bytes to `next`, receive from `prev`.
struct Hop {
  int next;
  int prev;
};

/// Every rank at once: dependent ring steps of kSmall bytes (send to `next`, receive from
/// `prev`, wait for both, repeat), the step of a ring or a pairwise exchange as a collective
/// runs it, with every rank of the layout busy at the same time. With several hops, one
/// iteration steps each in turn (a network ring step, then a host ring step: the pattern of a
/// hierarchical algorithm). Returns this rank's median over kRingBlocks blocks of
/// kRingStepsPerBlock iterations, in seconds per iteration, after one warm-up block. A ring over
/// several hosts steps at the pace of its slowest hop.
double ringStep(transport::Transport& tr, std::initializer_list<Hop> hops, std::uint64_t tag,
                transport::Deadline deadline) {
  std::uint8_t out[kSmall] = {}, in[kSmall] = {};
  std::vector<double> perStep;
  for (int b = 0; b < 1 + kRingBlocks; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kRingStepsPerBlock; ++i) {
      for (const Hop& h : hops) {
        transport::Request s, r;
        tr.postRecv(h.prev, in, kSmall, tag, r);
        tr.postSend(h.next, out, kSmall, tag, s);
        tr.wait(s, deadline);
        tr.wait(r, deadline);
      }
    }
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (b > 0) perStep.push_back(t / kRingStepsPerBlock);
  }
  std::nth_element(perStep.begin(), perStep.begin() + kRingBlocks / 2, perStep.end());
  return perStep[kRingBlocks / 2];
}

/// alpha, beta of one link from the initiator's best round trips.
tuning::LinkCost fit(double smallTrip, double mediumTrip, double largeTrip) {
  tuning::LinkCost l;
  l.alpha = smallTrip / 2;
  const double perByte = (largeTrip - mediumTrip) / 2 / static_cast<double>(kLarge - kMedium);
  // A large trip no slower than a medium one (clock resolution, noise): 100 GB/s as a floor.
  l.beta = std::max(perByte, 1e-11);
  return l;
}

}  // namespace

tuning::CostParams calibrate(transport::Transport& tr, Store& commStore,
                             const topology::Topology& topo, int rank, int size,
                             const tuning::CostParams& base, std::uint64_t tag,
                             std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  int shmPeer = -1;
  int netPeer = -1;
  if (topo.size() == size) {
    for (int r = 1; r < size; ++r) {
      const auto link = topo.link(0, r);
      if (link == topology::LinkClass::Shm && shmPeer < 0) shmPeer = r;
      if (link == topology::LinkClass::Network && netPeer < 0) netPeer = r;
    }
  } else if (size > 1) {
    shmPeer = 1;
  }
  // Step latencies, every rank at once: over the ring of all ranks when the layout spans
  // hosts (network), then over the ring of each host's ranks on every host with two or more
  // (shared memory); rank 0 keeps its own medians.
  double netStep = 0, shmStep = 0;
  const bool mapped = topo.size() == size;
  const Hop netHop{(rank + 1) % size, (rank + size - 1) % size};
  const bool spans = mapped && topo.numNodes() > 1;
  if (spans) netStep = ringStep(tr, {netHop}, tag, deadline);
  const std::vector<int>* local = nullptr;
  std::vector<int> everyone;
  if (mapped) {
    local = &topo.node(topo.nodeOf(rank)).ranks;
  } else {
    for (int r = 0; r < size; ++r) everyone.push_back(r);
    local = &everyone;
  }
  if (local->size() > 1) {
    const int n = static_cast<int>(local->size());
    const int at = static_cast<int>(std::find(local->begin(), local->end(), rank) - local->begin());
    const Hop shmHop{(*local)[static_cast<std::size_t>((at + 1) % n)],
                     (*local)[static_cast<std::size_t>((at + n - 1) % n)]};
    shmStep = ringStep(tr, {shmHop}, tag, deadline);
    // Across hosts, a shared-memory step mostly follows a wait on the network (hierarchical
    // algorithms: in-host phase, network phase, in-host phase), and with more ranks than CPUs
    // the host peer has often gone to sleep by then: measure a network step followed by a host
    // step, and charge the host step what that adds (every host runs this at once; a host of
    // one rank still takes part in the network steps).
    if (spans) shmStep = std::max(shmStep, ringStep(tr, {netHop, shmHop}, tag, deadline) - netStep);
  } else if (spans) {
    ringStep(tr, {netHop}, tag, deadline);  // the network side of the others' mixed steps
  }
  std::vector<std::uint8_t> buf(2 * kLarge, 0x5a);
  const std::string key = "tune/params";
  if (rank == 0) {
    tuning::CostParams p = base;
    for (int peer : {shmPeer, netPeer}) {
      if (peer < 0) continue;
      const double small =
          pingPong(tr, peer, true, buf, kSmall, kWarmSmall, kSmallTrips, tag, deadline);
      const double medium =
          pingPong(tr, peer, true, buf, kMedium, kWarmLarge, kLargeTrips, tag, deadline);
      const double large =
          pingPong(tr, peer, true, buf, kLarge, kWarmLarge, kLargeTrips, tag, deadline);
      auto& link = peer == shmPeer ? p.shm : p.net;
      link = fit(small, medium, large);
      // A collective's step costs what the ring measured, with every rank busy, not what an
      // idle pair's best round trip suggests (2-3x more for 4 ranks on 2 cores).
      link.alpha = std::max(link.alpha, peer == shmPeer ? shmStep : netStep);
    }
    // The active kernel reducing 1 MiB of float32 into 1 MiB, best of 3.
    std::vector<float> dst(256 * 1024, 1.0f), src(256 * 1024, 2.0f);
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      kernels::reduceInto(DataType::Float32, ReduceOp::Sum, dst.data(), src.data(), src.size());
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    p.gamma = std::max(best / static_cast<double>(src.size() * sizeof(float)), 1e-12);
    p.origin = "calibrated";
    const std::string text = p.format();
    commStore.set(key, std::vector<std::uint8_t>(text.begin(), text.end()));
  } else if (rank == shmPeer || rank == netPeer) {
    pingPong(tr, 0, false, buf, kSmall, kWarmSmall, kSmallTrips, tag, deadline);
    pingPong(tr, 0, false, buf, kMedium, kWarmLarge, kLargeTrips, tag, deadline);
    pingPong(tr, 0, false, buf, kLarge, kWarmLarge, kLargeTrips, tag, deadline);
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const auto value = commStore.get(key, std::max(left, std::chrono::milliseconds(1)));
  tuning::CostParams p = tuning::parseCostParams(
      std::string_view(reinterpret_cast<const char*>(value.data()), value.size()),
      "BRAID_TUNE measurement (store key " + key + ")");
  p.origin = "calibrated";
  return p;
}

}  // namespace braid::core
