// The direct-collective group of a communicator whose ranks all map one segment
// (transport::SharedMemoryGroup): over the segment's own group part when the segment's local
// ranks are the whole communicator, or over a lane group of the segment for a sub-communicator
// of some of them (shm_segment.hpp); GroupMemory says which, and maps the group's ranks to the
// segment's.
//
// barrier() publishes this rank's count in its GroupLine, rings the peers that sleep, then waits
// for every peer's count. linePost() writes this rank's LatencyLine k % kLineDepth of exchange k
// (payload, tag, then the sequence number with release), rings sleeping peers; lineWait() polls
// one peer's line until it carries the sequence number. Every wait polls (busily while the host
// is not oversubscribed), then yields, then sleeps on this rank's doorbell, rechecking peers'
// liveness every livenessInterval.
//
// Why kLineDepth lines suffice: a rank writes its line of exchange k (line k % kLineDepth) only
// after every peer entered exchange k - kLineDepth + 1, i.e. finished reading exchange
// k - kLineDepth, the line's previous content (payloads are read only during their exchange).
// It learns that from the peers' GroupLine::linesEntered, which each rank publishes every
// kLineHalf exchanges (not from their lines, which thus stay in their writers' caches). For
// allreduce-like exchanges the check finds the peers there already; it only waits where a rank
// reads nothing (a broadcast root, a reduce non-root), which may thus run kLineDepth - kLineHalf
// exchanges ahead before it waits for the slowest reader.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/reduce.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::transport::shm {

/// Where a group's lines and staging live and which of the segment's local ranks its ranks are.
class GroupMemory {
 public:
  /// The segment's own group part; its ranks are the segment's.
  explicit GroupMemory(Segment& segment);
  /// Lane group `k`; group rank i is the segment's local rank members[i].
  GroupMemory(Segment& segment, std::size_t k, std::vector<std::size_t> members);

  std::size_t size() const { return members_.size(); }
  GroupLine& groupLine(std::size_t i) const { return lines_[i]; }
  LatencyLine& latencyLine(std::size_t i, std::size_t slot) const {
    return latency_[kLineDepth * i + slot];
  }
  std::uint8_t* staging(std::size_t i) const { return staging_ + i * stagingBytes_; }
  std::size_t stagingBytes() const { return stagingBytes_; }
  RankSlot& rank(std::size_t i) const { return *slots_[i]; }
  ChannelControl& control(std::size_t from, std::size_t to) const {
    return seg_->control(members_[from], members_[to]);
  }

 private:
  Segment* seg_;
  std::vector<std::size_t> members_;
  std::vector<RankSlot*> slots_;
  GroupLine* lines_;
  LatencyLine* latency_;
  std::uint8_t* staging_;
  std::size_t stagingBytes_;
};

class ShmGroup : public SharedMemoryGroup {
 public:
  ShmGroup(GroupMemory memory, std::size_t local, std::size_t count,
           std::vector<std::string> descriptions, const ShmOptions& options,
           std::chrono::microseconds busyPoll, bool crowded, bool lightWake,
           std::function<std::string(std::uint64_t)> tagText,
           std::function<void(std::size_t, std::uint64_t, std::uint64_t)> mismatchSeen);
  ~ShmGroup() override {
    if (!released_) markGone();
  }
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const override { return static_cast<int>(local_); }
  int size() const override { return static_cast<int>(count_); }
  std::size_t stagingBytes() const override { return seg_.stagingBytes(); }
  std::uint8_t* staging(int r) const override { return seg_.staging(static_cast<std::size_t>(r)); }
  std::size_t beginStep() override {
    step_ ^= 1;
    return step_ == 0 ? 0 : stagingBytes() / 2;
  }
  void barrier(std::uint64_t tag, Deadline deadline) override;
  void linePost(std::uint64_t tag, const void* data, std::size_t bytes, Deadline deadline) override;
  const std::uint8_t* lineWait(int peer, Deadline deadline) override;
  bool canReadPeers() const override { return canReadPeers_; }
  bool crowded() const override { return crowded_; }
  std::size_t singleCopyBytes() const override { return singleCopyBytes_; }
  /// Set once, right after construction, the same on every rank (shm_single_copy.hpp).
  void setSingleCopyBytes(std::size_t bytes) { singleCopyBytes_ = bytes; }
  std::size_t chunkBytes() const override { return chunkBytes_; }
  /// Set once, right after construction, the same on every rank (shm_single_copy.hpp).
  void setChunkBytes(std::size_t bytes) { chunkBytes_ = bytes; }
  /// An override of the process's threshold (BRAID_LLC_SIZE, applied process-wide) wins, even
  /// one set after creation; then the group's own; then the process's.
  std::size_t streamingBytes() const override {
    if (const std::size_t set = kernels::streamingThresholdSet(); set != 0) return set;
    return streamingBytes_ != 0 ? streamingBytes_ : kernels::streamingThresholdBytes();
  }
  /// Set once, right after construction, the same on every rank (shm_streaming.hpp); 0: the
  /// process's threshold.
  void setStreamingBytes(std::size_t bytes) { streamingBytes_ = bytes; }
  /// Which pair's probe failed when !canReadPeers() (CMA disabled: ""), in words.
  const std::string& unreadablePair() const { return unreadable_; }
  void readPeer(int peer, std::uint64_t remote, void* dst, std::size_t bytes) override;

  /// This rank arrives no more (transport failed, aborted or destroyed): peers' barriers fail.
  /// `why`: the transport's failure, repeated by this rank's later barriers.
  void markGone(const std::string& why = "");
  void abort(const std::string& why);

 protected:
  // Set by a lane group that gave its lines back (another sub-communicator may hold them now).
  bool released_ = false;

 private:
  [[noreturn]] void fail(ErrorCode code, const std::string& what);
  /// Throws when the group was aborted, this rank left it, or peer `p` left (or, with
  /// `probeProcess`, exited). Inline for the common case, where none of that happened.
  void checkPeer(std::size_t p, bool probeProcess) {
    if (aborted_.load(std::memory_order_acquire) ||
        seg_.groupLine(local_).gone.load(std::memory_order_acquire) != 0 ||
        seg_.groupLine(p).gone.load(std::memory_order_acquire) != 0 || probeProcess)
      checkPeerSlow(p, probeProcess);
  }
  void checkPeerSlow(std::size_t p, bool probeProcess);
  // Waits until ready(p) for each p in [first, last) other than this rank, in order.
  template <class Ready>
  void await(std::size_t first, std::size_t last, Ready&& ready, Deadline deadline);
  // The newest line exchange rank p entered.
  std::uint64_t lineSeqOf(std::size_t p) const;
  // The operation of peer p when p entered a barrier (waitingInLines) or a line exchange (not)
  // that this rank, waiting for p in the other sequence, has not reached; else "".
  std::string otherSequence(std::size_t p, bool waitingInLines) const;
  std::string where() const;

  const GroupMemory seg_;
  const std::size_t local_;
  const std::size_t count_;
  const std::vector<std::string> descriptions_;
  const std::chrono::microseconds spin_;
  const std::chrono::microseconds busyPoll_;
  const bool crowded_;
  const bool lightWake_;  // notify() without a fence; sleepers run heavyFence() (shm_segment.hpp)
  const bool prefetchW_ = hasPrefetchForWrite();  // linePost() claims its next line early
  const std::chrono::milliseconds liveness_;
  const std::function<std::string(std::uint64_t)> tagText_;
  // Told (local peer, this rank's tag, the peer's tag) before a tag Mismatch fails the group.
  const std::function<void(std::size_t, std::uint64_t, std::uint64_t)> mismatchSeen_;
  std::vector<pid_t> pids_;
  bool canReadPeers_ = false;
  std::string unreadable_;
  std::size_t singleCopyBytes_ = SIZE_MAX;
  std::size_t chunkBytes_ = std::size_t{256} << 10;
  std::size_t streamingBytes_ = 0;
  std::uint64_t epoch_ = 0;         // barriers entered
  std::uint64_t tag_ = 0;           // the tag of the current barrier
  std::uint64_t lineSeq_ = 0;       // line exchanges entered
  std::uint64_t lineTag_ = 0;       // the tag of the current line exchange
  std::uint64_t peersEntered_ = 0;  // every peer is known to have entered this line exchange
  bool inLines_ = false;            // the last wait was a line exchange (for error messages)
  std::size_t step_ = 0;
  std::atomic<bool> aborted_{false};
  std::mutex abortMu_;
  std::string abortWhy_;
  std::string goneWhy_;  // the transport failure that made this rank leave (abortMu_)
};

}  // namespace braid::transport::shm
