// The shared segment of one host's ranks in one communicator: its layout, its size, and the
// owning handles (file descriptor, mapping) that unmap it when the transport goes.
//
// Layout (L = local ranks, S = slots, B = slot bytes, R = S * B ring bytes):
//
//   SegmentHeader                      64 B   magic, version, geometry, nonce
//   RankSlot[L]                   L *  64 B   pid, doorbell (futex word + sleeper count), probe
//   ChannelControl[L * L]     L * L * 128 B   per ordered pair: producer line, consumer line
//   (padding to 4 KiB)
//   rings[L * (L - 1)]      L * (L-1) * R B   one single-producer single-consumer byte ring per
//                                             ordered pair of distinct local ranks
//   GroupLine[L]                L * 128 B  direct collectives: barrier counter, gone flag, lines
//                                          entered
//   LatencyLine[L][kLineDepth] L * 64 KiB  low-latency collectives: kLineDepth lines per rank
//   (padding to 4 KiB)
//   staging[L]                       L * G B  direct collectives: two halves of G/2 per rank
//   lane groups[K]                   K * A B  the same group part for K sub-communicators of this
//                                             segment's ranks (below)
//
//   total = align4K(64 + 64 L + 128 L^2) + L (L - 1) S B [+ align4K(65664 L) + L G
//           + K A when G > 0], A = align4K(64 + 65664 L) + L G
//
// A lane group (LaneGroupHeader, GroupLine[L], LatencyLine[L][kLineDepth], staging[L]) is the
// direct-collective group of a sub-communicator whose members all map this segment (a split, a
// torch subgroup, a hierarchy's node group): its lowest member claims a free one for the
// sub-communicator's lane and the last member to leave frees it, so a sub-communicator makes no
// segment of its own (docs/architecture.md, "Shared connections"). K = kLaneGroups, fewer when
// the segment would exceed maxSegmentBytes; a sub-communicator that finds none free makes a
// segment of its own, as before. Their pages are committed on first touch: an unused lane group
// costs address space only.
//
// The group part (GroupLine, staging) exists when G (ShmOptions::stagingBytes, default 2 MiB:
// 2 x 1 MiB per rank) is not 0; G is halved (down to kMinStagingBytes) when the segment would
// exceed maxSegmentBytes. Staging pages are committed on first touch, so a communicator that
// never runs a direct collective pays nothing for them.
//
// Defaults S = 8, B = 64 KiB: 512 KiB per ring, so 1 MiB for 2 ranks, 6 MiB for 4, 28 MiB for
// 8. planGeometry halves B (down to 4 KiB) until the total fits maxSegmentBytes (default
// 256 MiB), so 24 ranks get 32 KiB slots. Memory is only committed where rings are used.
#pragma once

#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/fd.hpp"
#include "transport/engine.hpp"

namespace braid::transport::shm {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::uint64_t kSegmentMagic = 0x4252414944534d31;  // "BRAIDSM1"
inline constexpr std::uint32_t kSegmentVersion = 9;
/// Lane groups per segment (at most; fewer when they do not fit maxSegmentBytes: 12 for 8 ranks
/// at the default bound). A torch group takes two (its collectives' and its point-to-point
/// communicator's).
inline constexpr std::size_t kLaneGroups = 32;
inline constexpr std::size_t kMinStagingBytes = 16 * 1024;
inline constexpr std::size_t kMinSlotBytes = 4096;
inline constexpr std::size_t kMaxSlotBytes = 16 << 20;
inline constexpr std::size_t kMinSlots = 2;
inline constexpr std::size_t kMaxSlots = 1024;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

/// A pause in a polling loop.
using engine::cpuRelax;

/// Whether this CPU executes PREFETCHW (CPUID 0x80000001 ECX bit 8; every x86-64 CPU of the
/// last decade). Elsewhere prefetchForWrite() is the compiler's write prefetch.
inline bool hasPrefetchForWrite() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0x80000001u, &a, &b, &c, &d) != 0 && (c & (1u << 8)) != 0;
#else
  return true;
#endif
}

/// Asks for the cache line at `p` in a writable state (only where hasPrefetchForWrite()).
inline void prefetchForWrite(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetchw (%0)" : : "r"(p));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

struct alignas(kCacheLine) SegmentHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t ranks;
  std::uint64_t slots;
  std::uint64_t slotBytes;
  std::uint64_t totalBytes;
  std::uint64_t stagingBytes;
  // Random per segment (never 0), published with the segment's descriptor: a rank that opens
  // the segment checks it reached this very one (shm_bootstrap.cpp). Written last, with release
  // (Segment::initialize): a reader that sees it sees the initialized segment; 0 until then.
  std::uint64_t nonce;
  std::uint32_t laneGroups;  // K
};

/// The head of a lane group: which sub-communicator holds it (0: free) and how many of its
/// members still use it.
struct alignas(kCacheLine) LaneGroupHeader {
  std::atomic<std::uint32_t> claimed;  // 0: free; 1: held (claimed with a compare-exchange)
  std::atomic<std::uint32_t> users;    // members still using it; the last one frees it
  std::atomic<std::uint64_t> lane;     // the holder's lane
};

/// One local rank. The doorbell is how others wake it: `bell` is the futex word, bumped by
/// whoever changes something this rank may wait for, but only when `sleepers` says a thread
/// of this rank sleeps (so the fast path makes no system call).
struct alignas(kCacheLine) RankSlot {
  std::atomic<std::uint32_t> bell;
  std::atomic<std::uint32_t> sleepers;
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> attached;
  // Where this rank's own mapping of probeCookie lives in its address space: peers read it
  // with process_vm_readv to learn whether single-copy reads from this rank work.
  std::atomic<std::uint64_t> probeAddress;
  std::atomic<std::uint64_t> probeCookie;
  // 1 + the CPU this rank last waited on (0: not yet), see besidePeer().
  std::atomic<std::uint32_t> waitCpu;
  // 1: this rank's process registered for the kernel's global expedited membarrier, so a
  // sleeper's heavyFence() reaches it (see notify()).
  std::atomic<std::uint32_t> lightWake;
  // 1: this rank probed its peers' memory (setup's last step, shm_bootstrap.cpp).
  std::atomic<std::uint32_t> probed;
};

/// Publishes the CPU this rank runs on as it starts to wait (a store only when it changed, so
/// the line peers read to ring the doorbell stays in their caches); called on every wait.
inline void publishWaitCpu(RankSlot& self) {
  const int cpu = ::sched_getcpu();
  const std::uint32_t mine = cpu < 0 ? 0 : static_cast<std::uint32_t>(cpu) + 1;
  if (self.waitCpu.load(std::memory_order_relaxed) != mine)
    self.waitCpu.store(mine, std::memory_order_relaxed);
}

/// Whether `peer` last waited on the CPU this rank waits on. Two ranks on one CPU cannot answer
/// each other while either polls: a 2-rank 8 B broadcast took 11 us instead of 0.3 for as long
/// as Linux kept both ranks on one of this VM's two vCPUs (each wait polled its 5 us first),
/// 5 us when a waiter beside its peer yields at once, as it now does. (Sleeping instead was
/// worse, 8-10 us: the wake-up lands on the same vCPU. Only binding, braid-run --bind, or the
/// scheduler's load balancing, after tens of ms, separates the two.)
inline bool besidePeer(const RankSlot& self, const RankSlot& peer) {
  const std::uint32_t mine = self.waitCpu.load(std::memory_order_relaxed);
  return mine != 0 && peer.waitCpu.load(std::memory_order_relaxed) == mine;
}

/// Written only by the sending side of a pair.
struct alignas(kCacheLine) ProducerLine {
  std::atomic<std::uint64_t> head;    // ring bytes published
  std::atomic<std::uint32_t> closed;  // the sender will write nothing more; its buffers are gone
};

/// Written only by the receiving side of a pair.
struct alignas(kCacheLine) ConsumerLine {
  std::atomic<std::uint64_t> tail;            // ring bytes consumed
  std::atomic<std::uint64_t> rendezvousDone;  // single-copy messages read (or dropped)
  std::atomic<std::uint32_t> closed;          // the receiver reads nothing more
  std::atomic<std::uint32_t> canReadSender;   // the receiver's probe read the sender's memory
};

/// One local rank's lines of the direct-collective group (written only by that rank).
struct alignas(kCacheLine) GroupLine {
  std::atomic<std::uint64_t> arrived;  // group barriers this rank has entered
  std::atomic<std::uint32_t> gone;     // its transport closed or failed: it arrives no more
  // The operation tag of barrier e, at [e % 2] (a peer is at most one barrier ahead).
  std::atomic<std::uint64_t> tags[2];
  // The low-latency exchange this rank entered last, published every kLineHalf exchanges (so
  // it has read every line of the exchanges before): the writers' flow control reads this, in
  // a cache line of its own, instead of the rank's lines, which thus stay in its cache when
  // nobody reads their payload (a broadcast non-root's, a reduce root's).
  alignas(kCacheLine) std::atomic<std::uint64_t> linesEntered;
};

/// Lines per rank of the low-latency exchange: exchange k uses line k % kLineDepth. A rank
/// overwrites a line only once every peer published that it entered a later exchange, which
/// peers do every kLineHalf exchanges, so a rank may run kLineDepth - kLineHalf exchanges ahead
/// of the slowest peer (a broadcast root, a reduce non-root: they read nothing). Oversubscribed,
/// that lets such a rank post several operations per time slice instead of handing the CPU over
/// for each (64 rather than 16: 8 B broadcast, 4 ranks on 2 CPUs, 1.0-1.8 -> 0.4-0.6 us; 2 ranks
/// 0.130 -> 0.110-0.117 us; docs/benchmarks.md).
inline constexpr std::size_t kLineDepth = 64;
inline constexpr std::size_t kLineHalf = kLineDepth / 2;

/// One rank's line of the low-latency exchange (SharedMemoryGroup::linePost): the exchange's
/// sequence number, the operation's tag and up to 1008 payload bytes in sixteen cache lines
/// (1 KiB: at 512 and 992 B the exchange ran 1.0-3.7x as fast as the staged direct
/// collectives, docs/benchmarks.md). The first 48 payload bytes share the first cache line
/// with seq and tag, so a reader of a small message gets all three with one transfer. Written only
/// by its rank; seq is stored last (release), and a reader that saw it (acquire) reads the payload.
struct alignas(kCacheLine) LatencyLine {
  std::atomic<std::uint64_t> seq;  // the exchange whose payload this is (0: none yet)
  std::atomic<std::uint64_t> tag;
  std::uint8_t payload[16 * kCacheLine - 16];
};

struct ChannelControl {
  ProducerLine producer;
  ConsumerLine consumer;
};

static_assert(sizeof(SegmentHeader) == kCacheLine);
static_assert(sizeof(LaneGroupHeader) == kCacheLine);
static_assert(sizeof(RankSlot) == kCacheLine);
static_assert(sizeof(ChannelControl) == 2 * kCacheLine);
static_assert(sizeof(LatencyLine) == 16 * kCacheLine);

/// Sizes and offsets of a segment for `ranks` local ranks.
struct Geometry {
  std::size_t ranks = 0;
  std::size_t slots = 0;
  std::size_t slotBytes = 0;
  std::size_t ringsOffset = 0;
  std::size_t totalBytes = 0;
  std::size_t stagingBytes = 0;  // per rank, both halves; 0: no group part
  std::size_t groupOffset = 0;
  std::size_t stagingOffset = 0;
  std::size_t laneGroups = 0;  // K
  std::size_t laneGroupsOffset = 0;
  std::size_t laneGroupBytes = 0;  // A
  std::size_t ringBytes() const { return slots * slotBytes; }
};

/// The geometry for `ranks` ranks: slots x slotBytes per ring, slotBytes halved (not below
/// kMinSlotBytes) until the segment fits maxSegmentBytes. Throws Error(InvalidArgument) for
/// slots outside [kMinSlots, kMaxSlots] or slotBytes not a power of two in [kMinSlotBytes,
/// kMaxSlotBytes]. stagingBytes (0: no group part) is rounded up to 4 KiB and halved, not
/// below kMinStagingBytes, while the segment exceeds maxSegmentBytes.
Geometry planGeometry(std::size_t ranks, std::size_t slots, std::size_t slotBytes,
                      std::size_t maxSegmentBytes, std::size_t stagingBytes = 0);

/// Owns one shared mapping of a whole segment.
class Segment {
 public:
  Segment() = default;
  /// Maps `bytes` of fd read-write and shared. Throws Error(Internal) naming `what`.
  Segment(int fd, std::size_t bytes, const std::string& what);
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  explicit operator bool() const { return base_ != nullptr; }
  std::size_t bytes() const { return bytes_; }
  /// Writes the header and constructs every control structure (creator only, on fresh zeroed
  /// memory); the nonce (!= 0) goes last, with release (publishedNonce()).
  void initialize(const Geometry& g, std::uint64_t nonce);
  /// The header's nonce, read with acquire: 0 while the creator has not finished initialize().
  std::uint64_t publishedNonce() const {
    return std::atomic_ref<std::uint64_t>(header().nonce).load(std::memory_order_acquire);
  }
  /// Reads and checks the header the creator wrote, and lays the segment out accordingly.
  /// Throws Error(Internal) naming `what` when it does not describe a braid segment.
  Geometry adopt(const std::string& what);

  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  // rank(), groupLine() and latencyLine() are inline: every small operation asks for them.
  RankSlot& rank(std::size_t local) const {
    return reinterpret_cast<RankSlot*>(base_ + sizeof(SegmentHeader))[local];
  }
  ChannelControl& control(std::size_t from, std::size_t to) const;
  std::uint8_t* ring(std::size_t from, std::size_t to) const;
  /// The group part (only when geometry().stagingBytes > 0).
  GroupLine& groupLine(std::size_t local) const {
    return reinterpret_cast<GroupLine*>(base_ + geometry_.groupOffset)[local];
  }
  std::uint8_t* staging(std::size_t local) const;
  /// Rank `local`'s low-latency line `slot` (group part only).
  LatencyLine& latencyLine(std::size_t local, std::size_t slot) const {  // slot < kLineDepth
    auto* lines = reinterpret_cast<LatencyLine*>(base_ + geometry_.groupOffset +
                                                 geometry_.ranks * sizeof(GroupLine));
    return lines[kLineDepth * local + slot];
  }
  const Geometry& geometry() const { return geometry_; }

  /// Lane group k < geometry().laneGroups: its header, lines and staging (laid out as the
  /// segment's own group part).
  LaneGroupHeader& laneGroup(std::size_t k) const {
    return *reinterpret_cast<LaneGroupHeader*>(base_ + geometry_.laneGroupsOffset +
                                               k * geometry_.laneGroupBytes);
  }
  GroupLine* laneGroupLines(std::size_t k) const {
    return reinterpret_cast<GroupLine*>(&laneGroup(k) + 1);
  }
  LatencyLine* laneGroupLatency(std::size_t k) const {
    return reinterpret_cast<LatencyLine*>(laneGroupLines(k) + geometry_.ranks);
  }
  std::uint8_t* laneGroupStaging(std::size_t k) const {
    return reinterpret_cast<std::uint8_t*>(&laneGroup(k)) + geometry_.laneGroupBytes -
           geometry_.ranks * geometry_.stagingBytes;
  }

 private:
  void reset();

  std::uint8_t* base_ = nullptr;
  std::size_t bytes_ = 0;
  Geometry geometry_;
};

/// Sleeps while `word` == expected, at most `timeout`; returns early on a wake-up, a signal, or
/// when the word already differs. Works across processes (not FUTEX_PRIVATE).
void futexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::chrono::nanoseconds timeout);
/// Wakes every thread sleeping on `word`.
void futexWakeAll(std::atomic<std::uint32_t>& word);

/// Registers this process for the global expedited membarrier (the kernel keeps it for the
/// process's lifetime; registering again is harmless). False where the kernel or a seccomp
/// filter refuses it. The registration starts when the library is loaded (shm_segment.cpp:
/// microseconds in a process that has one thread then, else on a thread of its own); this waits
/// for that one, or registers anew in a process forked since.
bool registerLightWake();
/// membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED): every running thread of every registered
/// process passes a full memory barrier before it returns. False when the call failed.
bool heavyFence();

/// The sleeper's half of notify(): called after announcing itself in `sleepers`, before its last
/// look. Returns the longest it may then sleep: unbounded, or 1 ms where a light waker may have
/// missed it (heavyFence() failed, which registered processes do not see in practice), so that
/// a missed ring costs a millisecond, never a hang.
inline std::chrono::nanoseconds announced(bool light) {
  if (!light || heavyFence()) return std::chrono::nanoseconds::max();
  return std::chrono::milliseconds(1);
}

/// Rings the doorbell of `slot` if a thread of that rank sleeps (or is about to). The caller
/// has published the change the sleeper waits for before calling.
///
/// The sleeper announces itself (a seq_cst RMW of `sleepers`), then looks at what it waits for
/// once more; the waker stores the change, then reads `sleepers`. One of the two must see the
/// other, which a store followed by a load does not give without a barrier between them. The
/// plain way is a full fence here, on every notify: about 50 ns on this VM when the store is
/// to a line a peer polls (the fence waits for that line's ownership). With `light` (every rank
/// of the segment registered, see registerLightWake()), the waker only keeps the compiler from
/// reordering, and the sleeper, which goes to sleep rarely and then pays microseconds anyway,
/// runs heavyFence() after its announcement: the asymmetric pairing of membarrier(2).
inline void notify(RankSlot& slot, bool light = false) {
  if (light)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  if (slot.sleepers.load(std::memory_order_relaxed) != 0) {
    slot.bell.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(slot.bell);
  }
}

/// Rings unconditionally (abort, shutdown).
inline void ring(RankSlot& slot) {
  slot.bell.fetch_add(1, std::memory_order_seq_cst);
  futexWakeAll(slot.bell);
}

}  // namespace braid::transport::shm
