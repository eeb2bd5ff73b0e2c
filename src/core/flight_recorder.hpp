// The flight recorder: each communicator keeps its last K operations (BRAID_FLIGHT_RECORDER=K)
// in a ring allocated once, so that a failed or hung job can say what every rank was doing.
// Recording an operation costs two clock reads and two short critical sections when it starts
// as it is issued (a blocking call), three of each when it waits in the queue first; nothing is
// allocated per operation. The ring is dumped as text (dump()) when an operation fails the
// communicator and on SIGUSR1 (core/signal_dump.hpp). docs/troubleshooting.md reads a dump.
#pragma once

#include <array>
#include <atomic>
#include <braid/types.hpp>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/straggler.hpp"

namespace braid::core {

using Clock = std::chrono::steady_clock;

enum class OpState : std::uint8_t { Queued, Running, Done, Failed };
const char* toString(OpState s) noexcept;

/// What one rank called: enough to write "allgather(fp32, count=1024)".
struct OpDesc {
  Collective coll = Collective::Barrier;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;                // reduce, broadcast, gather, scatter
  int peer = -1;               // send, recv
  std::uint32_t userTag = 0;   // send, recv
  std::uint64_t count = 0;     // elements; allgatherv/reduce_scatterv: the total; alltoallv: sent
  std::uint64_t countKey = 0;  // what the tag's fingerprint hashed (core/tag.hpp countKey)
  std::uint64_t seq = 0;       // collectives: sequence number on the communicator ("op #57")
};

inline bool isPointToPoint(Collective c) noexcept {  // inline: every operation asks
  return c == Collective::Send || c == Collective::Recv;
}
bool hasRoot(Collective c) noexcept;
bool isReduction(Collective c) noexcept;
/// "allgather(fp32, count=1024)", "broadcast(fp32, count=8, root=3)", "send(fp32, count=4,
/// to rank 2, tag 0)". withOp adds ", op=max" to reductions.
std::string callText(const OpDesc& d, bool withOp = false);

/// One recorded operation.
struct FlightEntry {
  std::uint64_t serial = 0;  // 1 for the communicator's first operation (any kind); 0 = empty
  OpDesc desc;
  std::uint64_t bytes = 0;
  const char* algorithm = nullptr;  // static storage (the registry's names), or the
                                    // communicator's (a hierarchy's phases: rename())
  OpState state = OpState::Queued;
  Clock::time_point issued{}, started{}, finished{};
  // Straggler attribution (core/straggler.hpp), filled in by an exchange after the operation:
  // the rank that arrived last (-1: not known) and how late it was.
  int lastRank = -1;
  std::int64_t lateNs = 0;
  std::array<char, 240> error{};  // first bytes of the error of a failed operation
};

class FlightRecorder {
 public:
  /// capacity 0 keeps no ring (dump() says so) but still tracks the position.
  FlightRecorder(std::size_t capacity, Clock::time_point origin);

  /// Records an operation as queued; returns its serial.
  std::uint64_t issued(const OpDesc& d, std::uint64_t bytes, Clock::time_point at);
  /// Records an operation that starts as it is issued (a blocking call run inline): issued()
  /// and started() under one lock; returns its serial.
  std::uint64_t begin(const OpDesc& d, std::uint64_t bytes, const char* algorithm,
                      Clock::time_point at);
  void started(std::uint64_t serial, const OpDesc& d, const char* algorithm, Clock::time_point at);
  /// Names what a started operation ran, once known: a hierarchy, what its phases ran
  /// ("hierarchical(node: reducescatterv shm_direct, ...)", storage the communicator keeps).
  void rename(std::uint64_t serial, const char* algorithm);
  /// error == nullptr: done.
  void finished(std::uint64_t serial, const OpDesc& d, const char* error, Clock::time_point at);

  /// Where this rank is: its latest started collective.
  struct Position {
    bool any = false;
    OpDesc desc;
    OpState state = OpState::Queued;
    Clock::time_point started{}, finished{};
  };
  Position position() const;
  /// The most recent collectives in the ring (newest last), at most n.
  std::vector<OpDesc> recentCollectives(std::size_t n) const;

  /// The start and end stamps of the finished collectives in the ring, oldest first
  /// (core/straggler.hpp).
  std::vector<WaitSample> waits() const;
  /// Records the straggler verdicts (ascending sequence numbers) on the collectives the ring
  /// still holds; `started` (if given) gets each verdict's start time (zero: not in the ring).
  void annotate(const std::vector<StragglerVerdict>& verdicts,
                std::vector<Clock::time_point>* started = nullptr);
  /// Collectives whose sequence number is a multiple of `every` have precise stamps (0: none).
  void setPreciseEvery(std::uint64_t every) { preciseEvery_ = every; }

  /// The readable dump: a header line, one line per operation (oldest first), an end line.
  std::string dump(const std::string& title) const;
  std::size_t capacity() const { return ring_.size(); }

 private:
  FlightEntry* slot(std::uint64_t serial) {  // inline: every operation asks twice
    if (ring_.empty() || serial == 0) return nullptr;
    FlightEntry& e = ring_[indexOf(serial)];
    return e.serial == serial ? &e : nullptr;  // overwritten by a newer operation
  }
  // The ring index of a serial: a mask when the capacity is a power of two (the default 128),
  // which keeps a 64-bit division off the per-operation path.
  std::size_t indexOf(std::uint64_t serial) const {
    return mask_ != 0 ? static_cast<std::size_t>(serial & mask_)
                      : static_cast<std::size_t>(serial % ring_.size());
  }
  void markStarted(FlightEntry* e, std::uint64_t serial, const OpDesc& d, const char* algorithm,
                   Clock::time_point at);

  // Every operation takes this lock three times (issued, started, finished), for a few stores
  // each: a spin lock costs a few instructions where a mutex costs about fifty. Readers (dumps,
  // the diagnosis monitor) hold it only to copy; a waiter yields after a short spin, so a holder
  // preempted on an oversubscribed machine is not spun against.
  class SpinLock {
   public:
    void lock() noexcept {
      for (int spins = 0; flag_.test_and_set(std::memory_order_acquire); ++spins) {
        if (spins >= 64) std::this_thread::yield();
      }
    }
    void unlock() noexcept { flag_.clear(std::memory_order_release); }

   private:
    std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
  };

  mutable SpinLock mu_;
  std::vector<FlightEntry> ring_;
  std::uint64_t mask_ = 0;  // capacity - 1 when the capacity is a power of two, else 0
  std::uint64_t next_ = 1;
  Clock::time_point origin_;
  Position position_;
  std::uint64_t positionSerial_ = 0;
  std::uint64_t preciseEvery_ = 0;
};

}  // namespace braid::core
