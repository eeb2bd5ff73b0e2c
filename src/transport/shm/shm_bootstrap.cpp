// Segment setup. Before the host's ranks are known, every rank prepares an offer (prepare()):
// a memfd of its own, or none, and a random nonce; its entry travels with the host entries the
// transport factory gathers anyway. Then, among the host's L ranks, with local 0 (the lowest
// rank) as the creator, and nothing but the segment to talk through:
//
//   creator: memfd: ftruncate its prepared memfd, mmap, initialize (the nonce last), register
//            named: shm_open("/braid-shm-<pid>-<nonce>", O_EXCL), the same
//   others:  memfd: open /proc/<pid>/fd/<fd>; named: shm_open the same name (retried until it
//            exists); wait until it has its size and the creator's nonce, mmap, register
//   everyone: wait until every RankSlot says attached; the creator then closes its memfd, or
//            unlinks the name (also when setup fails: NameGuard)
//   everyone: probe single-copy reads of each peer, mark probed, wait until every rank has
//
// A memfd stays open in the creator until every other rank has mapped it; from then on only
// mappings hold the memory, and it is freed with the last one. The nonce tells a rank that it
// opened the creator's very segment, not some other file (a reused descriptor number, a stale
// name) whose rings its peers would never read: a rank that finds another nonce refuses it with
// an error. Waiting polls the segment with a growing pause (20 us to 1 ms), checks every 10 ms
// that the local ranks' processes still exist (PeerLost when one is gone), and ends at
// ShmOptions::setupTimeout naming the ranks that are missing.
#include "transport/shm/shm_bootstrap.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <braid/error.hpp>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

namespace braid::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

std::uint64_t randomU64() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::string localHostName() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

std::string procPath(long long pid, long long fd) {
  return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
}

std::string segmentName(long long pid, std::uint64_t nonce) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/braid-shm-%lld-%016llx", pid,
                static_cast<unsigned long long>(nonce));
  return buf;
}

// Unlinks a named segment when it goes out of scope (unless released): covers a creator that
// fails half-way, and the creator's last step once every rank has mapped it.
class NameGuard {
 public:
  NameGuard() = default;
  ~NameGuard() { unlink(); }
  NameGuard(const NameGuard&) = delete;
  NameGuard& operator=(const NameGuard&) = delete;
  void hold(std::string name) { name_ = std::move(name); }
  void unlink() {
    if (!name_.empty()) ::shm_unlink(name_.c_str());
    name_.clear();
  }

 private:
  std::string name_;
};

// A rank's offer, parsed from its entry.
struct Offer {
  bool memfd = false;
  long long pid = 0;
  long long fd = -1;
  std::uint64_t nonce = 0;
};

class Setup {
 public:
  Setup(Prepared& mine, std::span<const std::string> entries, int rank,
        std::span<const int> localRanks, const ShmOptions& options)
      : mine_(mine),
        rank_(rank),
        localRanks_(localRanks.begin(), localRanks.end()),
        options_(options),
        deadline_(Clock::now() + options.setupTimeout) {
    for (std::size_t i = 0; i < localRanks_.size(); ++i)
      if (localRanks_[i] == rank) local_ = i;
    if (entries.size() != localRanks_.size())
      throw Error(ErrorCode::InvalidArgument,
                  what() + ": " + std::to_string(entries.size()) + " entries for " +
                      std::to_string(localRanks_.size()) + " local ranks");
    for (std::size_t i = 0; i < entries.size(); ++i) offers_.push_back(parse(entries[i], i));
  }

  Attachment run();

 private:
  std::string what() const { return "rank " + std::to_string(rank_) + ": shm transport setup"; }
  Offer parse(const std::string& entry, std::size_t i) const;
  std::string creatorName() const { return "rank " + std::to_string(localRanks_[0]); }
  // Polls until ready(); `missing` names whom this waits for, `step` what they have to do.
  void await(const std::function<bool()>& ready, const std::function<std::string()>& missing,
             const std::string& step);
  void awaitEveryRank(std::atomic<std::uint32_t> RankSlot::*flag, const Attachment& a,
                      const std::string& step);
  void checkAlive() const;

  void create(Attachment& a, NameGuard& guard);
  void open(Attachment& a);
  void registerRank(Attachment& a) const;
  void probe(Attachment& a) const;

  Prepared& mine_;
  const int rank_;
  const std::vector<int> localRanks_;
  const ShmOptions& options_;
  const Clock::time_point deadline_;
  std::vector<Offer> offers_;
  std::size_t local_ = 0;
  Clock::time_point lastAliveCheck_ = Clock::now();
};

Offer Setup::parse(const std::string& entry, std::size_t i) const {
  std::istringstream in(entry);
  std::string kind;
  Offer o;
  bool ok = static_cast<bool>(in >> kind >> o.pid);
  if (ok && kind == "memfd") {
    o.memfd = true;
    ok = static_cast<bool>(in >> o.fd >> o.nonce);
  } else {
    ok = ok && kind == "named" && static_cast<bool>(in >> o.nonce);
  }
  if (!ok || o.nonce == 0 || o.pid <= 0)
    throw Error(ErrorCode::Internal, what() + ": rank " + std::to_string(localRanks_[i]) +
                                         " offered a malformed shared-memory entry '" + entry +
                                         "'");
  return o;
}

void Setup::checkAlive() const {
  for (std::size_t i = 0; i < offers_.size(); ++i) {
    if (i == local_ || offers_[i].pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(offers_[i].pid), 0) != 0 && errno == ESRCH)
      throw Error(ErrorCode::PeerLost, what() + ": rank " + std::to_string(localRanks_[i]) +
                                           " (pid " + std::to_string(offers_[i].pid) +
                                           ") exited before the shared-memory segment was set up");
  }
}

void Setup::await(const std::function<bool()>& ready, const std::function<std::string()>& missing,
                  const std::string& step) {
  microseconds pause{20};
  while (!ready()) {
    const auto now = Clock::now();
    if (now >= deadline_)
      throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank_) + " timed out after " +
                                          std::to_string(options_.setupTimeout.count()) +
                                          " ms waiting for " + missing() + " to " + step);
    if (now - lastAliveCheck_ >= milliseconds(10)) {
      checkAlive();
      lastAliveCheck_ = now;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<microseconds>(pause * 2, milliseconds(1));
  }
}

void Setup::awaitEveryRank(std::atomic<std::uint32_t> RankSlot::*flag, const Attachment& a,
                           const std::string& step) {
  auto isSet = [&](std::size_t i) {
    return (a.segment.rank(i).*flag).load(std::memory_order_acquire) == 1;
  };
  await(
      [&] {
        for (std::size_t i = 0; i < localRanks_.size(); ++i)
          if (!isSet(i)) return false;
        return true;
      },
      [&] {
        std::string list;
        for (std::size_t i = 0; i < localRanks_.size(); ++i)
          if (!isSet(i)) list += (list.empty() ? "" : ", ") + std::to_string(localRanks_[i]);
        return (list.find(',') == std::string::npos ? "rank " : "ranks ") + list;
      },
      step);
}

void Setup::registerRank(Attachment& a) const {
  RankSlot& slot = a.segment.rank(local_);
  slot.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  slot.probeCookie.store(mine_.nonce, std::memory_order_relaxed);
  slot.probeAddress.store(reinterpret_cast<std::uintptr_t>(&slot.probeCookie),
                          std::memory_order_relaxed);
  slot.lightWake.store(options_.lightWake && registerLightWake() ? 1 : 0,
                       std::memory_order_relaxed);
  slot.attached.store(1, std::memory_order_release);
}

void Setup::create(Attachment& a, NameGuard& guard) {
  const Offer& offer = offers_[0];
  Fd named;
  int fd = mine_.memfd.get();
  if (!offer.memfd) {
    const std::string name = segmentName(offer.pid, offer.nonce);
    named.reset(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!named)
      throw Error(ErrorCode::Internal, what() + ": shm_open(" + name + "): " + errnoText(errno));
    guard.hold(name);
    fd = named.get();
  } else if (!mine_.memfd) {
    throw Error(ErrorCode::Internal, what() + ": this rank offered a memfd it does not hold");
  }
  if (::ftruncate(fd, static_cast<off_t>(a.geometry.totalBytes)) != 0)
    throw Error(ErrorCode::Internal, what() + ": ftruncate of the segment to " +
                                         std::to_string(a.geometry.totalBytes) +
                                         " bytes: " + errnoText(errno));
  a.segment = Segment(fd, a.geometry.totalBytes, what());
  a.segment.initialize(a.geometry, offer.nonce);
  segmentsMade.fetch_add(1, std::memory_order_relaxed);
  registerRank(a);
}

void Setup::open(Attachment& a) {
  const Offer& offer = offers_[0];
  const std::string where =
      offer.memfd ? procPath(offer.pid, offer.fd) : segmentName(offer.pid, offer.nonce);
  Fd fd;
  if (offer.memfd) {
    fd.reset(::open(where.c_str(), O_RDWR | O_CLOEXEC));
    if (!fd) {
      const int err = errno;
      checkAlive();
      throw Error(ErrorCode::Internal,
                  what() + ": cannot open " + creatorName() + "'s shared-memory segment at " +
                      where + ": " + errnoText(err) +
                      " (BRAID_SHM_NAMED=1 makes it a named POSIX shm object instead)");
    }
  } else {
    int err = 0;
    await(
        [&] {
          const int opened = ::shm_open(where.c_str(), O_RDWR | O_CLOEXEC, 0);
          err = errno;
          fd.reset(opened);
          if (!fd && err != ENOENT)
            throw Error(ErrorCode::Internal,
                        what() + ": shm_open(" + where + "): " + errnoText(err));
          return static_cast<bool>(fd);
        },
        [&] { return creatorName(); }, "create the shared-memory segment " + where);
  }
  // The creator sizes the segment, then initializes it and publishes its nonce last.
  struct stat st {};
  await(
      [&] {
        if (::fstat(fd.get(), &st) != 0)
          throw Error(ErrorCode::Internal,
                      what() + ": fstat of " + where + ": " + errnoText(errno));
        return st.st_size > 0;
      },
      [&] { return creatorName(); }, "size the shared-memory segment");
  Segment segment(fd.get(), static_cast<std::size_t>(st.st_size), what());
  await([&] { return segment.publishedNonce() != 0; }, [&] { return creatorName(); },
        "initialize the shared-memory segment");
  if (segment.publishedNonce() != offer.nonce)
    throw Error(ErrorCode::Internal, what() + ": " + where + " is not the segment " +
                                         creatorName() + " offered (its nonce differs)");
  a.segment = std::move(segment);
  a.geometry = a.segment.adopt(what());
  if (a.geometry.ranks != localRanks_.size())
    throw Error(ErrorCode::Internal, what() + ": " + creatorName() + "'s segment is laid out for " +
                                         std::to_string(a.geometry.ranks) + " ranks, not " +
                                         std::to_string(localRanks_.size()));
  registerRank(a);
}

// Tells, for each peer, whether this rank can read the peer's memory with process_vm_readv:
// read the peer's cookie at the address the peer published, compare with the segment's copy.
void Setup::probe(Attachment& a) const {
  if (options_.cmaDisable) return;
  for (std::size_t p = 0; p < localRanks_.size(); ++p) {
    if (p == local_) continue;
    const RankSlot& peer = a.segment.rank(p);
    std::uint64_t value = 0;
    iovec dst{&value, sizeof value};
    iovec src{reinterpret_cast<void*>(peer.probeAddress.load(std::memory_order_relaxed)),
              sizeof value};
    const ssize_t n = ::process_vm_readv(
        static_cast<pid_t>(peer.pid.load(std::memory_order_relaxed)), &dst, 1, &src, 1, 0);
    const bool ok = n == static_cast<ssize_t>(sizeof value) &&
                    value == peer.probeCookie.load(std::memory_order_relaxed);
    a.segment.control(p, local_).consumer.canReadSender.store(ok ? 1 : 0,
                                                              std::memory_order_relaxed);
  }
}

Attachment Setup::run() {
  Attachment a;
  a.local = local_;
  a.localRanks = localRanks_;
  a.hostName = localHostName();
  a.geometry = planGeometry(localRanks_.size(), options_.slots, options_.slotBytes,
                            options_.maxSegmentBytes, options_.stagingBytes);
  // Under Yama's ptrace_scope=1 a process may only be read by its ancestors; this lets the
  // other ranks of the job read this one (EINVAL without Yama is fine).
  if (!options_.cmaDisable) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

  NameGuard guard;  // the creator's: unlinks the name if setup fails before every rank mapped it
  if (local_ == 0)
    create(a, guard);
  else
    open(a);
  awaitEveryRank(&RankSlot::attached, a, "attach to the shared-memory segment");
  // Every rank has mapped it: the mappings hold the memory from now on.
  guard.unlink();
  mine_.memfd.reset();
  probe(a);
  a.segment.rank(local_).probed.store(1, std::memory_order_release);
  awaitEveryRank(&RankSlot::probed, a, "probe the shared-memory segment");
  a.lightWake = true;
  for (std::size_t i = 0; i < localRanks_.size(); ++i)
    a.lightWake = a.lightWake && a.segment.rank(i).lightWake.load(std::memory_order_acquire) == 1;
  return a;
}

}  // namespace

std::string Prepared::entry() const {
  if (memfd)
    return "memfd " + std::to_string(pid) + " " + std::to_string(memfd.get()) + " " +
           std::to_string(nonce);
  return "named " + std::to_string(pid) + " " + std::to_string(nonce);
}

std::unique_ptr<Prepared> prepare(const ShmOptions& options) {
  auto p = std::make_unique<Prepared>();
  p->pid = ::getpid();
  p->nonce = randomU64() | 1;
  if (options.forceNamedSegment) return p;
  // A process that is not dumpable (setuid, PR_SET_DUMPABLE 0) has its /proc entries owned by
  // root: its peers could not open the memfd there.
  if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 1) return p;
  Fd fd(::memfd_create("braid-shm", MFD_CLOEXEC));
  if (!fd) return p;  // no memfd (very old kernel, seccomp): the named form
  if (::access(procPath(p->pid, fd.get()).c_str(), R_OK | W_OK) != 0) return p;  // no /proc
  p->memfd = std::move(fd);
  return p;
}

Attachment attachSegment(Prepared& mine, std::span<const std::string> entries, int rank,
                         std::span<const int> localRanks, std::size_t hostCpus,
                         const ShmOptions& options) {
  Attachment a = Setup(mine, entries, rank, localRanks, options).run();
  a.hostCpus = std::max<std::size_t>(1, hostCpus);
  return a;
}

}  // namespace braid::transport::shm
