// The simulated transport: every rank of a communicator as a fiber (its own small stack) in ONE
// thread, running an algorithm's real code over transport::Transport, with virtual clocks and
// alpha-beta costs per link class instead of wires. Used by braid-plan --simulate (docs/plan.md,
// "Simulator") and by the tests that check every algorithm's traffic at 1,024 ranks.
//
// Model (docs/plan.md has the reasoning and the limits):
// - Matching is the transport's contract: per (sender, receiver) pair FIFO, exact size and tag
//   (else Error(Mismatch)). Sends complete when posted (eager): a message waits for its receive
//   in the receiver's queue.
// - A message of m bytes posted by rank s at its clock t to rank d over link class c
//   (topology::Topology::link) leaves when the sender's egress link of that class is free,
//   occupies it for m x beta_c, arrives alpha_c later, and is then taken in by the receiver's
//   ingress link of that class (free again m x beta_c after it starts): shared-memory links
//   are one per rank and direction, the network link one per host and direction (every rank of
//   a host shares its NIC, as in tuning::CostModel). Latencies of messages in flight overlap.
// - A rank's clock advances only in wait()/test(): to the completion time of the request (a
//   send: when its last byte left; a receive: when its last byte arrived). Computation
//   (reductions, copies) costs nothing. The predicted time is the largest clock at the end.
// - Steps: every message carries its sender's depth + 1; a completed receive raises the
//   receiver's depth to the message's. The deepest message is the longest dependency chain.
// Fibers run in virtual-time order (the runnable fiber with the smallest clock first), so the
// shared links see messages in the order of their post times whatever the host scheduling.
// Deterministic: the same inputs give the same numbers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "topology/topology.hpp"
#include "transport/transport.hpp"
#include "tuning/cost_model.hpp"

namespace braid::sim {

/// What one rank did, by link class (topology::LinkClass as index).
struct RankTraffic {
  std::array<std::uint64_t, topology::kLinkClasses> bytesSent{};
  std::array<std::uint64_t, topology::kLinkClasses> messagesSent{};
  std::uint64_t bytesReceived = 0;
  std::uint64_t messagesReceived = 0;
  double clock = 0;         // virtual seconds when the rank finished
  std::uint32_t depth = 0;  // longest chain of messages ending at this rank
  std::uint64_t totalSent() const noexcept;
  std::uint64_t totalMessages() const noexcept;
};

struct EngineOptions {
  tuning::CostParams cost;
  /// Copy every payload into the receive buffer (the ranks then need their own buffers). Off:
  /// the transport moves sizes only, so every rank may use the same buffers (one thread runs
  /// one fiber at a time, so that is no data race) and memory stays bounded at 4,096 ranks.
  bool copyPayloads = false;
  /// Stack of every fiber (mapped lazily: only touched pages count; a guard page below).
  std::size_t stackBytes = std::size_t{256} << 10;
};

class Engine {
 public:
  /// `topo` (one rank per entry) must outlive the engine.
  Engine(const topology::Topology& topo, EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int size() const noexcept { return n_; }

  /// Runs body(rank, transport) on every rank, each a fiber, until all returned. Throws the
  /// first rank's exception (the others are then aborted: their waits throw Error(Aborted)),
  /// or Error(Internal) naming the stuck ranks and what they wait for when no rank can run
  /// (a deadlock of the schedule). Call once per engine.
  void run(const std::function<void(int rank, transport::Transport& tr)>& body);

  const RankTraffic& traffic(int rank) const;
  /// Largest clock: the predicted time of the operation.
  double seconds() const noexcept;
  /// Longest dependency chain of messages.
  std::uint32_t steps() const noexcept;
  /// Context switches between fibers (what the simulation's own run time is made of).
  std::uint64_t switches() const noexcept { return switches_; }

  /// Internal: the first frame of rank `rank`'s fiber (runs the body, then returns to the
  /// scheduler for good).
  static void fiberMain(Engine* e, int rank);

 private:
  class RankTransport;
  struct Message {
    std::uint64_t tag;
    std::size_t bytes;
    const std::uint8_t* data;        // the sender's buffer (copyPayloads, matched at post)
    std::vector<std::uint8_t> copy;  // copyPayloads, unmatched: the payload, buffered
    double arrival;
    std::uint32_t depth;
  };
  /// Messages from one sender that no receive took yet, or receives that no message met yet
  /// (never both). FIFOs as vectors with a read position (no allocation once warm).
  struct Pair {
    int from = -1;
    std::vector<Message> sends;
    std::size_t sendHead = 0;
    std::vector<transport::Request*> recvs;
    std::size_t recvHead = 0;
    bool empty() const noexcept { return sendHead == sends.size() && recvHead == recvs.size(); }
  };
  struct Rank;

  // Called by RankTransport on the rank's own fiber.
  void postSend(int rank, int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                transport::Request& req);
  void postRecv(int rank, int peer, void* data, std::size_t bytes, std::uint64_t tag,
                transport::Request& req);
  bool test(int rank, transport::Request& req);
  void wait(int rank, transport::Request& req);
  void abortAll(const std::string& why);

  void checkPeer(int rank, int peer, const char* what) const;
  static Pair& pairOf(Rank& me, int from);
  static void release(Rank& me, Pair& p);
  void deliver(int rank, int peer, Message& msg, transport::Request& req);
  void complete(Rank& me, transport::Request& req);
  void schedule(int rank, double at);
  void park(int rank);
  void yieldIfAhead(int rank);
  void throwIfAborted(int rank) const;
  std::string stuckReport() const;

  const topology::Topology& topo_;
  int n_;
  EngineOptions opts_;
  std::vector<Rank> ranks_;
  std::vector<double> netOut_, netIn_;  // per host: when its network link is free
  struct Ready {
    double at;
    std::uint64_t seq;
    int rank;
    bool operator>(const Ready& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready_;
  std::uint64_t seq_ = 0;
  std::uint64_t switches_ = 0;
  bool aborting_ = false;
  std::string abortWhy_;
  std::exception_ptr firstError_;
  const std::function<void(int, transport::Transport&)>* body_ = nullptr;
  struct SchedulerContext;
  std::unique_ptr<SchedulerContext> sched_;
};

}  // namespace braid::sim
