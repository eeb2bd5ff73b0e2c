// Hierarchies on real sub-communicators (docs/architecture.md, "Hierarchies"): every
// hierarchical collective, forced by rule, on fabricated layouts of several "hosts" (a
// BRAID_TOPO_FILE; the ranks are threads of this process, so the transport is shared memory)
// with hosts of equal and different sizes; results against independently computed expectations
// (tests/harness/checks.hpp). The in-host phases run on the node sub-communicator through its
// own selection: a shared-memory row (BRAID_DEBUG=INFO names it). Without sub-communicators the
// rows say they cannot run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>

#include "algo/algorithm.hpp"
#include "harness/checks.hpp"
#include "harness/ranks.hpp"
#include "topology/topology.hpp"
#include "transport/inproc/inproc_transport.hpp"
#include "harness/ucx_env.hpp"
#include "transport/tcp/tcp_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::test {
namespace {

struct Layout {
  int size;
  const char* json;
  bool uniform;
};

// 2 hosts x 2 (placed round-robin), 3 hosts of 1, 2 and 2 ranks, 2 hosts x 3.
constexpr Layout kLayouts[] = {
    {4, R"({"nodes": [{"host": "h0", "ranks": [0, 2]}, {"host": "h1", "ranks": [1, 3]}]})", true},
    {5,
     R"({"nodes": [{"host": "h0", "ranks": [0]}, {"host": "h1", "ranks": [1, 2]},
                   {"host": "h2", "ranks": [3, 4]}]})",
     false},
    {6, R"({"nodes": [{"host": "h0", "ranks": [0, 1, 2]}, {"host": "h1", "ranks": [3, 4, 5]}]})",
     true},
};

std::string writeLayout(const Layout& l) {
  const std::string file = testing::TempDir() + "braid_hier_" + std::to_string(::getpid()) + "_" +
                           std::to_string(l.size) + ".json";
  std::ofstream out(file);
  out << l.json;
  return file;
}

TEST(Hierarchy, EveryHierarchicalCollectiveOnSubCommunicators) {
  // 0, 1, odd, primes, more than a chunk (64 B) and more than the scratch (4 KiB) holds.
  constexpr std::size_t kCounts[] = {0, 1, 7, 13, 131, 1031};
  for (const Layout& l : kLayouts) {
    SCOPED_TRACE(l.json);
    const std::string file = writeLayout(l);
    Options o = testOptions("hierarchical");
    o.topoFile = file;
    runThreads(l.size, o, [&](Comm& c) {
      const char* even = l.uniform ? "hierarchical" : nullptr;
      if (even != nullptr) {
        EXPECT_EQ(c.selectedAlgorithm(Collective::Allreduce, 1024), even);
        EXPECT_EQ(c.selectedAlgorithm(Collective::Allgather, 1024), even);
        EXPECT_EQ(c.selectedAlgorithm(Collective::ReduceScatter, 1024), even);
      }
      EXPECT_EQ(c.selectedAlgorithm(Collective::Broadcast, 1024), "hierarchical");
      EXPECT_EQ(c.selectedAlgorithm(Collective::Reduce, 1024), "hierarchical");
      for (std::size_t count : kCounts) {
        for (bool inPlace : {false, true}) {
          checkAllreduce(c, DataType::Float32, ReduceOp::Sum, count, inPlace);
          checkAllreduce(c, DataType::Int64, ReduceOp::Max, count, inPlace);
          checkReduceScatter(c, DataType::Float32, ReduceOp::Sum, count, inPlace);
          checkReduceScatter(c, DataType::Int32, ReduceOp::Min, count, inPlace);
          checkReduce(c, DataType::Float64, ReduceOp::Sum, count, l.size - 1, inPlace);
          checkReduce(c, DataType::Int32, ReduceOp::Prod, count, 1, inPlace);
        }
        // Allgather (and in place), broadcast from every root, and the flat rest.
        checkNonReducing(c, DataType::Float32, count);
        checkNonReducing(c, DataType::Uint8, count);
      }
      // A world that keeps working after the hierarchies (the sub-communicators stay).
      c.barrier();
    });
    std::remove(file.c_str());
    if (HasFailure()) return;
  }
}

TEST(Hierarchy, ProcessesOnTwoHostsOfTwo) {
  // Ranks as processes: each node sub-communicator maps a segment of its own across processes.
  const Layout& l = kLayouts[0];
  const std::string file = writeLayout(l);
  Options o = testOptions("hierarchical");
  o.topoFile = file;
  runProcesses(l.size, o, [&](Comm& c) {
    for (std::size_t count : {std::size_t{1}, std::size_t{1031}}) {
      checkAllreduce(c, DataType::Float32, ReduceOp::Sum, count, false);
      checkReduceScatter(c, DataType::Int64, ReduceOp::Sum, count, true);
      checkReduce(c, DataType::Float32, ReduceOp::Max, count, 3, false);
      checkNonReducing(c, DataType::Float32, count);
    }
  });
  std::remove(file.c_str());
}

TEST(Hierarchy, OverSharedTcpConnections) {
  // Shared memory off: the sub-communicators run over the parent's TCP connections, each on its
  // own lane, and every phase selects among the network rows.
  const Layout& l = kLayouts[2];
  const std::string file = writeLayout(l);
  Options o = testOptions("hierarchical");
  o.topoFile = file;
  o.shmDisable = true;
  o.lazyConnect = false;  // the world connects every pair at creation
  std::atomic<std::size_t> before{0};
  runThreads(l.size, o, [&](Comm& c) {
    c.barrier();
    if (c.rank() == 0) before = transport::tcpSocketsOpened();
    c.barrier();
    for (std::size_t count : {std::size_t{0}, std::size_t{7}, std::size_t{1031}}) {
      checkAllreduce(c, DataType::Float32, ReduceOp::Sum, count, true);
      checkReduceScatter(c, DataType::Int32, ReduceOp::Sum, count, false);
      checkReduce(c, DataType::Float64, ReduceOp::Sum, count, 4, true);
      checkNonReducing(c, DataType::Float32, count);
    }
    c.barrier();
    // The hierarchy's sub-communicators opened no socket of their own (process-wide count).
    if (c.rank() == 0) {
      EXPECT_EQ(transport::tcpSocketsOpened(), before.load());
    }
  });
  std::remove(file.c_str());
}

TEST(Hierarchy, OverSharedUcxEndpoints) {
  // The same between "hosts" over UCX (UCX's tcp): the node and cross-node sub-communicators
  // post on the world's UCX worker and endpoints and make none of their own.
  if (!transport::ucxAvailable()) GTEST_SKIP() << transport::ucxUnavailableReason();
  useUcxTls("tcp");
  const Layout& l = kLayouts[2];
  const std::string file = writeLayout(l);
  Options o = testOptions("hierarchical");
  o.topoFile = file;
  o.shmDisable = true;
  o.interHostTransport = "ucx";
  o.lazyConnect = false;  // the world connects every pair at creation
  std::atomic<std::size_t> before{0};
  runThreads(l.size, o, [&](Comm& c) {
    c.barrier();
    if (c.rank() == 0) before = transport::ucxEndpointsMade();
    c.barrier();
    for (std::size_t count : {std::size_t{0}, std::size_t{7}, std::size_t{1031}}) {
      checkAllreduce(c, DataType::Float32, ReduceOp::Sum, count, true);
      checkReduceScatter(c, DataType::Int32, ReduceOp::Sum, count, false);
      checkNonReducing(c, DataType::Float32, count);
    }
    c.barrier();
    if (c.rank() == 0) {
      EXPECT_EQ(transport::ucxEndpointsMade(), before.load());
    }
  });
  std::remove(file.c_str());
}

TEST(Hierarchy, InHostPhasesRunASharedMemoryRow) {
  const Layout& l = kLayouts[0];
  const std::string file = writeLayout(l);
  Options o = testOptions("hierarchical");
  o.topoFile = file;
  o.logLevel = 2;  // BRAID_DEBUG=INFO: the phase summary is logged once per combination
  testing::internal::CaptureStderr();
  runThreads(l.size, o, [&](Comm& c) {
    std::vector<float> in(1031, 1.0f), out(1031);
    c.allreduce(in.data(), out.data(), in.size(), DataType::Float32, ReduceOp::Sum);
    for (float v : out) ASSERT_EQ(v, 4.0f);
    std::vector<float> all(in.size() * 4);
    c.allgather(in.data(), all.data(), in.size(), DataType::Float32);
  });
  const std::string log = testing::internal::GetCapturedStderr();
  std::remove(file.c_str());
  // Every rank built its node's sub-communicator with a shared-memory group ...
  std::size_t built = 0;
  for (auto at = log.find("hierarchy: node sub-communicator"); at != std::string::npos;
       at = log.find("hierarchy: node sub-communicator", at + 1)) {
    ++built;
    EXPECT_NE(log.find("shared memory", at), std::string::npos);
  }
  EXPECT_EQ(built, 4u) << log;
  // ... and the allreduce's in-node phases ran shared-memory rows on it, its network phase
  // posted messages on the cross-node one; the allgather's in-node phase likewise.
  EXPECT_NE(log.find("phases: allreduce hierarchical(node: reducescatterv shm_"), std::string::npos)
      << log;
  EXPECT_NE(log.find("allgatherv shm_"), std::string::npos) << log;
  EXPECT_NE(log.find("leaders: point-to-point"), std::string::npos) << log;
  EXPECT_NE(log.find("phases: allgather hierarchical(node: allgatherv shm_"), std::string::npos)
      << log;
  EXPECT_NE(log.find("leaders: allgatherv"), std::string::npos) << log;
}

TEST(Hierarchy, RulesSteerThePhasesUnforced) {
  // The sub-communicators take the parent's rules, never forced: the hierarchical row is skipped
  // there (it cannot run on one node), the phase rules apply.
  const Layout& l = kLayouts[0];
  const std::string file = writeLayout(l);
  Options o = testOptions("hierarchical;reducescatterv:ring;allgatherv:ring");
  o.algoForce = true;
  o.topoFile = file;
  o.logLevel = 2;
  testing::internal::CaptureStderr();
  runThreads(l.size, o, [&](Comm& c) {
    std::vector<float> in(1031, 1.0f), out(1031);
    c.allreduce(in.data(), out.data(), in.size(), DataType::Float32, ReduceOp::Sum);
    for (float v : out) ASSERT_EQ(v, 4.0f);
  });
  const std::string log = testing::internal::GetCapturedStderr();
  std::remove(file.c_str());
  EXPECT_NE(log.find("phases: allreduce hierarchical(node: reducescatterv ring, allgatherv ring"),
            std::string::npos)
      << log;
}

TEST(Hierarchy, RowsNeedSubCommunicators) {
  // Selection: a caller that has no sub-communicators to give gets the constraint, by name.
  const topology::Topology topo = topology::uniformTopology(2, 2);
  for (Collective c : {Collective::Allreduce, Collective::Allgather, Collective::ReduceScatter,
                       Collective::Broadcast, Collective::Reduce}) {
    const algo::AlgoInfo* row = algo::findAlgorithm(c, "hierarchical");
    ASSERT_NE(row, nullptr);
    algo::Setting s{4, 1024, false, &topo, false};
    EXPECT_EQ(algo::cannotRun(*row, s), algo::Constraint::None);
    s.subCommunicators = false;
    EXPECT_EQ(algo::cannotRun(*row, s), algo::Constraint::SubCommunicators);
    EXPECT_NE(algo::describe(algo::Constraint::SubCommunicators, *row).find("sub-communicators"),
              std::string::npos);
    // A direct call without Context::groups: Error(InvalidArgument) naming the constraint,
    // before anything is sent.
    transport::InprocFabric fabric(4);
    auto tr = fabric.endpoint(0);
    std::vector<std::uint8_t> scratch(4096);
    algo::Context ctx{*tr, 0, 4, 64, scratch, transport::Deadline::max(), 1, false, &topo};
    std::vector<float> in(16, 1.0f), out(16 * 4);
    algo::CollArgs a;
    a.coll = c;
    a.send = in.data();
    a.recv = out.data();
    a.count = 16;
    try {
      row->run(ctx, a);
      ADD_FAILURE() << toString(c) << " ran without sub-communicators";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("sub-communicators"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace braid::test
