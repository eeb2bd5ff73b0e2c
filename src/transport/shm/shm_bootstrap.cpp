// Segment setup, through the store under "shm/<lowest local rank>/" (the creator is local 0):
//
//   creator: memfd_create + ftruncate + mmap, initialize, register  -> "segment" = "memfd P F N R"
//   others:  open /proc/P/fd/F, mmap, check nonce R, register       -> "open/<local>" = 1 | 0
//   creator: every "open" is 1                                      -> "final" = "memfd"
//            else: shm_open(random name, O_EXCL), initialize, register -> "final" = "named X N R"
//   others:  on "named": shm_open(X), mmap, register; everyone adds 1 to "mapped"; whoever
//            brings it to L unlinks X (the creator also unlinks it when setup fails), and all
//            wait for "attached/<local>" of every local rank
//   everyone: probe single-copy reads of each peer, set "probed/<local>", wait for all of them
//
// The memfd stays open in the creator until "final" is set, which is after every other rank has
// opened it; from then on only mappings hold the memory, and it is freed with the last one.
// R is a random nonce the creator writes into the segment's header: a rank that opens the
// segment checks it, so it never maps some other file by mistake (a reused descriptor number, a
// stale name) and then talks into rings its peers do not read.
#include "transport/shm/shm_bootstrap.hpp"

#include <fcntl.h>
#include <sched.h>
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
#include <random>
#include <sstream>

#include "common/machine.hpp"

namespace braid::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;
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

// Unlinks a named segment when it goes out of scope (unless released): covers a creator that
// fails half-way, and the creator's last look after every rank has mapped it.
class NameGuard {
 public:
  NameGuard() = default;
  explicit NameGuard(std::string name) : name_(std::move(name)) {}
  ~NameGuard() { unlink(); }
  NameGuard(const NameGuard&) = delete;
  NameGuard& operator=(const NameGuard&) = delete;
  NameGuard& operator=(NameGuard&& other) noexcept {
    unlink();
    name_ = std::move(other.name_);
    other.name_.clear();
    return *this;
  }
  void unlink() {
    if (!name_.empty()) ::shm_unlink(name_.c_str());
    name_.clear();
  }

 private:
  std::string name_;
};

class Setup {
 public:
  Setup(Store& store, int rank, std::span<const int> localRanks, const ShmOptions& options)
      : store_(store),
        rank_(rank),
        localRanks_(localRanks.begin(), localRanks.end()),
        options_(options),
        prefix_("shm/" + std::to_string(localRanks.front()) + "/"),
        deadline_(Clock::now() + options.setupTimeout) {
    for (std::size_t i = 0; i < localRanks_.size(); ++i)
      if (localRanks_[i] == rank) local_ = i;
  }

  Attachment run();

 private:
  std::string key(const std::string& name) const { return prefix_ + name; }
  std::string what() const { return "rank " + std::to_string(rank_) + ": shm transport setup"; }
  milliseconds left() const {
    const auto d = std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now());
    return std::max(d, milliseconds(1));
  }
  std::string timedOut(const std::string& who, const std::string& step) const {
    return "rank " + std::to_string(rank_) + " timed out after " +
           std::to_string(options_.setupTimeout.count()) + " ms waiting for " + who + " to " + step;
  }
  std::string get(const std::string& name, std::size_t owner, const std::string& step);
  std::size_t hostCpus();
  void waitForAll(const std::string& name, const std::string& step);

  void createMemfd(Attachment& a, Fd& fd);
  bool openMemfd(Attachment& a, const std::string& published);
  void createNamed(Attachment& a, NameGuard& guard, std::string& name);
  void openNamed(Attachment& a, const std::string& name, std::size_t bytes, std::uint64_t nonce);
  void countMapped(const std::string& name);
  void registerRank(Attachment& a) const;
  void probe(Attachment& a) const;

  Store& store_;
  const int rank_;
  const std::vector<int> localRanks_;
  const ShmOptions& options_;
  const std::string prefix_;
  const Clock::time_point deadline_;
  std::size_t local_ = 0;
  const std::uint64_t cookie_ = randomU64() | 1;
};

std::string Setup::get(const std::string& name, std::size_t owner, const std::string& step) {
  try {
    return store_.getString(key(name), left());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    throw Error(ErrorCode::Timeout, timedOut("rank " + std::to_string(localRanks_[owner]), step));
  }
}

// Waits for key name<i> of every local rank i.
void Setup::waitForAll(const std::string& name, const std::string& step) {
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < localRanks_.size(); ++i)
    keys.push_back(key(name + std::to_string(i)));
  try {
    store_.wait(keys, left());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    std::string missing;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (store_.check({keys[i]})) continue;
      missing += (missing.empty() ? "" : ", ") + std::to_string(localRanks_[i]);
    }
    throw Error(ErrorCode::Timeout, timedOut("ranks " + missing, step));
  }
}

void Setup::registerRank(Attachment& a) const {
  RankSlot& slot = a.segment.rank(local_);
  slot.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  slot.probeCookie.store(cookie_, std::memory_order_relaxed);
  slot.probeAddress.store(reinterpret_cast<std::uintptr_t>(&slot.probeCookie),
                          std::memory_order_relaxed);
  slot.lightWake.store(options_.lightWake && registerLightWake() ? 1 : 0,
                       std::memory_order_relaxed);
  slot.attached.store(1, std::memory_order_release);
}

void Setup::createMemfd(Attachment& a, Fd& fd) {
  fd.reset(::memfd_create("braid-shm", MFD_CLOEXEC));
  if (!fd) return;  // no memfd (very old kernel, seccomp): the named path follows
  if (::ftruncate(fd.get(), static_cast<off_t>(a.geometry.totalBytes)) != 0)
    throw Error(ErrorCode::Internal, what() + ": ftruncate of the memfd to " +
                                         std::to_string(a.geometry.totalBytes) +
                                         " bytes: " + errnoText(errno));
  a.segment = Segment(fd.get(), a.geometry.totalBytes, what());
  a.segment.initialize(a.geometry, cookie_);
  registerRank(a);
}

bool Setup::openMemfd(Attachment& a, const std::string& published) {
  std::istringstream in(published);
  std::string kind;
  long long pid = 0, fd = 0;
  std::size_t bytes = 0;
  std::uint64_t nonce = 0;
  if (!(in >> kind >> pid >> fd >> bytes >> nonce) || kind != "memfd") return false;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  Fd opened(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!opened) return false;
  struct stat st {};
  if (::fstat(opened.get(), &st) != 0 || static_cast<std::size_t>(st.st_size) < bytes) return false;
  Segment segment(opened.get(), bytes, what());
  if (segment.header().nonce != nonce) return false;  // not the creator's file: go named
  a.segment = std::move(segment);
  a.geometry = a.segment.adopt(what());
  registerRank(a);
  return true;
}

void Setup::createNamed(Attachment& a, NameGuard& guard, std::string& name) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/braid-shm-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(randomU64()));
  name = buf;
  Fd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd)
    throw Error(ErrorCode::Internal, what() + ": shm_open(" + name + "): " + errnoText(errno));
  guard = NameGuard(name);
  if (::ftruncate(fd.get(), static_cast<off_t>(a.geometry.totalBytes)) != 0)
    throw Error(ErrorCode::Internal, what() + ": ftruncate of " + name + " to " +
                                         std::to_string(a.geometry.totalBytes) +
                                         " bytes: " + errnoText(errno));
  a.segment = Segment(fd.get(), a.geometry.totalBytes, what());
  a.segment.initialize(a.geometry, cookie_);
  registerRank(a);
}

void Setup::openNamed(Attachment& a, const std::string& name, std::size_t bytes,
                      std::uint64_t nonce) {
  a.segment = Segment();
  Fd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd)
    throw Error(ErrorCode::Internal, what() + ": shm_open(" + name + "): " + errnoText(errno));
  a.segment = Segment(fd.get(), bytes, what());
  if (a.segment.header().nonce != nonce)
    throw Error(ErrorCode::Internal, what() + ": " + name + " is not the segment rank " +
                                         std::to_string(localRanks_[0]) +
                                         " created (its nonce differs)");
  a.geometry = a.segment.adopt(what());
  registerRank(a);
}

void Setup::countMapped(const std::string& name) {
  if (store_.add(key("mapped"), 1) == static_cast<std::int64_t>(localRanks_.size()))
    ::shm_unlink(name.c_str());
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
  const std::size_t count = localRanks_.size();
  a.geometry = planGeometry(count, options_.slots, options_.slotBytes, options_.maxSegmentBytes,
                            options_.stagingBytes);
  // Under Yama's ptrace_scope=1 a process may only be read by its ancestors; this lets the
  // other ranks of the job read this one (EINVAL without Yama is fine).
  if (!options_.cmaDisable) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

  NameGuard guard;  // the creator's: unlinks the name if setup fails before every rank mapped it
  bool named = false;
  if (local_ == 0) {
    Fd memfd;
    if (!options_.forceNamedSegment) createMemfd(a, memfd);
    store_.setString(key("segment"), memfd ? "memfd " + std::to_string(::getpid()) + " " +
                                                 std::to_string(memfd.get()) + " " +
                                                 std::to_string(a.geometry.totalBytes) + " " +
                                                 std::to_string(cookie_)
                                           : std::string("none"));
    bool allOpened = static_cast<bool>(memfd);
    for (std::size_t i = 1; i < count; ++i)
      allOpened =
          get("open/" + std::to_string(i), i, "open the shared-memory segment") == "1" && allOpened;
    if (allOpened) {
      store_.setString(key("final"), "memfd");
    } else {
      named = true;
      std::string name;
      createNamed(a, guard, name);
      store_.setString(key("final"), "named " + name + " " + std::to_string(a.geometry.totalBytes) +
                                         " " + std::to_string(cookie_));
      countMapped(name);
    }
  } else {
    const std::string published = get("segment", 0, "publish the shared-memory segment");
    const bool opened = !options_.forceNamedSegment && openMemfd(a, published);
    store_.setString(key("open/" + std::to_string(local_)), opened ? "1" : "0");
    const std::string final = get("final", 0, "settle the shared-memory segment");
    if (final != "memfd") {
      named = true;
      std::istringstream in(final);
      std::string kind, name;
      std::size_t bytes = 0;
      std::uint64_t nonce = 0;
      if (!(in >> kind >> name >> bytes >> nonce) || kind != "named")
        throw Error(ErrorCode::Internal,
                    what() + ": unexpected segment description '" + final + "'");
      openNamed(a, name, bytes, nonce);
      countMapped(name);
    } else if (!opened) {
      throw Error(ErrorCode::Internal, what() + ": rank " + std::to_string(localRanks_[0]) +
                                           " kept the memfd segment this rank could not open");
    }
  }
  // With memfd, "final" implies that every rank has registered (each did before reporting
  // "open"); a named segment needs one more round before peers can be probed.
  if (named) {
    store_.setString(key("attached/" + std::to_string(local_)), "1");
    waitForAll("attached/", "map the shared-memory segment");
    guard.unlink();  // normally gone already: the last rank to map it unlinked it
  }
  probe(a);
  store_.setString(key("cpus/" + std::to_string(local_)), machine::cpusText());
  store_.setString(key("probed/" + std::to_string(local_)), "1");
  waitForAll("probed/", "probe the shared-memory segment");
  a.hostCpus = options_.hostCpus != 0 ? options_.hostCpus : hostCpus();
  a.lightWake = true;
  for (std::size_t i = 0; i < localRanks_.size(); ++i)
    a.lightWake = a.lightWake && a.segment.rank(i).lightWake.load(std::memory_order_acquire) == 1;
  return a;
}

// The CPUs the host's ranks can use at once (after all have published): machine::cpusTogether
// over their published machine::cpusText().
std::size_t Setup::hostCpus() {
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < localRanks_.size(); ++i)
    texts.push_back(get("cpus/" + std::to_string(i), i, "publish its CPUs"));
  return static_cast<std::size_t>(machine::cpusTogether(texts));
}

}  // namespace

Attachment attachSegment(Store& store, int rank, std::span<const int> localRanks,
                         const ShmOptions& options) {
  return Setup(store, rank, localRanks, options).run();
}

}  // namespace braid::transport::shm
