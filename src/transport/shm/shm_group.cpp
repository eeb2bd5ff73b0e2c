#include "transport/shm/shm_group.hpp"

#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <braid/error.hpp>
#include <cerrno>
#include <cstring>
#include <thread>

namespace braid::transport::shm {

namespace {
// Polls of await() before its first clock read: about 1-2 us of pause-instruction spinning.
constexpr int kTightPolls = 64;
}  // namespace

GroupMemory::GroupMemory(Segment& segment)
    : seg_(&segment),
      lines_(&segment.groupLine(0)),
      latency_(&segment.latencyLine(0, 0)),
      staging_(segment.staging(0)),
      stagingBytes_(segment.geometry().stagingBytes) {
  for (std::size_t i = 0; i < segment.geometry().ranks; ++i) {
    members_.push_back(i);
    slots_.push_back(&segment.rank(i));
  }
}

GroupMemory::GroupMemory(Segment& segment, std::size_t k, std::vector<std::size_t> members)
    : seg_(&segment),
      members_(std::move(members)),
      lines_(segment.laneGroupLines(k)),
      latency_(segment.laneGroupLatency(k)),
      staging_(segment.laneGroupStaging(k)),
      stagingBytes_(segment.geometry().stagingBytes) {
  for (std::size_t m : members_) slots_.push_back(&segment.rank(m));
}

ShmGroup::ShmGroup(GroupMemory memory, std::size_t local, std::size_t count,
                   std::vector<std::string> descriptions, const ShmOptions& options,
                   std::chrono::microseconds busyPoll, bool crowded, bool lightWake,
                   std::function<std::string(std::uint64_t)> tagText,
                   std::function<void(std::size_t, std::uint64_t, std::uint64_t)> mismatchSeen)
    : seg_(std::move(memory)),
      local_(local),
      count_(count),
      descriptions_(std::move(descriptions)),
      spin_(options.spin),
      busyPoll_(busyPoll),
      crowded_(crowded),
      lightWake_(lightWake),
      liveness_(options.livenessInterval),
      tagText_(std::move(tagText)),
      mismatchSeen_(std::move(mismatchSeen)) {
  for (std::size_t p = 0; p < count_; ++p)
    pids_.push_back(static_cast<pid_t>(seg_.rank(p).pid.load(std::memory_order_relaxed)));
  // Every rank probed every peer before any transport was built (shm_bootstrap.cpp), so every
  // rank computes the same answer from the same flags.
  canReadPeers_ = !options.cmaDisable;
  for (std::size_t from = 0; from < count_; ++from)
    for (std::size_t to = 0; to < count_; ++to)
      if (from != to &&
          seg_.control(from, to).consumer.canReadSender.load(std::memory_order_acquire) == 0 &&
          canReadPeers_) {
        canReadPeers_ = false;
        unreadable_ = "local rank " + std::to_string(to) + " could not read local rank " +
                      std::to_string(from) + "'s memory with process_vm_readv at setup";
      }
}

void ShmGroup::readPeer(int peer, std::uint64_t remote, void* dst, std::size_t bytes) {
  // process_vm_readv moves at most this much per call (the kernel caps one call near 2 GiB).
  constexpr std::size_t kMaxPerCall = std::size_t{1} << 30;
  const auto p = static_cast<std::size_t>(peer);
  auto* out = static_cast<std::uint8_t*>(dst);
  std::size_t done = 0;
  while (done < bytes) {
    const std::size_t ask = std::min(bytes - done, kMaxPerCall);
    iovec local{out + done, ask};
    iovec from{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote + done)), ask};
    const ssize_t n = ::process_vm_readv(pids_[p], &local, 1, &from, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EFAULT;
      if (err == ESRCH) fail(ErrorCode::PeerLost, descriptions_[p] + " exited");
      fail(ErrorCode::Internal, "process_vm_readv of " + std::to_string(bytes) + " bytes from " +
                                    descriptions_[p] + ": " + errnoText(err));
    }
    done += static_cast<std::size_t>(n);
  }
}

void ShmGroup::markGone(const std::string& why) {
  if (!why.empty()) {
    std::lock_guard<std::mutex> lk(abortMu_);
    if (goneWhy_.empty()) goneWhy_ = why;
  }
  GroupLine& mine = seg_.groupLine(local_);
  if (mine.gone.exchange(1, std::memory_order_seq_cst) != 0) return;
  for (std::size_t p = 0; p < count_; ++p)
    if (p != local_) ring(seg_.rank(p));
}

void ShmGroup::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(abortMu_);
    if (!abortWhy_.empty()) return;
    abortWhy_ = why.empty() ? "aborted" : why;
  }
  aborted_.store(true, std::memory_order_release);
  markGone();
  ring(seg_.rank(local_));
}

std::string ShmGroup::where() const {
  return inLines_ ? "shm line exchange #" + std::to_string(lineSeq_)
                  : "shm group barrier #" + std::to_string(epoch_);
}

void ShmGroup::fail(ErrorCode code, const std::string& what) {
  const Error e(code, "rank " + std::to_string(local_) + ": " + where() + ": " + what);
  markGone(e.what());
  throw e;
}

void ShmGroup::checkPeerSlow(std::size_t p, bool probeProcess) {
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lk(abortMu_);
    throw Error(ErrorCode::Aborted, abortWhy_);
  }
  if (seg_.groupLine(local_).gone.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lk(abortMu_);
    throw Error(ErrorCode::Aborted, "rank " + std::to_string(local_) +
                                        ": the shm transport failed earlier" +
                                        (goneWhy_.empty() ? std::string() : " (" + goneWhy_ + ")") +
                                        "; the group is broken");
  }
  if (seg_.groupLine(p).gone.load(std::memory_order_acquire) != 0)
    fail(ErrorCode::PeerLost,
         descriptions_[p] + " left the group (its transport closed or failed)");
  if (probeProcess && pids_[p] != ::getpid() && ::kill(pids_[p], 0) != 0 && errno == ESRCH)
    fail(ErrorCode::PeerLost, descriptions_[p] + " exited");
}

std::uint64_t ShmGroup::lineSeqOf(std::size_t p) const {
  std::uint64_t newest = 0;
  for (std::size_t slot = 0; slot < kLineDepth; ++slot)
    newest = std::max(newest, seg_.latencyLine(p, slot).seq.load(std::memory_order_seq_cst));
  return newest;
}

std::string ShmGroup::otherSequence(std::size_t p, bool waitingInLines) const {
  // Ranks run the same operations in the same order, so a peer this rank waits for cannot have
  // entered more barriers (resp. line exchanges) than this rank while it has not reached the
  // point this rank waits at: it runs another operation.
  if (waitingInLines) {
    const GroupLine& line = seg_.groupLine(p);
    const std::uint64_t arrived = line.arrived.load(std::memory_order_seq_cst);
    if (arrived <= epoch_) return {};
    return tagText_(line.tags[arrived % 2].load(std::memory_order_relaxed));
  }
  const std::uint64_t seq = lineSeqOf(p);
  if (seq <= lineSeq_) return {};
  return tagText_(seg_.latencyLine(p, seq % kLineDepth).tag.load(std::memory_order_relaxed));
}

template <class Ready>
void ShmGroup::await(std::size_t first, std::size_t last, Ready&& ready, Deadline deadline) {
  std::size_t next = first;
  auto advance = [&] {
    while (next < last && (next == local_ || ready(next))) ++next;
    return next == last;
  };
  if (advance()) return;
  RankSlot& self = seg_.rank(local_);
  if (busyPoll_.count() > 0) publishWaitCpu(self);
  // A peer usually arrives within a few hundred nanoseconds when the host is not
  // oversubscribed: poll without reading the clock first (a clock read costs about as much as
  // the arrival it would delay noticing).
  if (busyPoll_.count() > 0)
    for (int i = 0; i < kTightPolls; ++i) {
      cpuRelax();
      if (advance()) return;
    }
  const auto start = Clock::now();
  auto lastLiveness = start;
  for (;;) {
    if (advance()) return;
    const bool beside = busyPoll_.count() > 0 && besidePeer(self, seg_.rank(next));
    const auto now = Clock::now();
    const bool probe = now - lastLiveness >= liveness_;
    if (probe) lastLiveness = now;
    // A peer may post what this rank waits for, finish and leave (destroy its communicator, or
    // exit) at any moment after ready() above: its data stays in the segment. So the peer's
    // departure is read once, here, and only then is ready() asked again: a peer that posted
    // before it left is seen to have posted (it sets `gone` after its post, and this load is
    // seq_cst). Reading `gone` a second time (checkPeer(next)) after deciding the peer was
    // still there would call a peer that posted and left in between lost.
    const bool left = seg_.groupLine(next).gone.load(std::memory_order_seq_cst) != 0 ||
                      (probe && pids_[next] != ::getpid() && ::kill(pids_[next], 0) != 0);
    if (left) {
      if (ready(next)) continue;
      checkPeer(next, probe);  // it left without posting: PeerLost
    } else {
      checkPeer(local_, false);  // aborted, or this rank's own transport failed
    }
    const std::string other = otherSequence(next, inLines_);
    if (!other.empty()) {
      // The peer may have finished the awaited step and moved on since ready() was asked.
      if (ready(next)) continue;
      fail(ErrorCode::Mismatch, "this rank runs " + tagText_(inLines_ ? lineTag_ : tag_) + " but " +
                                    descriptions_[next] + " runs " + other);
    }
    if (now >= deadline) fail(ErrorCode::Timeout, "timed out waiting for " + descriptions_[next]);
    if (now - start < busyPoll_ && !beside) {
      cpuRelax();
      continue;
    }
    if (now - start < spin_) {
      std::this_thread::yield();
      continue;
    }
    self.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const auto bound = announced(lightWake_);
    const std::uint32_t bell = self.bell.load(std::memory_order_seq_cst);
    if (!ready(next) && seg_.groupLine(next).gone.load(std::memory_order_seq_cst) == 0 &&
        !aborted_.load(std::memory_order_seq_cst))
      futexWait(self.bell, bell,
                std::min<std::chrono::nanoseconds>(
                    std::min(deadline, lastLiveness + liveness_) - now, bound));
    self.sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

void ShmGroup::barrier(std::uint64_t tag, Deadline deadline) {
  const std::uint64_t target = ++epoch_;
  inLines_ = false;
  tag_ = tag;
  checkPeer(local_, false);
  seg_.groupLine(local_).tags[target % 2].store(tag, std::memory_order_relaxed);
  seg_.groupLine(local_).arrived.store(target, std::memory_order_seq_cst);
  for (std::size_t p = 0; p < count_; ++p)
    if (p != local_) notify(seg_.rank(p), lightWake_);
  auto arrived = [&](std::size_t p) {
    const GroupLine& line = seg_.groupLine(p);
    if (line.arrived.load(std::memory_order_seq_cst) < target) return false;
    const std::uint64_t theirs = line.tags[target % 2].load(std::memory_order_relaxed);
    if (theirs != tag) {
      if (mismatchSeen_) mismatchSeen_(p, tag, theirs);
      fail(ErrorCode::Mismatch, "this rank runs " + tagText_(tag) + " but " + descriptions_[p] +
                                    " runs " + tagText_(theirs));
    }
    return true;
  };
  await(0, count_, arrived, deadline);
}

void ShmGroup::linePost(std::uint64_t tag, const void* data, std::size_t bytes, Deadline deadline) {
  const std::uint64_t k = ++lineSeq_;
  inLines_ = true;
  lineTag_ = tag;
  checkPeer(local_, false);
  static_assert(sizeof(LatencyLine::payload) == kLineBytes);
  if (bytes > kLineBytes)
    throw Error(ErrorCode::Internal, "rank " + std::to_string(local_) + ": " + where() + ": " +
                                         std::to_string(bytes) + " bytes do not fit a line");
  // Entering k, this rank has read every line of the exchanges before: say so every kLineHalf
  // exchanges (a peer never waits for more, see below).
  if (k % kLineHalf == 0) seg_.groupLine(local_).linesEntered.store(k, std::memory_order_release);
  // Every peer must have entered exchange k - D + 1 (D = kLineDepth), i.e. finished reading
  // exchange k - D, before this rank overwrites its line of k - D. What was seen stays true:
  // peers are looked at again only once the last look no longer covers k. A peer that entered
  // exchange j published at least j - kLineHalf + 1: a peer at k (the furthest one waiting for
  // this rank can be) published at least k - D + 1, so this wait cannot deadlock.
  if (k >= kLineDepth && peersEntered_ < k - kLineDepth + 1) {
    const std::uint64_t need = k - kLineDepth + 1;
    std::uint64_t least = ~std::uint64_t{0};
    await(
        0, count_,
        [&](std::size_t p) {
          const std::uint64_t entered =
              seg_.groupLine(p).linesEntered.load(std::memory_order_acquire);
          if (entered < need) return false;
          least = std::min(least, entered);
          return true;
        },
        deadline);
    peersEntered_ = count_ > 1 ? least : k;
  }
  LatencyLine& line = seg_.latencyLine(local_, k % kLineDepth);
  if (bytes > 0) std::memcpy(line.payload, data, bytes);
  line.tag.store(tag, std::memory_order_relaxed);
  line.seq.store(k, std::memory_order_release);
  // Claim the lines of exchange k + 1 now (as many as this one used). A peer read them during
  // exchange k + 1 - kLineDepth, so they sit shared in its cache, and the first store to them
  // waits for the peer's copy to be invalidated: a cross-core round trip (0.2 us in this VM's
  // far placement) that the stores of this exchange cannot hide, since x86 commits stores in
  // order. Claimed now, it overlaps the rest of this call and the caller's next one
  // (docs/benchmarks.md: 8 B broadcast 0.21 -> 0.13 us in far placement).
  if (prefetchW_) {
    const auto* next =
        reinterpret_cast<const char*>(&seg_.latencyLine(local_, (k + 1) % kLineDepth));
    for (std::size_t o = 0; o < 2 * sizeof(std::uint64_t) + bytes; o += kCacheLine)
      prefetchForWrite(next + o);
  }
  for (std::size_t p = 0; p < count_; ++p)
    if (p != local_) notify(seg_.rank(p), lightWake_);
}

const std::uint8_t* ShmGroup::lineWait(int peer, Deadline deadline) {
  const std::uint64_t k = lineSeq_;
  const auto p = static_cast<std::size_t>(peer);
  const LatencyLine& line = seg_.latencyLine(p, k % kLineDepth);
  await(
      p, p + 1, [&](std::size_t) { return line.seq.load(std::memory_order_acquire) >= k; },
      deadline);
  const std::uint64_t theirs = line.tag.load(std::memory_order_relaxed);
  if (theirs != lineTag_) {
    if (mismatchSeen_) mismatchSeen_(p, lineTag_, theirs);
    fail(ErrorCode::Mismatch, "this rank runs " + tagText_(lineTag_) + " but " + descriptions_[p] +
                                  " runs " + tagText_(theirs));
  }
  return line.payload;
}

}  // namespace braid::transport::shm
