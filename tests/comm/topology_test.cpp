// The communicator's topology: gathered at creation through the store (ranks as threads and as
// processes), dumped with BRAID_TOPO_DUMP (Options::topoDump), replaced by a fabricated file
// with BRAID_TOPO_FILE (Options::topoFile), carried into sub-communicators.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "harness/checks.hpp"
#include "harness/ranks.hpp"
#include "topology/topology_json.hpp"

namespace braid::test {
namespace {

std::string tempPath(const std::string& what) {
  return testing::TempDir() + "braid_" + what + "_" + std::to_string(::getpid()) + ".json";
}

TEST(CommTopology, GatheredThreadsShareOneNode) {
  const std::string dump = tempPath("dump_threads");
  Options o = testOptions();
  o.topoDump = dump;
  runThreads(5, o, [](Comm& c) { c.barrier(); });
  const topology::Topology t = topology::loadTopologyFile(dump);
  ASSERT_EQ(t.size(), 5);
  EXPECT_EQ(t.numNodes(), 1);
  EXPECT_EQ(t.node(0).ranks, (std::vector<int>{0, 1, 2, 3, 4}));
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(t.localRank(r), r);
    EXPECT_FALSE(t.peer(r).cpus.empty());
    EXPECT_EQ(t.peer(r).hostId, t.peer(0).hostId);
  }
  EXPECT_EQ(t.link(1, 3), topology::LinkClass::Shm);
  std::remove(dump.c_str());
}

TEST(CommTopology, GatheredProcessesShareOneNode) {
  const std::string dump = tempPath("dump_procs");
  Options o = testOptions();
  o.topoDump = dump;
  runProcesses(3, o, [](Comm& c) { c.barrier(); });
  const topology::Topology t = topology::loadTopologyFile(dump);
  ASSERT_EQ(t.size(), 3);
  EXPECT_EQ(t.numNodes(), 1);
  std::remove(dump.c_str());
}

TEST(CommTopology, FabricatedFileReplacesGatheredAndReachesSubCommunicators) {
  const std::string file = tempPath("fabricated");
  const std::string dump = tempPath("dump_fab");
  {
    std::ofstream out(file);
    out << R"({"nodes": [{"host": "alpha", "ranks": [0, 2]}, {"host": "beta", "ranks": [1, 3]}]})";
  }
  Options o = testOptions();
  o.topoFile = file;
  o.topoDump = dump;
  runThreads(4, o, [](Comm& c) {
    // Collectives still run (the file is data for planning; the transport is the real one).
    float x = 1;
    float y = 0;
    c.allreduce(&x, &y, 1, DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(y, 4);
    auto sub = c.split(c.rank() / 2, c.rank());
    ASSERT_NE(sub, nullptr);
    sub->barrier();
  });
  const topology::Topology t = topology::loadTopologyFile(dump);
  ASSERT_EQ(t.size(), 4);
  ASSERT_EQ(t.numNodes(), 2);
  EXPECT_EQ(t.node(0).hostname, "alpha");
  EXPECT_EQ(t.node(1).ranks, (std::vector<int>{1, 3}));
  std::remove(file.c_str());
  std::remove(dump.c_str());
}

TEST(CommTopology, HierarchicalAllreduceRunsOnAFabricatedLayout) {
  // 3 "hosts" x 2 ranks, placed round-robin: the composed path runs over the real transport.
  const std::string file = tempPath("fabricated_hier");
  {
    std::ofstream out(file);
    out << R"({"nodes": [{"host": "h0", "ranks": [0, 3]}, {"host": "h1", "ranks": [1, 4]},
                         {"host": "h2", "ranks": [2, 5]}]})";
  }
  Options o = testOptions("allreduce:hierarchical");
  o.topoFile = file;
  runThreads(6, o, [](Comm& c) {
    EXPECT_EQ(c.selectedAlgorithm(Collective::Allreduce, 1024), "hierarchical");
    for (std::size_t count : {0, 1, 7, 13, 1031}) {
      for (bool inPlace : {false, true}) {
        checkAllreduce(c, DataType::Float32, ReduceOp::Sum, count, inPlace);
        checkAllreduce(c, DataType::Int64, ReduceOp::Max, count, inPlace);
        checkAllreduce(c, DataType::BFloat16, ReduceOp::Avg, count, inPlace);
      }
    }
  });
  std::remove(file.c_str());
}

TEST(CommTopology, HierarchicalCollectivesThroughRulesOnFabricatedLayouts) {
  // BRAID_ALGO rules reach the hierarchical allgather, reduce_scatter, broadcast and reduce (a
  // bare name forces every collective that has it; a collective-qualified rule one), on hosts
  // of equal and of different sizes, over the real transports; every collective checked.
  const std::pair<int, const char*> layouts[] = {
      {4, R"({"nodes": [{"host": "h0", "ranks": [0, 2]}, {"host": "h1", "ranks": [1, 3]}]})"},
      {5, R"({"nodes": [{"host": "h0", "ranks": [0, 3, 4]}, {"host": "h1", "ranks": [1, 2]}]})"}};
  const std::size_t counts[] = {0, 1, 7, 1031};
  for (const char* rules : {"hierarchical", "allgather:hierarchical;reduce:hierarchical"}) {
    for (const auto& [n, layout] : layouts) {
      SCOPED_TRACE(std::string(rules) + " " + layout);
      const std::string file = tempPath("fabricated_hier_all");
      {
        std::ofstream out(file);
        out << layout;
      }
      Options o = testOptions(rules);
      o.topoFile = file;
      const bool all = std::string(rules) == "hierarchical";
      // Allgather and reduce_scatter's rows need the same ranks on every node: on the 3 + 2
      // layout the rule naming them is skipped and the default table's row runs instead, under
      // its own name.
      const bool uniform = n == 4;
      const char* even = uniform ? "hierarchical" : "shm_ll";
      runThreads(n, o, [&](Comm& c) {
        EXPECT_EQ(c.selectedAlgorithm(Collective::Allgather, 1024), even);
        EXPECT_EQ(c.selectedAlgorithm(Collective::Reduce, 1 << 20), "hierarchical");
        if (all) {
          EXPECT_EQ(c.selectedAlgorithm(Collective::ReduceScatter, 1024),
                    uniform ? "hierarchical" : "shm_direct");
          EXPECT_EQ(c.selectedAlgorithm(Collective::Broadcast, 1 << 20), "hierarchical");
        }
        sweepCollectives(c, counts);
      });
      std::remove(file.c_str());
      if (HasFailure()) return;
    }
  }
}

TEST(CommTopology, LogStepAlgorithmsOverTcp) {
  // The algorithms added with the topology layer, forced (a bare name forces every collective
  // that has it) and by the default policy, over TCP between threads (shared memory off, so
  // the shm_direct algorithms do not take over), checked element by element.
  const std::size_t counts[] = {0, 1, 7, 1031};
  for (const char* rules : {"", "halving_doubling", "bruck", "allreduce:double_binary_tree"}) {
    for (int n : {3, 4}) {
      SCOPED_TRACE(std::string("rules '") + rules + "' n=" + std::to_string(n));
      Options o = testOptions(rules);
      o.shmDisable = true;
      runThreads(n, o, [&](Comm& c) {
        if (*rules == '\0') {
          EXPECT_EQ(c.selectedAlgorithm(Collective::Allgather, 8), "bruck");
          EXPECT_EQ(c.selectedAlgorithm(Collective::ReduceScatter, 8),
                    n == 4 ? "halving_doubling" : "ring");
        }
        sweepCollectives(c, counts);
      });
      if (HasFailure()) return;
    }
  }
}

TEST(CommTopology, FileOfAnotherSizeIsRejectedNamingIt) {
  const std::string file = tempPath("wrong_size");
  {
    std::ofstream out(file);
    out << R"({"nodes": [{"host": "a", "ranks": [0, 1]}]})";
  }
  Options o = testOptions();
  o.topoFile = file;
  try {
    auto c = Comm::create(LaunchInfo{}, o);
    ADD_FAILURE() << "accepted a 2-rank topology for 1 rank";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("describes 2 ranks"), std::string::npos) << e.what();
  }
  {
    std::ofstream out(file);
    out << "{\"nodes\": [\n  {\"host\": \"a\", \"ranks\": [0,]}]}";
  }
  try {
    auto c = Comm::create(LaunchInfo{}, o);
    ADD_FAILURE() << "accepted a malformed file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file + ":2:"), std::string::npos) << e.what();
  }
  std::remove(file.c_str());
}

TEST(CommTopology, InfoLogDescribesTheTopology) {
  Options o = testOptions();
  o.logLevel = 2;
  testing::internal::CaptureStderr();
  auto c = Comm::create(LaunchInfo{}, o);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("topology 1 node x 1 ranks (1 ranks); this rank: node 0"), std::string::npos)
      << log;
  EXPECT_NE(log.find("local rank 0 of 1"), std::string::npos) << log;
}

// The INFO line that says where a creation's time went, phase by phase, in wall and CPU ms.
TEST(CommTopology, InfoLogTimesCreationPhases) {
  Options o = testOptions();
  o.logLevel = 2;
  testing::internal::CaptureStderr();
  runThreads(3, o, [](Comm&) {});
  const std::string log = testing::internal::GetCapturedStderr();
  std::size_t lines = 0;
  for (auto at = log.find("created in "); at != std::string::npos;
       at = log.find("created in ", at + 1)) {
    ++lines;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    std::size_t from = 0;
    for (const char* phase : {" ms (this thread's CPU ", " ms): options and machine profile ",
                              ", join ", ", transport ", ", diagnosis and liveness ", ", topology ",
                              ", bootstrap done ", ", in ms"}) {
      const auto p = line.find(phase, from);
      EXPECT_NE(p, std::string::npos) << phase << " in: " << line;
      from = p == std::string::npos ? from : p;
    }
  }
  EXPECT_EQ(lines, 3u) << log;  // one per rank
}

}  // namespace
}  // namespace braid::test
