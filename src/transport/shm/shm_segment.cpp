#include "transport/shm/shm_segment.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <braid/error.hpp>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>

namespace braid::transport::shm {

namespace {

constexpr std::size_t kPage = 4096;

std::size_t alignUp(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}

std::size_t controlBytes(std::size_t ranks) {
  return sizeof(SegmentHeader) + ranks * sizeof(RankSlot) + ranks * ranks * sizeof(ChannelControl);
}

// The group part's control lines: GroupLine[ranks], LatencyLine[ranks][kLineDepth], padded to a
// page.
std::size_t groupLinesBytes(std::size_t ranks) {
  return alignUp(ranks * (sizeof(GroupLine) + kLineDepth * sizeof(LatencyLine)), kPage);
}

// Appends the group part (GroupLine[ranks], LatencyLine[ranks][kLineDepth], staging[ranks]) to a
// geometry whose rings end at totalBytes.
void addGroup(Geometry& g, std::size_t stagingBytes, std::size_t maxSegmentBytes) {
  if (stagingBytes == 0 || g.ranks == 0) return;
  const std::size_t ringsEnd = g.totalBytes;
  g.stagingBytes = alignUp(std::max(stagingBytes, kMinStagingBytes), kPage);
  g.groupOffset = ringsEnd;
  g.stagingOffset = g.groupOffset + groupLinesBytes(g.ranks);
  while (g.stagingBytes > kMinStagingBytes &&
         g.stagingOffset + g.ranks * g.stagingBytes > maxSegmentBytes)
    g.stagingBytes = alignUp(g.stagingBytes / 2, kPage);
  g.totalBytes = g.stagingOffset + g.ranks * g.stagingBytes;
}

// The bytes of one lane group: its header and lines, padded to a page, then its staging.
std::size_t laneGroupBytes(const Geometry& g) {
  return alignUp(sizeof(LaneGroupHeader) +
                     g.ranks * (sizeof(GroupLine) + kLineDepth * sizeof(LatencyLine)),
                 kPage) +
         g.ranks * g.stagingBytes;
}

// Appends up to `wanted` lane groups (as many as fit maxSegmentBytes) to a geometry with a group
// part.
void addLaneGroups(Geometry& g, std::size_t wanted, std::size_t maxSegmentBytes) {
  if (g.stagingBytes == 0) return;
  g.laneGroupsOffset = alignUp(g.totalBytes, kPage);
  g.laneGroupBytes = laneGroupBytes(g);
  std::size_t k = wanted;
  while (k > 0 && g.laneGroupsOffset + k * g.laneGroupBytes > maxSegmentBytes) --k;
  g.laneGroups = k;
  if (k > 0) g.totalBytes = g.laneGroupsOffset + k * g.laneGroupBytes;
}

}  // namespace

Geometry planGeometry(std::size_t ranks, std::size_t slots, std::size_t slotBytes,
                      std::size_t maxSegmentBytes, std::size_t stagingBytes) {
  if (slots < kMinSlots || slots > kMaxSlots)
    throw Error(ErrorCode::InvalidArgument,
                "shm transport: " + std::to_string(slots) + " ring slots, expected " +
                    std::to_string(kMinSlots) + " to " + std::to_string(kMaxSlots));
  if (slotBytes < kMinSlotBytes || slotBytes > kMaxSlotBytes || !std::has_single_bit(slotBytes))
    throw Error(ErrorCode::InvalidArgument,
                "shm transport: slot size " + std::to_string(slotBytes) +
                    " bytes, expected a power of two from " + std::to_string(kMinSlotBytes) +
                    " to " + std::to_string(kMaxSlotBytes));
  Geometry g;
  g.ranks = ranks;
  g.slots = slots;
  g.slotBytes = slotBytes;
  g.ringsOffset = alignUp(controlBytes(ranks), kPage);
  const std::size_t rings = ranks * (ranks - (ranks > 0 ? 1 : 0));
  while (g.slotBytes > kMinSlotBytes && g.ringsOffset + rings * g.ringBytes() > maxSegmentBytes)
    g.slotBytes /= 2;
  g.totalBytes = g.ringsOffset + rings * g.ringBytes();
  addGroup(g, stagingBytes, maxSegmentBytes);
  addLaneGroups(g, kLaneGroups, maxSegmentBytes);
  return g;
}

// ---- mapping ----

Segment::Segment(int fd, std::size_t bytes, const std::string& what) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw Error(ErrorCode::Internal,
                what + ": mmap of " + std::to_string(bytes) + " bytes: " + errnoText(errno));
  base_ = static_cast<std::uint8_t*>(p);
  bytes_ = bytes;
}

Segment::~Segment() {
  reset();
}

Segment::Segment(Segment&& other) noexcept
    : base_(other.base_), bytes_(other.bytes_), geometry_(other.geometry_) {
  other.base_ = nullptr;
  other.bytes_ = 0;
}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    reset();
    base_ = other.base_;
    bytes_ = other.bytes_;
    geometry_ = other.geometry_;
    other.base_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Segment::reset() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

void Segment::initialize(const Geometry& g, std::uint64_t nonce) {
  SegmentHeader* h = std::construct_at(reinterpret_cast<SegmentHeader*>(base_));
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->ranks = static_cast<std::uint32_t>(g.ranks);
  h->slots = g.slots;
  h->slotBytes = g.slotBytes;
  h->totalBytes = g.totalBytes;
  h->stagingBytes = g.stagingBytes;
  h->nonce = 0;
  h->laneGroups = static_cast<std::uint32_t>(g.laneGroups);
  geometry_ = g;
  for (std::size_t r = 0; r < g.ranks; ++r) std::construct_at(&rank(r));
  for (std::size_t i = 0; i < g.ranks * g.ranks; ++i)
    std::construct_at(reinterpret_cast<ChannelControl*>(base_ + sizeof(SegmentHeader) +
                                                        g.ranks * sizeof(RankSlot)) +
                      i);
  if (g.stagingBytes > 0)
    for (std::size_t r = 0; r < g.ranks; ++r) {
      std::construct_at(&groupLine(r));
      for (std::size_t slot = 0; slot < kLineDepth; ++slot)
        std::construct_at(&latencyLine(r, slot));
    }
  for (std::size_t k = 0; k < g.laneGroups; ++k) std::construct_at(&laneGroup(k));
  std::atomic_ref<std::uint64_t>(h->nonce).store(nonce, std::memory_order_release);
}

Geometry Segment::adopt(const std::string& what) {
  const SegmentHeader& h = header();
  if (bytes_ < sizeof(SegmentHeader) || h.magic != kSegmentMagic || h.version != kSegmentVersion)
    throw Error(ErrorCode::Internal, what + ": the segment has no valid braid header");
  Geometry g;
  g.ranks = h.ranks;
  g.slots = h.slots;
  g.slotBytes = h.slotBytes;
  g.ringsOffset = alignUp(controlBytes(g.ranks), kPage);
  g.totalBytes = g.ringsOffset + g.ranks * (g.ranks - 1) * g.ringBytes();
  if (h.stagingBytes > 0) {
    g.groupOffset = g.totalBytes;
    g.stagingOffset = g.groupOffset + groupLinesBytes(g.ranks);
    g.stagingBytes = h.stagingBytes;
    g.totalBytes = g.stagingOffset + g.ranks * g.stagingBytes;
    addLaneGroups(g, h.laneGroups, SIZE_MAX);
  }
  if (g.totalBytes != h.totalBytes || g.totalBytes > bytes_)
    throw Error(ErrorCode::Internal, what + ": the segment header describes " +
                                         std::to_string(h.totalBytes) + " bytes, mapped " +
                                         std::to_string(bytes_));
  geometry_ = g;
  return g;
}

ChannelControl& Segment::control(std::size_t from, std::size_t to) const {
  auto* controls = reinterpret_cast<ChannelControl*>(base_ + sizeof(SegmentHeader) +
                                                     geometry_.ranks * sizeof(RankSlot));
  return controls[from * geometry_.ranks + to];
}

std::uint8_t* Segment::ring(std::size_t from, std::size_t to) const {
  const std::size_t index = from * (geometry_.ranks - 1) + (to < from ? to : to - 1);
  return base_ + geometry_.ringsOffset + index * geometry_.ringBytes();
}

std::uint8_t* Segment::staging(std::size_t local) const {
  return base_ + geometry_.stagingOffset + local * geometry_.stagingBytes;
}

// ---- futex ----

void futexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr,
            0);
}

void futexWakeAll(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

namespace {

bool registerNow() {
  const long cmds = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ||
      (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0)
    return false;
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

// The registration started when the library was loaded (below). Registering makes the kernel
// wait for an RCU grace period once the process has a second thread (about 11 ms on the 2-vCPU
// guest of 2026-12-04, against 2.5 us single-threaded; docs/benchmarks.md), which every
// process used to pay inside its first communicator's creation. At load a process usually has
// one thread (a C++ program before main), so registering then costs microseconds; a process that
// already has threads (Python once torch is imported) registers on a thread of its own, so the
// wait overlaps whatever it does before it creates a communicator. Constant-initialized atomics:
// valid before any dynamic initializer runs.
constexpr int kNotStarted = -2, kInFlight = -1;
std::atomic<int> gLoadRegistration{kNotStarted};  // else 0 (refused) or 1 (registered)
std::atomic<pid_t> gLoadRegistrationPid{0};       // the process that started it

int threadsOfThisProcess() {
  char buf[1024];
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // Field 20 (num_threads), counted after the command name's closing parenthesis (field 2).
  const char* p = std::strrchr(buf, ')');
  for (int field = 2; p != nullptr && field < 20; ++field) p = std::strchr(p + 1, ' ');
  return p == nullptr ? 0 : std::atoi(p + 1);
}

[[maybe_unused]] const bool kRegisteringAtLoad = [] {
  gLoadRegistrationPid.store(::getpid(), std::memory_order_relaxed);
  if (threadsOfThisProcess() == 1) {
    gLoadRegistration.store(registerNow() ? 1 : 0, std::memory_order_release);
    return true;
  }
  try {
    gLoadRegistration.store(kInFlight, std::memory_order_relaxed);
    std::thread([] {
      gLoadRegistration.store(registerNow() ? 1 : 0, std::memory_order_release);
    }).detach();
  } catch (...) {  // no thread to be had: registerLightWake() registers when asked
    gLoadRegistration.store(kNotStarted, std::memory_order_relaxed);
  }
  return true;
}();

}  // namespace

bool registerLightWake() {
  // Registering here, the result is kept for this process, so that later communicators do not
  // wait for another grace period: state first, then the pid it belongs to.
  auto registerHere = [] {
    const bool ok = registerNow();
    gLoadRegistration.store(ok ? 1 : 0, std::memory_order_release);
    gLoadRegistrationPid.store(::getpid(), std::memory_order_release);
    return ok;
  };
  // A process forked since has its own registration to make, and no load-time thread (one that
  // was in flight at the fork stayed in the parent).
  if (gLoadRegistrationPid.load(std::memory_order_acquire) != ::getpid()) return registerHere();
  int state = gLoadRegistration.load(std::memory_order_acquire);
  while (state == kInFlight) {  // the load-time thread is in the kernel's grace period
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    state = gLoadRegistration.load(std::memory_order_acquire);
  }
  return state == kNotStarted ? registerHere() : state == 1;
}

bool heavyFence() {
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
}

}  // namespace braid::transport::shm
