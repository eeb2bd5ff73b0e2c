// The shared-memory transport: ranks on one host exchange messages through a segment they all
// map (layout and size in shm_segment.hpp), never through the kernel's network stack.
//
// Data path. Each ordered pair of local ranks has a single-producer single-consumer byte ring
// (slots x slotBytes) with the producer's head and the consumer's tail on separate cache lines.
// A message is a 16-byte header {tag, bytes} followed by its payload, padded to 16 bytes; the
// sender publishes at most one slot at a time, so the receiver copies slot k out while slot k+1
// is being filled. Messages of at least cmaThresholdBytes travel single-copy when the receiver's
// probe at setup could read the sender's memory with process_vm_readv (CMA): the ring carries
// only {tag, bytes, address}, the receiver reads the payload straight from the sender's buffer
// into its own once its receive is posted, then counts it done in the pair's consumer line,
// which completes the send. Threads-as-ranks take the same paths (CMA on one's own pid).
//
// Matching is the TCP transport's: messages of a pair arrive in posting order; a non-P2P message
// must match the first posted non-P2P receive exactly (else Error(Mismatch) breaks the pair) and
// waits in the ring until that receive is posted; a P2P message (kP2PTagBit) goes to the first
// receive of its tag, or is copied aside (heap) until one is posted.
//
// Waiting. The thread that waits moves the bytes. wait() polls for `spin` (without yielding the
// CPU, or yielding between polls when oversubscribed), then sleeps on its
// rank's doorbell, a futex word in the segment; whoever publishes something a rank may wait for
// rings the doorbell only when that rank announced a sleeper, so the fast path makes no system
// call. A sleeper rechecks peers' liveness every livenessInterval (pidfd, else kill(pid, 0)). A
// background thread, started on first need, moves ring data that nobody waits for (a send
// larger than the free ring space, a large receive) so that a rank waiting on another transport
// does not stall its shm peers.
//
// Failure. A peer whose process exits, or whose transport closes, aborts or fails, fails every
// pending and later request to or from it with Error(PeerLost) naming its rank and pid (data it
// had already put in the ring can still be received). A wait that reaches its deadline throws
// Error(Timeout) naming the peer and leaves the transport failed, as does abort() with
// Error(Aborted); peers then see PeerLost. Destroying the transport closes its channels.
//
// Lifecycle (shm_bootstrap.cpp). Before the host's ranks are known, every rank prepares a
// memfd and publishes "memfd <pid> <fd> <nonce>" (prepareShm, ShmPrepared::entry()); the
// factory gathers these with the host entries it gathers anyway. The lowest local rank's memfd
// becomes the segment: it sizes and initializes it, the others open /proc/<pid>/fd/<fd> and
// map it, and the rest of the setup runs through the segment itself, so the transport reads no
// store key. No name ever exists, so nothing is left behind, even after SIGKILL. Where the
// creator cannot offer a memfd (no memfd_create, no /proc, a process that is not dumpable, so
// its peers may not open its descriptors; or ShmOptions::forceNamedSegment), it publishes
// "named <pid> <nonce>" instead and creates a POSIX shm object of a name derived from both,
// unlinked as soon as every local rank has mapped it.
#pragma once

#include <braid/store.hpp>
#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/tune_cache.hpp"
#include "transport/transport.hpp"

namespace braid::transport {

/// The single-copy threshold of a crowded host's messages when none is set
/// (ShmOptions::cmaThresholdBytes); its direct collectives stage (shm_single_copy.hpp).
inline constexpr std::size_t kCrowdedCmaThreshold = 64 * 1024;

struct ShmOptions {
  /// Slots per ring (2..1024). Ring bytes per ordered pair = slots * slotBytes.
  std::size_t slots = 8;
  /// Bytes per slot: a power of two, 4 KiB..16 MiB; the sender's publishing unit.
  std::size_t slotBytes = 64 * 1024;
  /// Bound on the segment: slotBytes is halved (down to 4 KiB) until the segment fits.
  std::size_t maxSegmentBytes = std::size_t{256} << 20;
  /// Messages of at least this many bytes go single-copy (CMA) where the kernel allows it.
  /// 0: every non-empty message; SIZE_MAX: never (everything through the ring). Unset:
  /// kCrowdedCmaThreshold when the host's ranks outnumber the CPUs they may run on together,
  /// else never.
  std::optional<std::size_t> cmaThresholdBytes;
  /// The CPUs the host's ranks can use at once, which decides whether the host is crowded
  /// (ranks outnumber CPUs: waiters yield at once, single copy by default). 0: measured at
  /// setup, the union of the local ranks' affinity masks capped by their cgroups' CPU limits.
  std::size_t hostCpus = 0;
  /// The background thread also moves requests whose poster is about to wait for them
  /// (Request::attended) while nobody waits, overlapping their transfer with the poster's own
  /// work (a reduction between two waits). The factory sets it as TcpOptions::backgroundAttended
  /// (two CPUs per rank, or peers reached over two transports).
  bool backgroundAttended = false;
  /// Never use process_vm_readv (no probe, everything through the ring).
  bool cmaDisable = false;
  /// Light wake-ups where every local rank can register for membarrier(2): a writer checks for
  /// sleepers without a fence, a sleeper runs the global membarrier after announcing itself
  /// (shm_segment.hpp, notify()). false: the writer's fence, always.
  bool lightWake = true;
  /// A waiter polls this long before sleeping on its futex: without yielding the CPU when the
  /// communicator's ranks on this host do not outnumber the CPUs this process may run on, else
  /// yielding between polls (an oversubscribed rank that does not yield only delays the peer it
  /// waits for).
  std::chrono::microseconds spin{50};
  /// How often a sleeping waiter checks that its peers' processes still exist.
  std::chrono::milliseconds livenessInterval{100};
  /// Bound on the whole setup (store lookups of the standalone form included).
  std::chrono::milliseconds setupTimeout{60000};
  /// Staging memory per rank for direct collectives (SharedMemoryGroup, two halves); 0: none.
  /// Rounded up to 4 KiB, at least 16 KiB, halved while the segment exceeds maxSegmentBytes.
  std::size_t stagingBytes = std::size_t{2} << 20;
  /// The direct collectives' pipelining unit (SharedMemoryGroup::chunkBytes) when not measured:
  /// always when `chunkFrom` names where it came from (BRAID_SHM_CHUNK_SIZE, BRAID_CHUNK_SIZE),
  /// else on a crowded host. Otherwise measured with the single-copy probe for this many ranks
  /// and kept in the machine profile (shm_single_copy.hpp).
  std::size_t chunkBytes = std::size_t{256} << 10;
  std::string chunkFrom;
  /// The direct collectives' streaming threshold (SharedMemoryGroup::streamingBytes, all ranks'
  /// outputs together): measured for this many ranks and kept in the machine profile when
  /// `measureStreaming` (communicators), the host is not crowded and no override of the
  /// process's threshold is set (BRAID_LLC_SIZE); else the process's
  /// kernels::streamingThresholdBytes() (shm_streaming.hpp).
  bool measureStreaming = false;
  /// The machine profile's file (BRAID_TUNE_CACHE, resolved: "" = none) and this machine's key:
  /// the single-copy threshold measured for this many ranks is read from there and, when
  /// measured, kept there (shm_single_copy.hpp, step 5).
  std::string tuneCachePath;
  machine::TuneKey tuneKey;
  /// A probe during which a rank was off its CPU for more than this per mille of the time is not
  /// kept there (Options::tuneMaxBusyPercent x 10).
  std::uint64_t tuneMaxOffCpuPermille = 200;
  /// Use a named POSIX shm object instead of a memfd (BRAID_SHM_NAMED=1; tests).
  bool forceNamedSegment = false;
};

class ShmTransport : public Transport {
 public:
  /// "shm+cma" when messages of at least cmaThresholdBytes to `peer` go single-copy, "shm"
  /// when everything goes through the ring, "" when `peer` is not a local rank.
  virtual std::string pathTo(int peer) const = 0;
  /// Whether wake-ups are light (every local rank registered for the global expedited
  /// membarrier, so wakers need no fence; see notify() in shm_segment.hpp) or fenced.
  virtual bool lightWake() const = 0;
  /// From which size this rank's direct collectives go single copy, and why (and messages'
  /// rule where it differs)
  /// (shm_single_copy.hpp): "from 16384 B: measured at creation in 3.2 ms (...)", "never: ...".
  virtual std::string singleCopy() const = 0;
  /// The direct collectives' pipelining unit and why (shm_single_copy.hpp): "1048576 B:
  /// measured at creation in 4.1 ms (...)", "65536 B: BRAID_CHUNK_SIZE", ...; "" when the
  /// transport has no shared-memory group.
  virtual std::string directChunk() const = 0;
  /// The direct collectives' streaming threshold and why (shm_streaming.hpp): "67108864 B:
  /// measured at creation in 31.0 ms (...)", "16777216 B: BRAID_LLC_SIZE", ...; "" when the
  /// transport has no shared-memory group.
  virtual std::string directStreaming() const = 0;
};

namespace shm {
struct Prepared;
}
/// This rank's part of the setup that needs no peer: a memfd in case this rank turns out to be
/// its host's lowest (prepareShm). entry() is one line that travels with the host entries.
class ShmPrepared {
 public:
  explicit ShmPrepared(std::unique_ptr<shm::Prepared> state);
  ~ShmPrepared();
  ShmPrepared(const ShmPrepared&) = delete;
  ShmPrepared& operator=(const ShmPrepared&) = delete;
  std::string entry() const;
  shm::Prepared& state() { return *state_; }

 private:
  std::unique_ptr<shm::Prepared> state_;
};
std::unique_ptr<ShmPrepared> prepareShm(const ShmOptions& options);

/// Collective over the ranks in `localRanks` (global ranks of one host, ascending, including
/// `rank`): attaches the shared segment (see above) and returns a transport whose rank() and
/// size() are the global ones and which reaches exactly the ranks in `localRanks`; posting to
/// any other peer throws Error(InvalidArgument). `entries[i]` is the entry() of local rank
/// localRanks[i]'s ShmPrepared; `prepared` is this rank's. options.hostCpus must be set (the
/// factory knows every local rank's CPUs). A local rank that does not attach within
/// setupTimeout is named in an Error(Timeout), one whose process is gone in an
/// Error(PeerLost).
std::unique_ptr<ShmTransport> createShmTransport(std::unique_ptr<ShmPrepared> prepared,
                                                 std::span<const std::string> entries, int rank,
                                                 int size, std::span<const int> localRanks,
                                                 const ShmOptions& options);

/// Segments created by this process so far (tests and diagnostics: a sub-communicator on its
/// parent's segment creates none).
std::size_t shmSegmentsMade() noexcept;

/// The standalone form (tests, tools): the local ranks exchange their entries and CPUs through
/// `store` under "shm/<lowest local rank>/", then as above.
std::unique_ptr<ShmTransport> createShmTransport(Store& store, int rank, int size,
                                                 std::span<const int> localRanks,
                                                 const ShmOptions& options);

}  // namespace braid::transport
