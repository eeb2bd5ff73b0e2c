// Single copy in the direct shared-memory collectives and the shm transport's messages
// (src/transport/shm/shm_single_copy.hpp, algo/single_copy.hpp): the threshold forced to 0 (every
// non-empty block read out of the peers' buffers with process_vm_readv) and to never (everything
// staged), over ranks as threads and as processes, every collective x world size x count x dtype
// x op x in-place x root (harness/checks); large messages (reduce stages whatever the threshold);
// the choice as Comm::singleCopy() reports it (override, measured, disabled); the direct
// collectives' chunk, measured by the same probe (Comm::sharedMemoryChunk); their streaming
// threshold, measured by the group (Comm::sharedMemoryStreaming); and a process
// whose kernel refuses process_vm_readv (a seccomp filter, as a container or Yama would), which
// must fall back to staging and say why.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/machine.hpp"
#include "common/tune_cache.hpp"
#include "harness/checks.hpp"
#include "harness/ranks.hpp"
#include "harness/store_process.hpp"
#include "kernels/reduce.hpp"

namespace braid::test {
namespace {

Options forced(std::size_t threshold, const char* algo = "shm_direct") {
  Options o = testOptions(algo);
  o.shmCmaThresholdBytes = threshold;
  return o;
}

// Throws (on a rank: runThreads reports it) unless `got`, what `what` returned, starts with
// `prefix`.
void expectPrefix(const std::string& what, const std::string& got, const std::string& prefix) {
  if (got.rfind(prefix, 0) != 0)
    throw Error(ErrorCode::Internal, what + " = '" + got + "', expected '" + prefix + "...'");
}

void expectChoice(Comm& c, const std::string& prefix) {
  if (c.size() == 1) return;  // one rank: no peers to read
  expectPrefix("singleCopy()", c.singleCopy(), prefix);
}

class SingleCopyThreads : public ::testing::TestWithParam<int> {};

// Every non-empty block single copy: allgather, alltoall, broadcast (and the messages of
// gather, scatter and send/recv) read the peers' buffers at every count of the sweep.
TEST_P(SingleCopyThreads, EveryBlock) {
  runThreads(GetParam(), forced(0), [](Comm& c) {
    expectChoice(c, "from 0 B: BRAID_SHM_CMA_THRESHOLD");
    sweepCollectives(c);
  });
}

// Never: the staged paths at every count, whatever the machine measures.
TEST_P(SingleCopyThreads, NeverStaged) {
  runThreads(GetParam(), forced(SIZE_MAX), [](Comm& c) {
    const std::size_t counts[] = {0, 1, 13, 1031};
    sweepCollectives(c, counts);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, SingleCopyThreads, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

class SingleCopyProcesses : public ::testing::TestWithParam<int> {};

TEST_P(SingleCopyProcesses, EveryBlock) {
  runProcesses(
      GetParam(), forced(0),
      [](Comm& c) {
        expectChoice(c, "from 0 B: BRAID_SHM_CMA_THRESHOLD");
        sweepCollectives(c);
      },
      std::chrono::seconds(600));
}

// Large messages between processes, with a 4 KiB buffer (the smallest staging area: many
// chunks) and the default one: reduce (staged whatever the threshold), in place and not, every
// root; allgather, broadcast, alltoall, gather and scatter with blocks of more than a staging
// half.
TEST_P(SingleCopyProcesses, LargeMessages) {
  for (std::size_t buffer : {std::size_t{4096}, std::size_t{4} << 20}) {
    Options o = forced(4096);
    o.bufferBytes = buffer;
    runProcesses(
        GetParam(), o,
        [](Comm& c) {
          for (int root = 0; root < c.size(); ++root)
            checkReduce(c, DataType::Float32, ReduceOp::Sum, 300007, root, root % 2 == 1);
          checkReduce(c, DataType::BFloat16, ReduceOp::Max, 100003, c.size() - 1, false);
          checkReduce(c, DataType::Float64, ReduceOp::Prod, 20011, 0, true);
          checkNonReducing(c, DataType::Int32, 300007);
        },
        std::chrono::seconds(600));
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, SingleCopyProcesses, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

// Deterministic mode: the single-copy threshold does not change a reduce's bits (reduce
// always stages and reduces in rank order): values whose sum depends on the order (random
// floats of mixed magnitudes), the root's output compared bit for bit.
TEST(SingleCopy, DeterministicReduceMatchesStaged) {
  constexpr std::size_t kCount = 20011;
  constexpr int kRoot = 3;
  std::vector<std::vector<float>> results;
  for (std::size_t threshold : {std::size_t{0}, SIZE_MAX}) {
    Options o = forced(threshold);
    o.deterministic = true;
    std::vector<float> got(kCount);
    runThreads(5, o, [&](Comm& c) {
      std::mt19937 rng(static_cast<unsigned>(c.rank()) * 7919u + 1u);
      std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
      std::vector<float> in(kCount), out(kCount, 0.0f);
      for (std::size_t i = 0; i < kCount; ++i)
        in[i] = std::ldexp(mantissa(rng), static_cast<int>(rng() % 40) - 20);
      c.reduce(in.data(), out.data(), kCount, DataType::Float32, ReduceOp::Sum, kRoot);
      if (c.rank() == kRoot) got = out;
    });
    results.push_back(std::move(got));
  }
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), kCount * sizeof(float)), 0);
}

// The default: a CPU per rank (the test's host of 2 CPUs, 2 ranks) measures; more ranks than
// CPUs stage (messages keep the crowded host's 64 KiB); BRAID_SHM_CMA_DISABLE says so. Whatever was
// measured, the collectives stay correct on both sides of it.
TEST(SingleCopy, ChoiceIsReported) {
  Options measured = testOptions("shm_direct");
  measured.shmCmaThresholdBytes.reset();  // auto, as without BRAID_SHM_CMA_THRESHOLD
  measured.tuneCache = "off";             // measured at every creation, kept nowhere
  runThreads(2, measured, [](Comm& c) {
    const std::string got = c.singleCopy();
    if (got.find("measured at creation in ") == std::string::npos ||
        got.find(" ms (2 ranks; us staged/single copy per block: 4K ") == std::string::npos)
      throw Error(ErrorCode::Internal, "singleCopy() = '" + got + "'");
    const std::size_t counts[] = {13, 5003};  // 20 KB blocks: above 16 KiB
    sweepCollectives(c, counts);
  });
  runThreads(3, measured,
             [](Comm& c) { expectChoice(c, "never: crowded host: 3 ranks on 2 CPUs (staged)"); });
  Options off = measured;
  off.shmCmaDisable = true;
  runThreads(2, off, [](Comm& c) {
    expectChoice(c, "never: BRAID_SHM_CMA_DISABLE");
    for (int p = 0; p < c.size(); ++p)
      if (p != c.rank() && c.pathTo(p) != "shm")
        throw Error(ErrorCode::Internal, "pathTo = " + c.pathTo(p));
    const std::size_t counts[] = {0, 7, 1031};
    sweepCollectives(c, counts);
  });
}

// The machine profile's file (BRAID_TUNE_CACHE): the first creation measures and keeps the
// threshold per rank count, the next reads it (every rank the same value, whatever rank 0
// found); a value planted in the file is the one used; BRAID_SHM_CMA_THRESHOLD still wins; a
// file of another machine is measured over.
TEST(SingleCopy, ThresholdKeptInTheProfileFile) {
  char dirTemplate[] = "/tmp/braid-sc-tune-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  const std::string path = std::string(dirTemplate) + "/m.tune";
  Options o = testOptions("shm_direct");
  o.shmCmaThresholdBytes.reset();
  o.tuneCache = path;
  o.tuneMaxBusyPercent = 100;  // kept however busy the machine running the tests is
  runThreads(2, o, [&](Comm& c) {
    const std::string got = c.singleCopy();
    if (got.find("measured at creation in ") == std::string::npos)
      throw Error(ErrorCode::Internal, "first: singleCopy() = '" + got + "'");
    if (c.rank() == 0 && got.find("kept in " + path) == std::string::npos)
      throw Error(ErrorCode::Internal, "first, rank 0: singleCopy() = '" + got + "'");
  });
  const machine::TuneKey key =
      machine::thisMachine(kernels::toString(kernels::supportedIsas().back()));
  machine::TuneCache file = machine::readTuneCache(path, key);
  ASSERT_EQ(file.state, machine::TuneCache::State::Loaded) << file.problem;
  ASSERT_NE(file.find("shm_single_copy.2ranks"), nullptr);
  runThreads(2, o, [&](Comm& c) {
    const std::string got = c.singleCopy();
    if (got.find(": cached in " + path + " (measured ") == std::string::npos)
      throw Error(ErrorCode::Internal, "second: singleCopy() = '" + got + "'");
  });
  // Planted values, both sides of the sweep's block sizes: the collectives stay correct.
  for (std::uint64_t planted : {std::uint64_t{4096}, machine::kTuneNever}) {
    ASSERT_EQ(
        machine::writeTuneCache(
            path, key, {{"shm_single_copy.2ranks", {planted, "2026-01-02T03:04:05Z", "planted"}}}),
        "");
    const std::string want =
        (planted == machine::kTuneNever ? std::string("never") : "from 4096 B") + ": cached in " +
        path + " (measured 2026-01-02T03:04:05Z, 2 ranks)";
    runThreads(2, o, [&](Comm& c) {
      expectChoice(c, want);
      const std::size_t counts[] = {7, 5003};
      sweepCollectives(c, counts);
    });
  }
  Options over = o;
  over.shmCmaThresholdBytes = std::size_t{1} << 20;
  runThreads(2, over, [](Comm& c) { expectChoice(c, "from 1048576 B: BRAID_SHM_CMA_THRESHOLD"); });
  machine::TuneKey other = key;
  other.cpuModel += " (another)";
  ASSERT_EQ(
      machine::writeTuneCache(
          path, other, {{"shm_single_copy.2ranks", {4096, "2026-01-02T03:04:05Z", "planted"}}}),
      "");
  runThreads(2, o, [&](Comm& c) {
    const std::string got = c.singleCopy();
    if (got.find("measured at creation in ") == std::string::npos ||
        (c.rank() == 0 && got.find("was another machine's") == std::string::npos))
      throw Error(ErrorCode::Internal, "other machine: singleCopy() = '" + got + "'");
  });
  std::filesystem::remove_all(dirTemplate);
}

// The direct collectives' chunk (SharedMemoryGroup::chunkBytes, shm_single_copy.hpp): with
// BRAID_CHUNK_SIZE at its default and a CPU per rank, measured by the single-copy probe and
// kept per rank count; the next creation reads it; a planted value is used (every rank the
// same) and the collectives stay correct across its chunks; an entry too large for this
// group's staging half is measured over, and then only sizes that fit qualify;
// BRAID_SHM_CHUNK_SIZE and BRAID_CHUNK_SIZE win; a crowded host takes the default unmeasured.
TEST(ShmChunk, MeasuredKeptAndOverridden) {
  char dirTemplate[] = "/tmp/braid-chunk-tune-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  const std::string path = std::string(dirTemplate) + "/m.tune";
  Options o = testOptions("shm_direct");
  o.chunkBytes = Options{}.chunkBytes;  // the default: the shm chunk is measured
  o.tuneCache = path;
  o.tuneMaxBusyPercent = 100;  // kept however busy the machine running the tests is
  auto expectChunk = [](Comm& c, const std::string& prefix) {
    expectPrefix("sharedMemoryChunk()", c.sharedMemoryChunk(), prefix);
  };
  runThreads(2, o, [&](Comm& c) {
    const std::string got = c.sharedMemoryChunk();
    const bool probeSize = got.rfind("65536 B: ", 0) == 0 || got.rfind("262144 B: ", 0) == 0 ||
                           got.rfind("1048576 B: ", 0) == 0;
    if (!probeSize || got.find(": measured at creation in ") == std::string::npos ||
        got.find(" ms (2 ranks): the smallest staged block within 10% of the fastest per byte "
                 "(ps per byte: 64K ") == std::string::npos)
      throw Error(ErrorCode::Internal, "first: sharedMemoryChunk() = '" + got + "'");
    if (c.rank() == 0 && got.find("; kept in " + path) == std::string::npos)
      throw Error(ErrorCode::Internal, "first, rank 0: sharedMemoryChunk() = '" + got + "'");
  });
  const machine::TuneKey key =
      machine::thisMachine(kernels::toString(kernels::supportedIsas().back()));
  const machine::TuneCache file = machine::readTuneCache(path, key);
  ASSERT_EQ(file.state, machine::TuneCache::State::Loaded) << file.problem;
  ASSERT_NE(file.find("shm_chunk.2ranks"), nullptr);
  // testOptions sets the single-copy threshold: only the chunk was asked for and written.
  EXPECT_EQ(file.find("shm_single_copy.2ranks"), nullptr);
  runThreads(2, o, [&](Comm& c) {
    expectChunk(c, std::to_string(file.find("shm_chunk.2ranks")->value) + " B: cached in " + path +
                       " (measured ");
  });
  // A planted chunk of 4 KiB: a 1 MB allreduce, reduce and broadcast run 250 chunks.
  ASSERT_EQ(machine::writeTuneCache(
                path, key, {{"shm_chunk.2ranks", {4096, "2026-01-02T03:04:05Z", "planted"}}}),
            "");
  runThreads(2, o, [&](Comm& c) {
    expectChunk(c, "4096 B: cached in " + path + " (measured 2026-01-02T03:04:05Z, 2 ranks)");
    checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 250007, false);
    checkReduce(c, DataType::Float64, ReduceOp::Max, 125003, 1, true);
    checkNonReducing(c, DataType::Int32, 250007);
  });
  // A staging half of 128 KiB cannot hold a planted 1 MiB chunk: measured over, 64 KiB (the one
  // probe size from the smallest chunk on that fits).
  ASSERT_EQ(machine::writeTuneCache(
                path, key, {{"shm_chunk.2ranks", {1 << 20, "2026-01-02T03:04:05Z", "planted"}}}),
            "");
  Options small = o;
  small.shmStagingBytes = 256 << 10;
  runThreads(2, small, [&](Comm& c) {
    expectChunk(c, "65536 B: measured at creation in ");
    checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 100003, true);
  });
  Options shmSet = o;
  shmSet.shmChunkBytes = 8192;
  runThreads(2, shmSet, [&](Comm& c) {
    expectChunk(c, "8192 B: BRAID_SHM_CHUNK_SIZE");
    checkAllreduce(c, DataType::BFloat16, ReduceOp::Sum, 30011, false);
  });
  Options chunkSet = o;
  chunkSet.chunkBytes = 16384;
  runThreads(2, chunkSet, [&](Comm& c) { expectChunk(c, "16384 B: BRAID_CHUNK_SIZE"); });
  // Both measured by one probe (the single-copy threshold automatic too), both kept.
  Options both = o;
  both.shmCmaThresholdBytes.reset();
  both.tuneCache = std::string(dirTemplate) + "/both.tune";
  both.tuneMaxBusyPercent = 100;
  runThreads(2, both, [&](Comm& c) {
    expectChunk(c, "");
    if (c.sharedMemoryChunk().find("measured at creation in ") == std::string::npos ||
        c.singleCopy().find("measured at creation in ") == std::string::npos)
      throw Error(ErrorCode::Internal,
                  "both: '" + c.sharedMemoryChunk() + "' and '" + c.singleCopy() + "'");
  });
  const machine::TuneCache bothFile = machine::readTuneCache(both.tuneCache, key);
  EXPECT_NE(bothFile.find("shm_chunk.2ranks"), nullptr);
  EXPECT_NE(bothFile.find("shm_single_copy.2ranks"), nullptr);
  // testOptions' host of 2 CPUs: 3 ranks are crowded.
  runThreads(3, o, [&](Comm& c) { expectChunk(c, "262144 B: crowded host: not measured"); });
  std::filesystem::remove_all(dirTemplate);
}

// The direct collectives' streaming threshold (shm_streaming.hpp): measured by the group at
// the first creation and kept in the profile file, read from it afterwards; a planted threshold
// of 4 KiB makes every direct collective write its output with non-temporal stores, "never"
// none (both checked with data); a crowded host keeps the process's threshold; BRAID_LLC_SIZE
// (an override of the process's threshold, half of it) wins.
TEST(ShmStreaming, MeasuredKeptAndOverridden) {
  // No override of the process's threshold while the group measures (restored at the end).
  const std::size_t overridden = kernels::streamingThresholdSet();
  kernels::setLastLevelCacheBytes(0);
  char dirTemplate[] = "/tmp/braid-streaming-tune-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  const std::string path = std::string(dirTemplate) + "/m.tune";
  Options o = testOptions("shm_direct");
  o.tuneCache = path;
  o.tuneMaxBusyPercent = 100;  // kept however busy the machine running the tests is
  auto expectStreaming = [](Comm& c, const std::string& prefix) {
    expectPrefix("sharedMemoryStreaming()", c.sharedMemoryStreaming(), prefix);
  };
  runThreads(2, o, [&](Comm& c) {
    const std::string got = c.sharedMemoryStreaming();
    const std::size_t at = got.find(" B: measured at creation in ");
    if (at == std::string::npos || at == 0 ||
        got.find(" ms (2 ranks): streaming stores ") == std::string::npos ||
        got.find("(all ranks' outputs together; us cached/streamed: 4M ") == std::string::npos)
      throw Error(ErrorCode::Internal, "first: sharedMemoryStreaming() = '" + got + "'");
    if (c.rank() == 0 && got.find("; kept in " + path) == std::string::npos)
      throw Error(ErrorCode::Internal, "first, rank 0: sharedMemoryStreaming() = '" + got + "'");
  });
  const machine::TuneKey key =
      machine::thisMachine(kernels::toString(kernels::supportedIsas().back()));
  const machine::TuneCache file = machine::readTuneCache(path, key);
  ASSERT_EQ(file.state, machine::TuneCache::State::Loaded) << file.problem;
  const machine::TuneEntry* measured = file.find("shm_streaming.2ranks");
  ASSERT_NE(measured, nullptr);
  EXPECT_GE(measured->value, std::size_t{4} << 20);
  // testOptions sets the single-copy threshold and the chunk: only streaming was measured.
  EXPECT_EQ(file.find("shm_chunk.2ranks"), nullptr);
  EXPECT_EQ(file.find("shm_single_copy.2ranks"), nullptr);
  runThreads(2, o, [&](Comm& c) {
    expectStreaming(
        c, (measured->value == machine::kTuneNever ? std::string("never")
                                                   : std::to_string(measured->value) + " B") +
               ": cached in " + path + " (measured ");
  });
  // 4 KiB of outputs together: every direct collective below streams its output.
  ASSERT_EQ(machine::writeTuneCache(
                path, key, {{"shm_streaming.2ranks", {4096, "2026-01-02T03:04:05Z", "planted"}}}),
            "");
  auto checkAll = [](Comm& c) {
    checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 250007, false);
    checkAllreduce(c, DataType::Int64, ReduceOp::Max, 4099, true);
    checkReduce(c, DataType::Float64, ReduceOp::Sum, 125003, 1, false);
    checkReduce(c, DataType::Int32, ReduceOp::Min, 30011, 0, true);
    checkNonReducing(c, DataType::Int32, 100003);
    checkNonReducing(c, DataType::Uint8, 4099);
  };
  runThreads(2, o, [&](Comm& c) {
    expectStreaming(c, "4096 B: cached in " + path + " (measured 2026-01-02T03:04:05Z, 2 ranks)");
    checkAll(c);
  });
  ASSERT_EQ(
      machine::writeTuneCache(path, key,
                              {{"shm_streaming.2ranks",
                                {machine::kTuneNever, "2026-01-02T03:04:06Z", "planted never"}}}),
      "");
  runThreads(2, o, [&](Comm& c) {
    expectStreaming(c, "never: cached in " + path + " (measured 2026-01-02T03:04:06Z, 2 ranks)");
    checkAll(c);
  });
  // testOptions' host of 2 CPUs: 3 ranks are crowded.
  runThreads(3, o, [&](Comm& c) {
    const std::string got = c.sharedMemoryStreaming();
    if (got.find(" B: crowded host: not measured (the process's threshold)") == std::string::npos)
      throw Error(ErrorCode::Internal, "crowded: sharedMemoryStreaming() = '" + got + "'");
  });
  // BRAID_LLC_SIZE (Options::llcBytes, applied process-wide at creation) wins over the file's
  // "never": every output below streams.
  Options llc = o;
  llc.llcBytes = std::size_t{1} << 20;
  runThreads(2, llc, [&](Comm& c) {
    expectStreaming(c, "524288 B: BRAID_LLC_SIZE (the process's threshold, half of it)");
    checkAllreduce(c, DataType::BFloat16, ReduceOp::Sum, 300007, false);
    checkNonReducing(c, DataType::Float32, 200003);
  });
  kernels::setLastLevelCacheBytes(overridden * 2);
  std::filesystem::remove_all(dirTemplate);
}

// Runs `body` in a forked child whose process_vm_readv fails with EPERM (a seccomp filter, as a
// container's profile or Yama's ptrace_scope would make it fail); returns the child's exit code
// (77: the filter could not be installed).
template <class F>
int withoutProcessVmReadv(F&& body) {
  return inChild([&] {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      return 77;
    return body();
  });
}

TEST(SingleCopy, RefusedByTheKernelFallsBackToStaging) {
  const int code = withoutProcessVmReadv([] {
    int bad = 0;
    for (std::size_t threshold : {std::size_t{0}, std::size_t{4096}}) {
      Options o = forced(threshold);
      runThreads(3, o, [&](Comm& c) {
        const std::string got = c.singleCopy();
        if (got.rfind("never: local rank ", 0) != 0 ||
            got.find("could not read local rank") == std::string::npos) {
          std::fprintf(stderr, "singleCopy() = '%s'\n", got.c_str());
          ++bad;
        }
        const std::size_t counts[] = {0, 7, 5003};
        sweepCollectives(c, counts);
      });
    }
    return bad == 0 && !::testing::Test::HasFailure() ? 0 : 1;
  });
  if (code == 77) GTEST_SKIP() << "seccomp filters are not available here";
  EXPECT_EQ(code, 0) << "the child's output above says what failed";
}

// A probe timed while the ranks could not keep their CPUs describes the load, not the machine:
// here both ranks and three spinning threads share one CPU (the host is said to have two, so it
// is not crowded and the probes run). Its figures serve that communicator, and nothing is kept:
// the next communicator measures again; with BRAID_TUNE_MAX_BUSY at 100 it is kept.
TEST(SingleCopy, AProbeTimedOnABusyMachineIsNotKept) {
  const std::vector<int> cpus = machine::allowedCpus();
  ASSERT_FALSE(cpus.empty());
  char dirTemplate[] = "/tmp/braid-sc-busy-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  const std::string path = std::string(dirTemplate) + "/m.tune";
  Options o = testOptions("shm_direct");
  o.shmCmaThresholdBytes.reset();
  o.shmHostCpus = 2;
  o.tuneCache = path;
  const machine::TuneKey key =
      machine::thisMachine(kernels::toString(kernels::supportedIsas().back()));
  cpu_set_t before;
  ASSERT_EQ(::sched_getaffinity(0, sizeof before, &before), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus.front(), &one);
  for (int maxBusy : {20, 100}) {
    SCOPED_TRACE("BRAID_TUNE_MAX_BUSY " + std::to_string(maxBusy));
    std::filesystem::remove(path);
    o.tuneMaxBusyPercent = maxBusy;
    // Threads made from now on (the hogs, the ranks) inherit the one CPU.
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    std::atomic<bool> stop{false};
    std::vector<std::thread> hogs;
    for (int i = 0; i < 3; ++i)
      hogs.emplace_back([&] {
        while (!stop.load(std::memory_order_relaxed)) {
        }
      });
    std::string single;
    runThreads(2, o, [&](Comm& c) {
      if (c.rank() == 0) single = c.singleCopy();
      checkAllreduce(c, DataType::Float32, ReduceOp::Sum, 1031, false);
    });
    stop = true;
    for (auto& t : hogs) t.join();
    ASSERT_EQ(::sched_setaffinity(0, sizeof before, &before), 0);
    EXPECT_NE(single.find("measured at creation in "), std::string::npos) << single;
    const machine::TuneCache file = machine::readTuneCache(path, key);
    if (maxBusy == 100) {
      EXPECT_NE(single.find("; kept in " + path), std::string::npos) << single;
      EXPECT_NE(file.find("shm_single_copy.2ranks"), nullptr);
    } else {
      EXPECT_NE(single.find("; not kept: the machine was busy (a rank was off its CPU for "),
                std::string::npos)
          << single;
      EXPECT_EQ(file.find("shm_single_copy.2ranks"), nullptr);
      EXPECT_EQ(file.find("shm_chunk.2ranks"), nullptr);
      EXPECT_EQ(file.find("shm_streaming.2ranks"), nullptr);
    }
  }
  std::filesystem::remove_all(dirTemplate);
}

}  // namespace
}  // namespace braid::test
