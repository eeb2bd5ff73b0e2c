// Cost-model selection in a communicator: BRAID_TUNE's measurement agrees on every rank (threads
// and processes), the tuning file's parameters and rules apply, BRAID_DEBUG=INFO explains each
// (collective, size class) once, and collectives stay correct around all of it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "harness/checks.hpp"
#include "harness/ranks.hpp"

namespace braid::test {
namespace {

std::string tempPath(const std::string& what, const char* ext) {
  return testing::TempDir() + "braid_sel_" + what + "_" + std::to_string(::getpid()) + ext;
}

std::string writeTwoHosts() {
  const std::string file = tempPath("2x2", ".json");
  std::ofstream out(file);
  out << R"({"nodes": [{"host": "a", "ranks": [0, 1]}, {"host": "b", "ranks": [2, 3]}]})";
  return file;
}

constexpr Collective kChoices[] = {Collective::Allreduce,     Collective::Allgather,
                                   Collective::ReduceScatter, Collective::Broadcast,
                                   Collective::Reduce,        Collective::Alltoall};

/// Every rank's selections, hashed, must equal every other rank's.
void expectSameSelectionEverywhere(Comm& c) {
  std::string all;
  for (Collective k : kChoices)
    for (std::size_t bytes = 1; bytes <= (std::size_t{1} << 28); bytes *= 4)
      all += c.selectedAlgorithm(k, bytes) + ";";
  std::uint64_t h = 1469598103934665603ull;
  for (char ch : all) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(c.size()));
  c.allgather(&h, hashes.data(), 1, DataType::Int64);
  for (int r = 0; r < c.size(); ++r)
    EXPECT_EQ(hashes[static_cast<std::size_t>(r)], hashes[0])
        << "rank " << r << " selects differently from rank 0 (rank " << c.rank()
        << " selects: " << all << ")";
}

TEST(Selection, CalibrationAgreesOnEveryThreadRank) {
  const std::string topo = writeTwoHosts();
  Options o = testOptions();
  o.topoFile = topo;
  o.shmDisable = true;  // the "hosts" talk TCP, as real ones would
  o.tune = true;
  o.logLevel = 2;
  testing::internal::CaptureStderr();
  runThreads(4, o, [](Comm& c) {
    expectSameSelectionEverywhere(c);
    const std::size_t counts[] = {0, 1, 7, 1031};
    sweepCollectives(c, counts);
  });
  const std::string log = testing::internal::GetCapturedStderr();
  std::remove(topo.c_str());
  // Counted on the world communicator's lines: the hierarchies' sub-communicators (comm 0/hn..,
  // 0/hl..) log the parameters they inherit too.
  std::size_t calibrated = 0;
  for (auto at = log.find("(calibrated), selects algorithms"); at != std::string::npos;
       at = log.find("(calibrated), selects algorithms", at + 1)) {
    const auto line = log.rfind('\n', at) + 1;  // npos + 1 = 0 on the first line
    if (log.find(" comm 0] ", line) < at) ++calibrated;
  }
  EXPECT_EQ(calibrated, 4u) << log;
  // Rank 0 logs the measurement in tuning-file syntax.
  const auto at = log.find("BRAID_TUNE measured: shm.latency_us = ");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_NE(log.find("; net.bandwidth_GBps = ", at), std::string::npos) << log;
}

TEST(Selection, CalibrationAgreesOnEveryProcessRank) {
  Options o = testOptions();
  o.tune = true;
  runProcesses(3, o, [](Comm& c) {
    expectSameSelectionEverywhere(c);
    const std::size_t counts[] = {1, 1031};
    sweepCollectives(c, counts);
    // Sub-communicators inherit the measured parameters without measuring again.
    auto sub = c.split(c.rank() % 2, c.rank());
    ASSERT_NE(sub, nullptr);
    expectSameSelectionEverywhere(*sub);
  });
}

TEST(Selection, InfoLogExplainsEachSizeClassOnce) {
  const std::string topo = writeTwoHosts();
  Options o = testOptions();
  o.topoFile = topo;
  o.shmDisable = true;
  o.logLevel = 2;
  testing::internal::CaptureStderr();
  runThreads(4, o, [](Comm& c) {
    float x[300] = {}, y[300] = {};
    for (int i = 0; i < 3; ++i) c.allreduce(x, y, 2, DataType::Float32, ReduceOp::Sum);
    c.allreduce(x, y, 300, DataType::Float32, ReduceOp::Sum);
  });
  const std::string log = testing::internal::GetCapturedStderr();
  std::remove(topo.c_str());
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("allreduce 8 B (size class 4 B < size <= 8 B), 2 node(s) x 2 rank(s)"), 4u)
      << log;
  EXPECT_EQ(count("allreduce 1200 B (size class 1 KiB < size <= 2 KiB)"), 4u) << log;
  for (const char* a :
       {"ring", "recursive_doubling", "halving_doubling", "double_binary_tree", "hierarchical"})
    EXPECT_EQ(count(std::string("candidate ") + a + " "), 8u) << a << "\n" << log;
  EXPECT_EQ(count("<- chosen"), 8u) << log;
  EXPECT_EQ(count(": cost model: fastest predicted"), 8u) << log;
}

TEST(Selection, TuningFileParametersAndRulesApply) {
  const std::string topo = writeTwoHosts();
  const std::string tune = tempPath("file", ".tune");
  {
    std::ofstream out(tune);
    out << "# a slow network with a long delay\nnet.latency_us = 1000\nnet.bandwidth_GBps = "
           "0.125\nalgo = allgather:ring\n";
  }
  Options o = testOptions();
  o.topoFile = topo;
  o.shmDisable = true;
  o.tuneFile = tune;
  // The default scratch: with the harness's 4 KiB one, the hierarchical allreduce's pieces
  // (capped by half the scratch) would be 4 KiB, each paying 1 ms, and ring would win.
  o.bufferBytes = 4 << 20;
  runThreads(4, o, [](Comm& c) {
    // The file's rule, over the model's bruck.
    EXPECT_EQ(c.selectedAlgorithm(Collective::Allgather, 32), "ring");
    // 1 ms per network step: a log-step algorithm for 8 bytes; hierarchical for 64 MiB.
    EXPECT_NE(c.selectedAlgorithm(Collective::Allreduce, 8), "ring");
    EXPECT_EQ(c.selectedAlgorithm(Collective::Allreduce, 64 << 20), "hierarchical");
    const std::size_t counts[] = {1, 1031};
    sweepCollectives(c, counts);
  });
  // BRAID_ALGO's rules come before the file's.
  o.algo = "allgather:bruck";
  runThreads(4, o,
             [](Comm& c) { EXPECT_EQ(c.selectedAlgorithm(Collective::Allgather, 32), "bruck"); });
  std::remove(topo.c_str());
  std::remove(tune.c_str());
}

// The row that runs is the row selected: a rule naming shm_ll for a message above its line is
// skipped (BRAID_DEBUG=INFO names the rule and the constraint) and shm_direct runs under its own
// name in the timeline (the flight recorder and metrics take the same name, Op::algorithm),
// the INFO log and selectedAlgorithm; one that fits runs shm_ll.
TEST(Selection, TheRowThatRunsIsTheOneNamedEverywhere) {
  char tmpl[] = "/tmp/braid-selection-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  Options o = testOptions("allreduce:shm_ll");
  o.timeline = dir + "/t.json";
  o.flightSignal = false;
  o.logLevel = 2;
  testing::internal::CaptureStderr();
  runThreads(2, o, [](Comm& c) {
    EXPECT_EQ(c.selectedAlgorithm(Collective::Allreduce, 1200), "shm_direct");
    EXPECT_EQ(c.selectedAlgorithm(Collective::Allreduce, 8), "shm_ll");
    std::vector<float> x(300, 1.0f), y(300, 0.0f);
    c.allreduce(x.data(), y.data(), 300, DataType::Float32, ReduceOp::Sum);  // 1200 B
    EXPECT_EQ(y[299], 2.0f);
    c.allreduce(x.data(), y.data(), 2, DataType::Float32, ReduceOp::Sum);  // 8 B
    EXPECT_EQ(y[1], 2.0f);
  });
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("rule 'shm_ll' skipped: shm_ll needs at most 1008 bytes in all"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("chosen shm_direct"), std::string::npos) << log;
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir + "/t.rank" + std::to_string(r) + ".json");
    const std::string trace((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(trace.find("\"bytes\":1200,\"algorithm\":\"shm_direct\""), std::string::npos)
        << trace;
    EXPECT_NE(trace.find("\"bytes\":8,\"algorithm\":\"shm_ll\""), std::string::npos) << trace;
    EXPECT_EQ(trace.find("\"bytes\":1200,\"algorithm\":\"shm_ll\""), std::string::npos) << trace;
    std::remove((dir + "/t.rank" + std::to_string(r) + ".json").c_str());
  }
  ::rmdir(dir.c_str());
}

// Every rank selects the same row even where its sizes differ: alltoallv selects with 0 bytes,
// so a ranged rule cannot split the ranks between two algorithms (rank 0 sends 4 KiB blocks,
// the others 4-byte ones; the rule matches neither as 0 bytes, shm_direct runs everywhere).
TEST(Selection, AlltoallvRanksWithDifferentSizesSelectAlike) {
  runThreads(3, testOptions("alltoallv:1K-1G:pairwise"), [](Comm& c) {
    const int n = c.size();
    auto block = [](int from) { return std::size_t{from == 0 ? 1024u : 1u}; };
    std::vector<std::size_t> sendCounts(3, block(c.rank())), recvCounts(3);
    for (int p = 0; p < n; ++p) recvCounts[static_cast<std::size_t>(p)] = block(p);
    std::vector<float> send(3 * block(c.rank())), recv(2 * 1 + 1024, -1.0f);
    for (std::size_t i = 0; i < send.size(); ++i)
      send[i] = static_cast<float>(c.rank() * 100000 + static_cast<int>(i));
    EXPECT_EQ(c.selectedAlgorithm(Collective::Alltoallv, 0), "shm_direct");
    c.alltoallv(send.data(), sendCounts, {}, recv.data(), recvCounts, {}, DataType::Float32);
    std::size_t at = 0;
    for (int p = 0; p < n; ++p) {
      const std::size_t b = block(p);
      for (std::size_t i = 0; i < b; ++i)
        ASSERT_EQ(recv[at + i], static_cast<float>(p * 100000 + static_cast<int>(c.rank() * b + i)))
            << "from rank " << p << " element " << i;
      at += b;
    }
  });
}

}  // namespace
}  // namespace braid::test
