// The shared-memory transport: who moves the bytes, when, and how waiters sleep (framing and
// matching are in shm_channel.cpp, setup in shm_bootstrap.cpp).
//
// One mutex guards all state of this rank's transport. Whoever holds it moves data on every
// channel (poll: one load of each peer's head, plus whatever is queued). A waiter polls with the
// mutex, releasing it between polls: busily when this host's ranks do not outnumber its CPUs
// (the answer is usually that close), yielding the CPU between polls when they do, until
// `spin`; then it announces
// itself in its rank's `sleepers`, reads the doorbell word, polls once more, and sleeps on the
// futex without the mutex. Every writer of something a rank may wait for (head, tail, single-copy
// count, closed flags, completions by another thread of the same rank) calls notify(), which rings
// only when a sleeper is announced: the announcement is a seq_cst RMW before the last poll, the
// writer's check a seq_cst fence after its store, so one of the two sees the other. Sleeps last
// at most livenessInterval; a sleeper then polls the peers' pidfds (or kill(pid, 0)).
//
// The background thread starts on the first send that does not fit in its ring or large
// receive whose poster may not wait soon (not Request::attended: an algorithm's requests are
// moved by its own waits), and runs only while such work is outstanding and no thread waits in this
// transport (after a short grace period, since the owner is usually about to wait). It sleeps on
// the same doorbell.
#include "transport/shm/shm_transport.hpp"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <braid/error.hpp>
#include <cerrno>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "common/machine.hpp"
#include "kernels/reduce.hpp"
#include "transport/engine.hpp"
#include "transport/lane_book.hpp"
#include "transport/shm/shm_bootstrap.hpp"
#include "transport/shm/shm_channel.hpp"
#include "transport/shm/shm_group.hpp"
#include "transport/shm/shm_single_copy.hpp"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace braid::transport {

namespace {

using shm::Channel;
using State = Request::State;

constexpr auto kBackgroundGrace = std::chrono::microseconds(200);

using shm::ShmGroup;

// The P2P tag of the lane group's number, sent by a sub-communicator's first rank to the others
// (openLaneGroup): "lanegrup".
constexpr std::uint64_t kLaneGroupTag = kP2PTagBit | 0x6c616e6567727570ULL;

class ShmTransportImpl;

// A sub-communicator's direct-collective group in one of the segment's lane groups. It gives the
// lane group back when its last member lets go.
class LaneShmGroup final : public ShmGroup {
 public:
  template <class... Args>
  LaneShmGroup(ShmTransportImpl& owner, shm::LaneGroupHeader& header, std::uint64_t lane,
               Args&&... args)
      : ShmGroup(std::forward<Args>(args)...), owner_(owner), header_(header), lane_(lane) {}
  ~LaneShmGroup() override;
  std::uint64_t lane() const { return lane_; }

 private:
  ShmTransportImpl& owner_;
  shm::LaneGroupHeader& header_;
  const std::uint64_t lane_;
};

// A peer process, watched while waiters sleep.
struct PeerProcess {
  std::size_t local = 0;
  pid_t pid = 0;
  Fd pidfd;  // empty: fall back to kill(pid, 0)
};

class ShmTransportImpl final : public ShmTransport, private shm::CompletionSink {
 public:
  ShmTransportImpl(int rank, int size, const ShmOptions& options, shm::Attachment attachment);
  ~ShmTransportImpl() override;
  ShmTransportImpl(const ShmTransportImpl&) = delete;
  ShmTransportImpl& operator=(const ShmTransportImpl&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override;
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override;
  bool test(Request& req) override;
  void wait(Request& req, Deadline deadline) override;
  std::string describePeer(int peer) const override;
  void abort(const std::string& why) override;
  std::string pathTo(int peer) const override;
  bool lightWake() const override { return att_.lightWake; }
  std::string singleCopy() const override { return singleCopy_; }
  std::string directChunk() const override { return chunk_; }
  std::string directStreaming() const override { return streaming_; }
  SharedMemoryGroup* sharedGroup() override { return group_.get(); }

  // Lanes: sub-communicators on this segment (docs/architecture.md, "Shared connections").
  bool carriesLanes() const override { return true; }
  void openLane(std::uint64_t lane, std::vector<int> peers) override;
  void closeLane(std::uint64_t lane) override;
  void abortLane(std::uint64_t lane, const std::string& why) override;
  bool peerLeftLane(std::uint64_t lane, int peer) const override {
    if (peer < 0 || peer >= size_ || localOf_[peer] < 0) return false;
    std::lock_guard<std::mutex> lk(mu_);
    return channel(peer).peerLaneError(lane) != nullptr;
  }
  void postSendOnLane(std::uint64_t lane, int peer, const void* data, std::size_t bytes,
                      std::uint64_t tag, Request& req) override {
    prepare("postSend", peer, data, bytes, tag, true, req);
    req.lane = lane;
    std::lock_guard<std::mutex> lk(mu_);
    post(req);
  }
  void postRecvOnLane(std::uint64_t lane, int peer, void* data, std::size_t bytes,
                      std::uint64_t tag, Request& req) override {
    prepare("postRecv", peer, data, bytes, tag, false, req);
    req.lane = lane;
    std::lock_guard<std::mutex> lk(mu_);
    post(req);
  }
  std::unique_ptr<SharedMemoryGroup> openLaneGroup(std::uint64_t lane, std::span<const int> members,
                                                   Deadline deadline) override;
  /// A lane group is going (LaneShmGroup's destructor).
  void forgetLaneGroup(const LaneShmGroup* group);

 private:
  // CompletionSink (called with mu_ held).
  void finish(Request& req, State state, bool channelError) override;
  void finishAlone(Request& req, Error error) override {
    engine_.publishAlone(req, std::move(error));  // the last touch
  }
  std::string tagText(std::uint64_t tag) const override;
  void mismatchSeen(int peer, std::uint64_t expected, std::uint64_t received) const override {
    noteMismatch(peer, expected, received);
  }
  void mismatchSeenOnLane(int peer, std::uint64_t expected, std::uint64_t received,
                          std::uint64_t lane) const override {
    noteMismatch(peer, expected, received, lane);
  }
  bool laneClosed(std::uint64_t lane) const override { return lanes_.closed(lane); }
  void tellLanePeers(std::uint64_t lane, const std::vector<int>& peers, bool aborted);
  // The owner (lane 0) is gone here with `error`: its requests fail, its group is left.
  void endOwner(Error error);

  Channel& channel(int peer) { return channels_[static_cast<std::size_t>(localOf_[peer])]; }
  const Channel& channel(int peer) const {
    return channels_[static_cast<std::size_t>(localOf_[peer])];
  }
  void prepare(const char* op, int peer, const void* data, std::size_t bytes, std::uint64_t tag,
               bool isSend, Request& req) {
    engine::armRequest(
        req, op, rank_, size_, peer, data, bytes, tag, isSend,
        peer >= 0 && peer < size_ && localOf_[peer] >= 0, " over shared memory",
        [this] { return ", " + std::to_string(att_.localRanks.size()) + " ranks on this host"; },
        [this](int p) { return describePeer(p); });
  }
  // Everything below requires mu_.
  void post(Request& req);
  void progressAll();
  void checkLiveness();
  bool livenessDue() const { return Clock::now() - lastLiveness_ >= options_.livenessInterval; }
  void notifyCompletions();
  void failTransport(Error error);
  [[noreturn]] void throwFailure(const Request& req) const;
  bool backgroundWork() const;
  void wakeBackground();
  void sleepOnBell(std::unique_lock<std::mutex>& lk, Clock::time_point until, const Request* req);
  void backgroundLoop();
  // Sets a group's single-copy threshold, pipelining chunk and streaming threshold
  // (shm_single_copy.hpp, shm_streaming.hpp), measured or cached where nothing decides them;
  // collective over the group. Returns what singleCopy(), directChunk() and directStreaming()
  // report.
  struct DirectTexts {
    std::string single, chunk, streaming;
  };
  DirectTexts chooseDirect(ShmGroup& group, bool crowded);

  const int rank_;
  const int size_;
  const ShmOptions options_;
  shm::Attachment att_;
  std::chrono::microseconds busyPoll_{0};  // options_.spin, or 0 when oversubscribed
  shm::RankSlot* self_ = nullptr;
  std::vector<int> localOf_;       // global rank -> local index, -1 when not on this host
  std::vector<Channel> channels_;  // by local index; this rank's own entry is inert
  std::vector<PeerProcess> processes_;
  std::vector<pollfd> pollFds_;      // one per processes_ entry with a pidfd, built once
  std::unique_ptr<ShmGroup> group_;  // when this host's ranks are the whole communicator
  std::string singleCopy_;           // what singleCopy() reports
  std::string chunk_;                // what directChunk() reports
  std::string streaming_;            // what directStreaming() reports

  engine::Engine engine_;
  std::mutex& mu_;  // engine_.mutex()
  std::condition_variable backgroundCv_;
  Clock::time_point lastLiveness_ = Clock::now();
  int waiters_ = 0;
  bool stopping_ = false;
  bool backgroundIdle_ = false;
  std::thread background_;
  // Lanes (mu_), last: the members above are what every operation touches.
  LaneBook lanes_;
  std::vector<LaneShmGroup*> laneGroups_;  // sub-communicators' groups on this segment
  std::optional<Error> ownerGone_;         // the owner's view closed or aborted its part
};

ShmTransportImpl::ShmTransportImpl(int rank, int size, const ShmOptions& options,
                                   shm::Attachment attachment)
    : rank_(rank),
      size_(size),
      options_(options),
      att_(std::move(attachment)),
      engine_(rank),
      mu_(engine_.mutex()) {
  const std::size_t count = att_.localRanks.size();
  self_ = &att_.segment.rank(att_.local);
  // Polling without yielding only pays when the peer is likely on a CPU at the same time: when
  // the host's ranks have at least a CPU each (of those their affinity masks allow together).
  // Then the whole spin polls without yielding: a yield hands the CPU to whatever else is
  // runnable on the host (a build, another job) for up to a scheduler slice (milliseconds),
  // while the peer, on a CPU of its own, answers in microseconds; a sleep on the futex instead
  // is woken by the peer and preempts that other work at once (docs/benchmarks.md, "Waiting
  // under external load"). A crowded host yields from the start (busyPoll_ 0): there the peer
  // may need this very CPU.
  if (count <= att_.hostCpus) busyPoll_ = options.spin;
  // Messages go single copy by default only on a crowded host: with a CPU each, the ring's two
  // copies run at once and beat process_vm_readv (docs/benchmarks.md, "Point-to-point" and
  // "Single copy where it wins"). The direct collectives' threshold and chunk: chooseDirect().
  const bool crowded = count > att_.hostCpus;
  const std::size_t cmaThreshold =
      options.cmaThresholdBytes.value_or(crowded ? kCrowdedCmaThreshold : SIZE_MAX);
  localOf_.assign(static_cast<std::size_t>(size), -1);
  for (std::size_t i = 0; i < count; ++i) localOf_[att_.localRanks[i]] = static_cast<int>(i);
  const pid_t me = ::getpid();
  channels_.reserve(count);
  shm::CompletionSink& sink = *this;
  for (std::size_t p = 0; p < count; ++p) {
    const shm::RankSlot& slot = att_.segment.rank(p);
    const pid_t pid = static_cast<pid_t>(slot.pid.load(std::memory_order_relaxed));
    shm::ChannelConfig c;
    c.selfRank = rank;
    c.peerRank = att_.localRanks[p];
    c.description = "rank " + std::to_string(c.peerRank) + " (pid " + std::to_string(pid) + " on " +
                    att_.hostName + ")";
    if (p == att_.local) {
      channels_.emplace_back();
      continue;
    }
    c.out = &att_.segment.control(att_.local, p);
    c.outRing = att_.segment.ring(att_.local, p);
    c.in = &att_.segment.control(p, att_.local);
    c.inRing = att_.segment.ring(p, att_.local);
    c.ringBytes = att_.geometry.ringBytes();
    c.slotBytes = att_.geometry.slotBytes;
    c.peerSlot = &att_.segment.rank(p);
    c.peerPid = pid;
    c.lightWake = att_.lightWake;
    const bool peerReadsUs = c.out->consumer.canReadSender.load(std::memory_order_relaxed) != 0;
    c.singleCopyBytes = !options.cmaDisable && peerReadsUs ? cmaThreshold : SIZE_MAX;
    channels_.emplace_back(std::move(c), sink);
    if (pid != me) {
      PeerProcess proc;
      proc.local = p;
      proc.pid = pid;
      proc.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
      processes_.push_back(std::move(proc));
    }
  }
  for (const PeerProcess& proc : processes_)
    if (proc.pidfd) pollFds_.push_back(pollfd{proc.pidfd.get(), POLLIN, 0});
  if (att_.geometry.stagingBytes > 0 && count == static_cast<std::size_t>(size)) {
    std::vector<std::string> descriptions;
    for (const Channel& c : channels_) descriptions.push_back(c.description());
    group_ = std::make_unique<ShmGroup>(
        shm::GroupMemory(att_.segment), att_.local, count, std::move(descriptions), options_,
        busyPoll_, crowded, att_.lightWake, [this](std::uint64_t t) { return tagText(t); },
        [this](std::size_t local, std::uint64_t mine, std::uint64_t theirs) {
          mismatchSeen(att_.localRanks[local], mine, theirs);
        });
    DirectTexts texts = chooseDirect(*group_, crowded);
    singleCopy_ = std::move(texts.single);
    chunk_ = std::move(texts.chunk);
    streaming_ = std::move(texts.streaming);
  } else {
    singleCopy_ =
        options.cmaDisable ? "messages: never (BRAID_SHM_CMA_DISABLE)"
        : cmaThreshold == SIZE_MAX
            ? "messages: never (a CPU per rank: the rings' copies overlap)"
            : "messages: from " + std::to_string(cmaThreshold) + " B" +
                  (options.cmaThresholdBytes ? " (BRAID_SHM_CMA_THRESHOLD)" : " (crowded host)");
  }
}

ShmTransportImpl::DirectTexts ShmTransportImpl::chooseDirect(ShmGroup& group, bool crowded) {
  shm::SingleCopyChoice c;
  bool measureSingle = false;
  if (options_.cmaDisable) {
    c.why = "BRAID_SHM_CMA_DISABLE";
  } else if (!group.canReadPeers()) {
    c.why = group.unreadablePair() +
            " (ptrace restrictions: Yama ptrace_scope, seccomp, a "
            "container without CAP_SYS_PTRACE)";
  } else if (options_.cmaThresholdBytes) {
    c.bytes = *options_.cmaThresholdBytes;
    c.why = "BRAID_SHM_CMA_THRESHOLD";
  } else if (crowded) {
    // Staged: ranks taking turns on the CPUs read each other's buffers with process_vm_readv
    // 1.3-7x slower than they copy through the staging areas (docs/benchmarks.md, "Crowded
    // hosts stage"); messages keep the crowded host's single copy (the constructor).
    c.why = "crowded host: " + std::to_string(group.size()) + " ranks on " +
            std::to_string(att_.hostCpus) + " CPUs (staged)";
  } else {
    measureSingle = true;
  }
  shm::ChunkChoice k;
  bool measureChunk = false;
  if (!options_.chunkFrom.empty()) {
    k = {options_.chunkBytes, options_.chunkFrom};
  } else if (crowded) {
    k = {options_.chunkBytes, "crowded host: not measured (BRAID_CHUNK_SIZE's default)"};
  } else {
    measureChunk = true;
  }
  shm::StreamingChoice st;
  bool measureStreaming = false;
  if (kernels::streamingThresholdSet() != 0) {
    st.why = "BRAID_LLC_SIZE (the process's threshold, half of it)";
  } else if (!options_.measureStreaming) {
    st.why = "the process's threshold (a transport made alone)";
  } else if (crowded) {
    st.why = "crowded host: not measured (the process's threshold)";
  } else {
    measureStreaming = true;
  }
  if (measureSingle || measureChunk || measureStreaming) {
    // No operation runs on this transport yet, so any tag will do ("singleco" in a dump).
    constexpr std::uint64_t kMeasureTag = 0x73696e676c65636fULL;  // "singleco"
    shm::DirectChoice d = shm::cachedOrMeasuredDirect(
        group, kMeasureTag, Clock::now() + options_.setupTimeout, options_.tuneCachePath,
        options_.tuneKey, measureSingle, measureChunk, measureStreaming,
        machine::lastLevelCache().bytes, options_.tuneMaxOffCpuPermille);
    if (measureSingle) c = std::move(d.single);
    if (measureChunk) {
      k = std::move(d.chunk);
      // A staging half below every probe size measured nothing: the default, bounded by it.
      if (k.bytes == 0) k = {options_.chunkBytes, "staging too small to measure"};
    }
    if (measureStreaming) {
      st = std::move(d.streaming);
      if (st.bytes == 0) st.why = "the measurement had a round of 0 ns (the process's threshold)";
    }
  }
  group.setSingleCopyBytes(c.bytes);
  group.setChunkBytes(k.bytes);
  group.setStreamingBytes(st.bytes);
  DirectTexts out;
  out.chunk = std::to_string(k.bytes) + " B: " + k.why;
  out.streaming =
      (group.streamingBytes() == SIZE_MAX ? std::string("never")
                                          : std::to_string(group.streamingBytes()) + " B") +
      ": " + st.why;
  out.single =
      (c.bytes == SIZE_MAX ? std::string("never") : "from " + std::to_string(c.bytes) + " B") +
      ": " + c.why;
  // Messages keep their own rule (the constructor's cmaThreshold): with a CPU per rank the
  // rings' copies on both sides overlap, which the measured staged step does not
  // (docs/benchmarks.md, "Single copy where it wins": gather through CMA lost from 256 KiB);
  // on a crowded host a message's single copy saves a turn on the CPU for its second copy.
  if (!options_.cmaDisable && group.canReadPeers() && !options_.cmaThresholdBytes)
    out.single += crowded ? "; messages: from " + std::to_string(kCrowdedCmaThreshold) + " B"
                          : "; messages: never (a CPU per rank: the rings' copies overlap)";
  return out;
}

ShmTransportImpl::~ShmTransportImpl() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    backgroundCv_.notify_all();
  }
  shm::ring(*self_);
  if (group_) group_->markGone();
  if (background_.joinable()) background_.join();
  std::lock_guard<std::mutex> lk(mu_);
  // Peers still running see PeerLost instead of waiting for their deadline.
  for (Channel& c : channels_) c.close();
}

std::string ShmTransportImpl::describePeer(int peer) const {
  if (peer < 0 || peer >= size_ || localOf_[peer] < 0) return "rank " + std::to_string(peer);
  return channel(peer).description();
}

std::string ShmTransportImpl::pathTo(int peer) const {
  if (peer < 0 || peer >= size_ || localOf_[peer] < 0 || peer == rank_) return "";
  return channel(peer).singleCopy() ? "shm+cma" : "shm";
}

std::string ShmTransportImpl::tagText(std::uint64_t tag) const {
  return describeTag(tag);
}

// ---- posting ----

void ShmTransportImpl::post(Request& req) {
  if (req.lane != 0 ? lanes_.aborted(req.lane) != nullptr : ownerGone_.has_value()) {
    finish(req, State::Failed, false);
    notifyCompletions();
    return;
  }
  Channel& c = channel(req.peer);
  engine_.post(req, c, *this);
  if (req.state.load(std::memory_order_relaxed) == State::Pending &&
      c.needsBackground(options_.backgroundAttended))
    wakeBackground();
  notifyCompletions();
}

void ShmTransportImpl::postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                                Request& req) {
  prepare("postSend", peer, data, bytes, tag, true, req);
  std::lock_guard<std::mutex> lk(mu_);
  post(req);
}

void ShmTransportImpl::postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                                Request& req) {
  prepare("postRecv", peer, data, bytes, tag, false, req);
  std::lock_guard<std::mutex> lk(mu_);
  post(req);
}

// ---- completion and failure ----

void ShmTransportImpl::finish(Request& req, State state, bool channelError) {
  engine_.publish(req, state, channelError);  // the last touch
}

// Another thread of this rank may sleep on a request that was just completed.
void ShmTransportImpl::notifyCompletions() {
  if (!engine_.takeCompleted()) return;
  shm::notify(*self_, att_.lightWake);
}

void ShmTransportImpl::failTransport(Error error) {
  if (!engine_.fail(std::move(error))) return;
  for (Channel& c : channels_) c.abandon();  // closes the pairs: peers see PeerLost
  if (group_) group_->markGone(engine_.failure()->what());
  for (LaneShmGroup* g : laneGroups_) g->markGone(engine_.failure()->what());
  backgroundCv_.notify_all();
}

void ShmTransportImpl::abort(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  failTransport(Error(ErrorCode::Aborted, why));
  if (group_) group_->abort(why);
  for (LaneShmGroup* g : laneGroups_) g->abort(why);
  engine_.takeCompleted();
  shm::ring(*self_);  // every waiter of this rank, asleep or about to be
}

void ShmTransportImpl::throwFailure(const Request& req) const {
  const Channel& c = channel(req.peer);
  if (engine::Engine::failedByTransport(req) && !engine_.failure()) {
    if (req.lane == 0 && ownerGone_) throw *ownerGone_;
    if (const Error* gone = c.peerLaneError(req.lane)) throw *gone;       // the peer left the lane
    if (const Error* aborted = lanes_.aborted(req.lane)) throw *aborted;  // aborted here
  }
  engine_.throwFailure(req, c.error(), c.description());
}

// ---- lanes ----

void ShmTransportImpl::openLane(std::uint64_t lane, std::vector<int> peers) {
  std::lock_guard<std::mutex> lk(mu_);
  lanes_.open(lane, std::move(peers), rank_, size_, "this rank's shared memory segment");
  for (Channel& c : channels_) c.holdAside();
}

void ShmTransportImpl::tellLanePeers(std::uint64_t lane, const std::vector<int>& peers,
                                     bool aborted) {
  for (int p : peers)
    if (p >= 0 && p < size_ && p != rank_ && localOf_[p] >= 0)
      channel(p).sendLaneGone(lane, aborted);
}

void ShmTransportImpl::endOwner(Error error) {
  if (ownerGone_) return;
  ownerGone_ = std::move(error);
  for (Channel& c : channels_)
    if (c.peerRank() != rank_ && !c.failLane(0))
      c.breakOff(Error(ErrorCode::PeerLost, "rank " + std::to_string(rank_) +
                                                " closed its shared memory channel to " +
                                                c.description() + ": " + ownerGone_->what() +
                                                " in the middle of a message"));
  if (group_) {
    if (ownerGone_->code() == ErrorCode::Aborted)
      group_->abort(ownerGone_->detail());
    else
      group_->markGone(ownerGone_->what());
  }
  engine_.markCompleted();
  notifyCompletions();
}

void ShmTransportImpl::closeLane(std::uint64_t lane) {
  std::lock_guard<std::mutex> lk(mu_);
  if (lane == 0) {  // the owner is destroyed while sub-communicators still use the segment
    endOwner(Error(ErrorCode::Aborted, "rank " + std::to_string(rank_) +
                                           ": the communicator that made this shared memory "
                                           "segment was destroyed"));
    // Its peers' operations with this rank on it fail at once (behind its last messages).
    tellLanePeers(0, lanes_.ownerPeers(rank_, size_), false);
    return;
  }
  const std::vector<int> peers = lanes_.close(lane);
  // Nothing of the lane may stay queued: its requests belong to a communicator that is going
  // away. A message of it half moved (or a single-copy send not read yet: the peer would read
  // a buffer that is going) cannot be finished without them: that pair breaks. Otherwise the
  // peer is told, so that what it still waits for on the lane fails at once.
  for (Channel& c : channels_) {
    if (c.peerRank() == rank_) continue;
    if (!c.failLane(lane))
      c.breakOff(Error(ErrorCode::PeerLost, "rank " + std::to_string(rank_) +
                                                " closed its shared memory channel to " +
                                                c.description() +
                                                ": a communicator sharing it was destroyed in "
                                                "the middle of a message"));
    c.dropLane(lane);
  }
  tellLanePeers(lane, peers, false);
  engine_.markCompleted();
  notifyCompletions();
}

void ShmTransportImpl::abortLane(std::uint64_t lane, const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (lane == 0) {
    // The owner is aborted (a revoke): the whole transport when no sub-communicator uses it,
    // so that the peers see this rank lost at once; else its part only (lane 0's requests and
    // its group), and the sub-communicators' lanes go on.
    if (lanes_.onlyOpen(0)) {
      failTransport(Error(ErrorCode::Aborted, why));
      if (group_) group_->abort(why);
      engine_.takeCompleted();
      shm::ring(*self_);
    } else {
      endOwner(Error(ErrorCode::Aborted, why));
      tellLanePeers(0, lanes_.ownerPeers(rank_, size_), true);
    }
    return;
  }
  const std::vector<int>& peers = lanes_.abort(lane, Error(ErrorCode::Aborted, why));
  for (Channel& c : channels_)
    if (c.peerRank() != rank_ && !c.failLane(lane))
      c.breakOff(Error(ErrorCode::PeerLost,
                       "rank " + std::to_string(rank_) + " closed its shared memory channel to " +
                           c.description() + ": a communicator sharing it was aborted (" + why +
                           ") in the middle of a message"));
  tellLanePeers(lane, peers, true);  // the peers' operations on the lane fail at once
  for (LaneShmGroup* g : laneGroups_)
    if (g->lane() == lane) g->abort(why);
  engine_.markCompleted();
  notifyCompletions();
}

std::unique_ptr<SharedMemoryGroup> ShmTransportImpl::openLaneGroup(std::uint64_t lane,
                                                                   std::span<const int> members,
                                                                   Deadline deadline) {
  const std::size_t count = members.size();
  std::vector<std::size_t> locals;  // the members' local ranks on this segment
  std::size_t me = count;
  for (std::size_t i = 0; i < count; ++i) {
    const int m = members[i];
    if (m < 0 || m >= size_ || localOf_[m] < 0)
      throw Error(ErrorCode::InvalidArgument, "openLaneGroup: rank " + std::to_string(rank_) +
                                                  ": member " + std::to_string(m) +
                                                  " does not map this shared memory segment");
    locals.push_back(static_cast<std::size_t>(localOf_[m]));
    if (m == rank_) me = i;
  }
  if (me == count)
    throw Error(ErrorCode::InvalidArgument, "openLaneGroup: rank " + std::to_string(rank_) +
                                                " is not among the group's members");
  // The first member claims a free lane group and tells the others its number (kNone: there
  // is none, and each member makes do without).
  constexpr std::uint64_t kNone = ~std::uint64_t{0};
  std::uint64_t number = kNone;
  shm::Segment& seg = att_.segment;
  const shm::Geometry& g = seg.geometry();
  if (me == 0) {
    for (std::size_t k = 0; k < g.laneGroups && number == kNone; ++k) {
      shm::LaneGroupHeader& h = seg.laneGroup(k);
      std::uint32_t free = 0;
      if (!h.claimed.compare_exchange_strong(free, 1, std::memory_order_acq_rel)) continue;
      // Lines as a fresh segment's: a group that held it before left sequence numbers there.
      for (std::size_t i = 0; i < count; ++i) {
        std::construct_at(seg.laneGroupLines(k) + i);
        for (std::size_t slot = 0; slot < shm::kLineDepth; ++slot)
          std::construct_at(seg.laneGroupLatency(k) + shm::kLineDepth * i + slot);
      }
      h.lane.store(lane, std::memory_order_relaxed);
      h.users.store(static_cast<std::uint32_t>(count), std::memory_order_release);
      number = k;
    }
    const auto sends = std::make_unique<Request[]>(count);
    for (std::size_t i = 1; i < count; ++i)
      postSendOnLane(lane, members[i], &number, sizeof number, kLaneGroupTag, sends[i]);
    for (std::size_t i = 1; i < count; ++i) wait(sends[i], deadline);
  } else {
    Request r;
    postRecvOnLane(lane, members[0], &number, sizeof number, kLaneGroupTag, r);
    wait(r, deadline);
    if (number != kNone && number >= g.laneGroups)
      throw Error(ErrorCode::Internal, "openLaneGroup: rank " + std::to_string(rank_) +
                                           " was told lane group " + std::to_string(number) +
                                           " of " + std::to_string(g.laneGroups));
  }
  if (number == kNone) return nullptr;
  // Peers named in the group's numbering and the segment owner's, as LaneTransport names them.
  std::vector<std::string> descriptions;
  for (std::size_t i = 0; i < count; ++i)
    descriptions.push_back("rank " + std::to_string(i) + " (world " +
                           channel(members[i]).description() + ")");
  const bool crowded = count > att_.hostCpus;
  auto group = std::make_unique<LaneShmGroup>(
      *this, seg.laneGroup(number), lane, shm::GroupMemory(seg, number, locals), me, count,
      std::move(descriptions), options_,
      count <= att_.hostCpus ? options_.spin : std::chrono::microseconds(0), crowded,
      att_.lightWake, [this](std::uint64_t t) { return tagText(t); },
      [this, lane, owned = std::vector<int>(members.begin(), members.end())](
          std::size_t i, std::uint64_t mine, std::uint64_t theirs) {
        noteMismatch(owned[i], mine, theirs, lane);
      });
  {
    std::lock_guard<std::mutex> lk(mu_);
    laneGroups_.push_back(group.get());
    if (engine_.failure()) group->markGone(engine_.failure()->what());
  }
  chooseDirect(*group, crowded);
  return group;
}

void ShmTransportImpl::forgetLaneGroup(const LaneShmGroup* group) {
  std::lock_guard<std::mutex> lk(mu_);
  std::erase(laneGroups_, group);
}

LaneShmGroup::~LaneShmGroup() {
  markGone();  // its peers' operations on it fail instead of waiting
  owner_.forgetLaneGroup(this);
  released_ = true;
  if (header_.users.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    header_.lane.store(0, std::memory_order_relaxed);
    header_.claimed.store(0, std::memory_order_release);
  }
}

// ---- progress ----

void ShmTransportImpl::progressAll() {
  for (Channel& c : channels_) c.progress();
  notifyCompletions();
}

void ShmTransportImpl::checkLiveness() {
  lastLiveness_ = Clock::now();
  if (!pollFds_.empty()) {
    for (pollfd& p : pollFds_) p.revents = 0;
    if (::poll(pollFds_.data(), pollFds_.size(), 0) > 0) {
      std::size_t i = 0;
      for (const PeerProcess& proc : processes_) {
        if (!proc.pidfd) continue;
        if ((pollFds_[i++].revents & (POLLIN | POLLHUP | POLLERR)) != 0)
          channels_[proc.local].peerExited();
      }
    }
  }
  for (const PeerProcess& proc : processes_)
    if (!proc.pidfd && ::kill(proc.pid, 0) != 0 && errno == ESRCH)
      channels_[proc.local].peerExited();
  progressAll();
}

bool ShmTransportImpl::test(Request& req) {
  State s = req.state.load(std::memory_order_acquire);
  if (s == State::Done || s == State::Idle) return true;
  std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
  if (lk.owns_lock() && s == State::Pending) {
    progressAll();
    if (req.state.load(std::memory_order_acquire) == State::Pending && livenessDue())
      checkLiveness();
  }
  s = req.state.load(std::memory_order_acquire);
  if (s == State::Failed) {
    if (!lk.owns_lock()) lk.lock();
    throwFailure(req);
  }
  return s == State::Done;
}

// Sleeps on this rank's doorbell until rung, or `until`, or the next liveness check is due.
// `req` (may be null) is rechecked after the sleeper is announced.
void ShmTransportImpl::sleepOnBell(std::unique_lock<std::mutex>& lk, Clock::time_point until,
                                   const Request* req) {
  self_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  const auto bound = shm::announced(att_.lightWake);
  const std::uint32_t bell = self_->bell.load(std::memory_order_seq_cst);
  progressAll();  // the last look, with the sleeper announced
  const bool still = req == nullptr
                         ? !engine_.failure() && !stopping_ && waiters_ == 0 && backgroundWork()
                         : req->state.load(std::memory_order_acquire) == State::Pending;
  if (still) {
    const auto now = Clock::now();
    const auto wake = std::min(until, lastLiveness_ + options_.livenessInterval);
    lk.unlock();
    shm::futexWait(self_->bell, bell, std::min<std::chrono::nanoseconds>(wake - now, bound));
    self_->sleepers.fetch_sub(1, std::memory_order_relaxed);
    lk.lock();
  } else {
    self_->sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

void ShmTransportImpl::wait(Request& req, Deadline deadline) {
  State s = req.state.load(std::memory_order_acquire);
  if (s == State::Done || s == State::Idle) return;
  std::unique_lock<std::mutex> lk(mu_);
  ++waiters_;
  struct Leave {
    ShmTransportImpl* self;
    ~Leave() {
      --self->waiters_;
      self->wakeBackground();  // leftover work nobody waits for
    }
  } leave{this};
  // Beside the peer (shm::besidePeer): no busy polling, yield to it at once.
  bool beside = false;
  if (busyPoll_.count() > 0) {
    shm::publishWaitCpu(*self_);
    beside =
        shm::besidePeer(*self_, att_.segment.rank(static_cast<std::size_t>(localOf_[req.peer])));
  }
  engine::waitLoop(
      lk, req, deadline,
      engine::WaitPolicy{options_.spin, beside ? std::chrono::microseconds(0) : busyPoll_},
      [&] { progressAll(); },
      [&](Deadline until) {
        if (livenessDue())
          checkLiveness();
        else
          sleepOnBell(lk, until, &req);
      },
      [&](const Request& r) { throwFailure(r); },
      [&](const Request& r) {
        const Channel& c = channel(r.peer);
        // The pair may stop mid-message now, so nothing later on this transport can be trusted.
        failTransport(engine::timeoutError(rank_, r, c.description(), c.stallReason(r)));
        notifyCompletions();
        throwFailure(r);
      });
}

// ---- background ----

bool ShmTransportImpl::backgroundWork() const {
  for (const Channel& c : channels_)
    if (c.needsBackground(options_.backgroundAttended)) return true;
  return false;
}

void ShmTransportImpl::wakeBackground() {
  if (engine_.failure() || stopping_ || waiters_ > 0) return;
  if (!background_.joinable()) {
    if (!backgroundWork()) return;
    try {
      background_ = std::thread([this] { backgroundLoop(); });
    } catch (const std::system_error&) {  // no thread: the owner's wait still moves the data
    }
    return;
  }
  if (backgroundIdle_) backgroundCv_.notify_one();
}

void ShmTransportImpl::backgroundLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  bool graceGiven = false;
  while (!stopping_) {
    if (engine_.failure() || waiters_ > 0 || !backgroundWork()) {
      graceGiven = false;
      backgroundIdle_ = true;
      backgroundCv_.wait(lk);
      backgroundIdle_ = false;
      continue;
    }
    if (!graceGiven) {
      // Leave fresh work to its owner for a moment (a blocking caller is about to wait on it).
      graceGiven = true;
      backgroundCv_.wait_for(lk, kBackgroundGrace);
      continue;
    }
    try {
      progressAll();
      if (livenessDue()) checkLiveness();
      if (!stopping_ && !engine_.failure() && waiters_ == 0 && backgroundWork())
        sleepOnBell(lk, Clock::now() + options_.livenessInterval, nullptr);
    } catch (const std::exception& e) {  // never let an exception end the thread
      failTransport(Error(ErrorCode::Internal,
                          "rank " + std::to_string(rank_) + ": shm progress thread: " + e.what()));
      notifyCompletions();
    }
  }
}

}  // namespace

namespace {

void checkLocalRanks(int rank, int size, std::span<const int> localRanks) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::InvalidArgument, "createShmTransport: rank " + std::to_string(rank) +
                                                " is outside world size " + std::to_string(size));
  if (localRanks.empty() || !std::is_sorted(localRanks.begin(), localRanks.end()) ||
      std::adjacent_find(localRanks.begin(), localRanks.end()) != localRanks.end() ||
      localRanks.front() < 0 || localRanks.back() >= size ||
      std::find(localRanks.begin(), localRanks.end(), rank) == localRanks.end())
    throw Error(ErrorCode::InvalidArgument,
                "createShmTransport: rank " + std::to_string(rank) +
                    ": localRanks must be ascending distinct ranks of the world that include it");
}

}  // namespace

std::size_t shmSegmentsMade() noexcept {
  return shm::segmentsMade.load(std::memory_order_relaxed);
}

ShmPrepared::ShmPrepared(std::unique_ptr<shm::Prepared> state) : state_(std::move(state)) {}
ShmPrepared::~ShmPrepared() = default;
std::string ShmPrepared::entry() const {
  return state_->entry();
}

std::unique_ptr<ShmPrepared> prepareShm(const ShmOptions& options) {
  return std::make_unique<ShmPrepared>(shm::prepare(options));
}

std::unique_ptr<ShmTransport> createShmTransport(std::unique_ptr<ShmPrepared> prepared,
                                                 std::span<const std::string> entries, int rank,
                                                 int size, std::span<const int> localRanks,
                                                 const ShmOptions& options) {
  checkLocalRanks(rank, size, localRanks);
  if (!prepared)
    throw Error(ErrorCode::InvalidArgument,
                "createShmTransport: rank " + std::to_string(rank) + " was not prepared");
  const std::size_t hostCpus =
      options.hostCpus != 0
          ? options.hostCpus
          : static_cast<std::size_t>(machine::cpusTogether({machine::cpusText()}));
  shm::Attachment attachment =
      shm::attachSegment(prepared->state(), entries, rank, localRanks, hostCpus, options);
  return std::make_unique<ShmTransportImpl>(rank, size, options, std::move(attachment));
}

std::unique_ptr<ShmTransport> createShmTransport(Store& store, int rank, int size,
                                                 std::span<const int> localRanks,
                                                 const ShmOptions& options) {
  checkLocalRanks(rank, size, localRanks);
  auto prepared = prepareShm(options);
  const auto deadline = Clock::now() + options.setupTimeout;
  const std::string prefix = "shm/" + std::to_string(localRanks.front()) + "/entry/";
  const auto local = static_cast<std::size_t>(
      std::find(localRanks.begin(), localRanks.end(), rank) - localRanks.begin());
  store.setString(prefix + std::to_string(local), machine::cpusText() + "\n" + prepared->entry());
  std::vector<std::string> entries, cpus;
  for (std::size_t i = 0; i < localRanks.size(); ++i) {
    std::string value;
    try {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      value =
          store.getString(prefix + std::to_string(i), std::max(left, std::chrono::milliseconds(1)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank) + " timed out after " +
                                          std::to_string(options.setupTimeout.count()) +
                                          " ms waiting for rank " + std::to_string(localRanks[i]) +
                                          " to publish its shared-memory entry");
    }
    const std::size_t nl = value.find('\n');
    if (nl == std::string::npos)
      throw Error(ErrorCode::Internal, "createShmTransport: rank " + std::to_string(localRanks[i]) +
                                           " published a malformed shared-memory entry");
    cpus.push_back(value.substr(0, nl));
    entries.push_back(value.substr(nl + 1));
  }
  ShmOptions withCpus = options;
  if (withCpus.hostCpus == 0)
    withCpus.hostCpus = static_cast<std::size_t>(machine::cpusTogether(cpus));
  return createShmTransport(std::move(prepared), entries, rank, size, localRanks, withCpus);
}

}  // namespace braid::transport
