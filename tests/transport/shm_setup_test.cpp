// The shared-memory transport's setup (shm_bootstrap.cpp): the offers the factory hands it, the
// segment attached through itself, the segment kinds (memfd, named), what it refuses (a file that
// is not the creator's segment), who it names when ranks do not come or are gone, and the
// segment's size formula. Ranks are threads of this process; a gone rank is a reaped child.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.hpp"
#include "harness/errors.hpp"
#include "harness/shm_ranks.hpp"
#include "harness/transport_ranks.hpp"
#include "store/memory_store.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;
using Path = test::ShmPath;
using test::allRanks;
using test::braidShmEntries;
using test::codeOf;
using test::errorOf;
using test::exchangeAll;

ShmOptions optionsFor(Path path) {
  return test::shmOptionsFor(path);
}

// A rank that opens a file other than the creator's segment (here: handed a decoy descriptor
// whose header looks valid and initialized but carries another nonce) must notice and never use
// it: mapped, its peers would write into rings it never reads and every message to it would be
// lost. It refuses the decoy with an error saying so, and the creator, which that rank never
// joins, names it when its setup times out; nobody exchanges a byte through the wrong file.
TEST(ShmTransport, ADecoyFileIsNeverMappedInsteadOfTheSegment) {
  ShmOptions o = optionsFor(Path::Ring);
  o.setupTimeout = 500ms;
  auto creator = prepareShm(o);
  auto joiner = prepareShm(o);
  const std::string real = creator->entry();
  std::istringstream in(real);
  std::string kind;
  long long pid = 0, fd = 0;
  std::uint64_t nonce = 0;
  in >> kind >> pid >> fd >> nonce;
  ASSERT_EQ(kind, "memfd") << real;
  // The decoy: a memfd holding a braid header with the creator's nonce changed.
  shm::SegmentHeader header{};
  header.magic = shm::kSegmentMagic;
  header.version = shm::kSegmentVersion;
  header.nonce = nonce ^ 0x5555;
  braid::Fd decoy(::memfd_create("braid-test-decoy", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(decoy.get(), 1 << 20), 0);
  ASSERT_EQ(::pwrite(decoy.get(), &header, sizeof header, 0), static_cast<ssize_t>(sizeof header));
  const std::string swapped = "memfd " + std::to_string(::getpid()) + " " +
                              std::to_string(decoy.get()) + " " + std::to_string(nonce);
  const std::vector<int> local = allRanks(2);
  const std::vector<std::string> truth{real, joiner->entry()};
  const std::vector<std::string> fooled{swapped, joiner->entry()};
  std::string creatorMessage, joinerMessage;
  ErrorCode creatorCode{}, joinerCode{};
  std::thread other([&] {
    joinerCode = codeOf([&] { createShmTransport(std::move(joiner), fooled, 1, 2, local, o); },
                        joinerMessage);
  });
  creatorCode = codeOf([&] { createShmTransport(std::move(creator), truth, 0, 2, local, o); },
                       creatorMessage);
  other.join();
  EXPECT_EQ(joinerCode, ErrorCode::Internal) << joinerMessage;
  EXPECT_NE(joinerMessage.find("is not the segment rank 0 offered (its nonce differs)"),
            std::string::npos)
      << joinerMessage;
  EXPECT_EQ(creatorCode, ErrorCode::Timeout) << creatorMessage;
  EXPECT_NE(creatorMessage.find("waiting for rank 1 to attach to the shared-memory segment"),
            std::string::npos)
      << creatorMessage;
}

TEST(ShmTransport, NamedSegmentIsUnlinkedOnceMapped) {
  const auto before = braidShmEntries();
  ShmOptions o = optionsFor(Path::Default);
  o.forceNamedSegment = true;
  std::latch checked(3);
  test::runShmRanks(
      3,
      [&](int rank, ShmTransport& t) {
        // Setup returned on every rank: the name is gone while the segment is in use.
        checked.arrive_and_wait();
        if (rank == 0) {
          EXPECT_EQ(braidShmEntries(), before);
        }
        exchangeAll(rank, t, 5000, 1);
      },
      o);
  EXPECT_EQ(braidShmEntries(), before);
}

TEST(ShmTransport, RankThatNeverShowsUpIsNamed) {
  ShmOptions o = optionsFor(Path::Ring);
  o.setupTimeout = 300ms;
  const std::vector<int> local{0, 1, 2};
  std::string message;
  {  // The standalone form: a rank that never publishes its entry.
    MemoryStore store;
    const auto start = Clock::now();
    EXPECT_EQ(codeOf([&] { createShmTransport(store, 0, 3, local, o); }, message),
              ErrorCode::Timeout);
    EXPECT_LT(Clock::now() - start, 2s);
    EXPECT_NE(message.find("rank 0 timed out after 300 ms waiting for rank 1 to publish its "
                           "shared-memory entry"),
              std::string::npos)
        << message;
  }
  // Entries of ranks that are alive (this process) but never attach: the creator names both.
  const std::vector<std::string> entries{prepareShm(o)->entry(), prepareShm(o)->entry(),
                                         prepareShm(o)->entry()};
  {
    std::vector<std::string> mine = entries;
    auto prepared = prepareShm(o);
    mine[0] = prepared->entry();
    const auto start = Clock::now();
    EXPECT_EQ(
        codeOf([&] { createShmTransport(std::move(prepared), mine, 0, 3, local, o); }, message),
        ErrorCode::Timeout);
    EXPECT_LT(Clock::now() - start, 2s);
    EXPECT_NE(message.find("rank 0 timed out after 300 ms waiting for ranks 1, 2 to attach to "
                           "the shared-memory segment"),
              std::string::npos)
        << message;
  }
  {  // A creator that offered a named segment and never creates it.
    std::vector<std::string> mine = entries;
    mine[0] = "named " + std::to_string(::getpid()) + " 12345";
    auto prepared = prepareShm(o);
    mine[2] = prepared->entry();
    EXPECT_EQ(
        codeOf([&] { createShmTransport(std::move(prepared), mine, 2, 3, local, o); }, message),
        ErrorCode::Timeout);
    EXPECT_NE(message.find("rank 2 timed out after 300 ms waiting for rank 0 to create the "
                           "shared-memory segment /braid-shm-"),
              std::string::npos)
        << message;
  }
}

// A local rank whose process is gone fails the setup at once with PeerLost naming it, on the
// creator (which waits for it to attach) and on a rank that was to open its memfd.
TEST(ShmTransport, RankWhoseProcessIsGoneIsPeerLost) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string dead = "memfd " + std::to_string(child) + " 3 12345";
  ShmOptions o = optionsFor(Path::Ring);
  o.setupTimeout = 20s;
  const std::vector<int> local{0, 1};
  std::string message;
  for (int rank : {0, 1}) {
    auto prepared = prepareShm(o);
    std::vector<std::string> entries{dead, dead};
    entries[static_cast<std::size_t>(rank)] = prepared->entry();
    const auto start = Clock::now();
    EXPECT_EQ(codeOf([&] { createShmTransport(std::move(prepared), entries, rank, 2, local, o); },
                     message),
              ErrorCode::PeerLost)
        << message;
    EXPECT_LT(Clock::now() - start, 2s);
    EXPECT_NE(message.find("rank " + std::to_string(1 - rank) + " (pid " + std::to_string(child) +
                           ") exited before the shared-memory segment was set up"),
              std::string::npos)
        << message;
  }
}

// The factory's path: entries and CPUs come with the host table, the standalone form's store
// exchange is not used. Both segment kinds carry traffic.
TEST(ShmTransport, PreparedEntriesBothSegmentKinds) {
  for (bool named : {false, true}) {
    const auto before = braidShmEntries();
    ShmOptions o = optionsFor(Path::Ring);
    o.forceNamedSegment = named;
    constexpr int kSize = 3;
    std::vector<std::unique_ptr<ShmPrepared>> prepared;
    std::vector<std::string> entries;
    for (int r = 0; r < kSize; ++r) {
      prepared.push_back(prepareShm(o));
      entries.push_back(prepared.back()->entry());
      EXPECT_EQ(entries.back().rfind(named ? "named " : "memfd ", 0), 0u) << entries.back();
    }
    const std::vector<int> local = allRanks(kSize);
    std::vector<std::string> errors(kSize);
    std::vector<std::thread> threads;
    for (int r = 0; r < kSize; ++r)
      threads.emplace_back([&, r] {
        errors[static_cast<std::size_t>(r)] = errorOf([&] {
          auto t = createShmTransport(std::move(prepared[static_cast<std::size_t>(r)]), entries, r,
                                      kSize, local, o);
          exchangeAll(r, *t, 3000, 1);
        });
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < kSize; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << r;
    EXPECT_EQ(braidShmEntries(), before);
  }
}

TEST(ShmGeometry, SizeFormula) {
  const shm::Geometry two = shm::planGeometry(2, 8, 64 << 10, std::size_t{256} << 20);
  EXPECT_EQ(two.ringBytes(), std::size_t{512} << 10);
  EXPECT_EQ(two.totalBytes, 4096 + 2 * (std::size_t{512} << 10));
  const shm::Geometry eight = shm::planGeometry(8, 8, 64 << 10, std::size_t{256} << 20);
  EXPECT_EQ(eight.totalBytes, 12288 + 56 * (std::size_t{512} << 10));
  // 24 ranks do not fit with 64 KiB slots: the slots shrink until they do.
  const shm::Geometry many = shm::planGeometry(24, 8, 64 << 10, std::size_t{256} << 20);
  EXPECT_EQ(many.slotBytes, std::size_t{32} << 10);
  EXPECT_LE(many.totalBytes, std::size_t{256} << 20);
  EXPECT_THROW(shm::planGeometry(2, 1, 64 << 10, 1 << 30), Error);
  EXPECT_THROW(shm::planGeometry(2, 8, 3000, 1 << 30), Error);
}

// docs/env.md: total = align4K(64 + 64 L + 128 L^2) + L (L-1) S B + align4K(65664 L) + L G
// (65664 = a 128-byte GroupLine and 64 LatencyLines of 1 KiB per rank).
TEST(ShmGeometry, SizeFormulaWithGroupPart) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const std::size_t rings[] = {0, 0, 1 * kMiB, 0, 6 * kMiB, 0, 0, 0, 28 * kMiB};
  const std::size_t control[] = {0, 0, 4096, 0, 4096, 0, 0, 0, 12288};
  for (std::size_t l : {2, 4, 8}) {
    const shm::Geometry g = shm::planGeometry(l, 8, 64 << 10, 256 * kMiB, 2 * kMiB);
    EXPECT_EQ(g.stagingBytes, 2 * kMiB) << l;
    EXPECT_EQ(g.groupOffset, control[l] + rings[l]) << l;
    const std::size_t group = (65664 * l + 4095) / 4096 * 4096;  // 135168, 266240, 528384
    EXPECT_EQ(g.stagingOffset, g.groupOffset + group) << l;
    // Then the lane groups: {64 B header, the group's lines (page-aligned), staging} each, as
    // many as fit 256 MiB, at most 32: 32 at 2 ranks (5.1 + 32 x 4.1 MiB), 29 at 4
    // (14.3 + 29 x 8.3), 12 at 8 (44.5 + 12 x 16.5).
    const std::size_t own = control[l] + rings[l] + group + l * 2 * kMiB;
    const std::size_t laneGroup = (64 + 65664 * l + 4095) / 4096 * 4096 + l * 2 * kMiB;
    const std::size_t fitting[] = {0, 0, 32, 0, 29, 0, 0, 0, 12};
    EXPECT_EQ(g.laneGroups, fitting[l]) << l;
    EXPECT_EQ(g.laneGroupsOffset, own) << l;
    EXPECT_EQ(g.laneGroupBytes, laneGroup) << l;
    EXPECT_EQ(g.totalBytes, own + fitting[l] * laneGroup) << l;
    EXPECT_LE(g.totalBytes, 256 * kMiB) << l;
  }
  // 8 ranks under a 40 MiB bound: the rings fit, the staging halves to 1 MiB per rank, and no
  // lane group fits (36.5 MiB + 8.5 MiB each).
  const shm::Geometry bounded = shm::planGeometry(8, 8, 64 << 10, 40 * kMiB, 2 * kMiB);
  EXPECT_EQ(bounded.slotBytes, std::size_t{64} << 10);
  EXPECT_EQ(bounded.stagingBytes, kMiB);
  EXPECT_EQ(bounded.laneGroups, 0u);
  EXPECT_LE(bounded.totalBytes, 40 * kMiB);
  // Under 80 MiB the staging stays 2 MiB (44.5 MiB) and two lane groups of 16.5 MiB fit.
  EXPECT_EQ(shm::planGeometry(8, 8, 64 << 10, 80 * kMiB, 2 * kMiB).laneGroups, 2u);
  // The staging never drops below 16 KiB; an odd request is rounded up to 4 KiB.
  EXPECT_EQ(shm::planGeometry(2, 8, 4096, 1, 1 << 20).stagingBytes, shm::kMinStagingBytes);
  EXPECT_EQ(shm::planGeometry(2, 8, 4096, 256 * kMiB, 20000).stagingBytes, std::size_t{20480});
}

}  // namespace
}  // namespace braid::transport
