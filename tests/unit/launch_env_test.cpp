// What braid derives from the launchers' own variables (issue 24, docs/env.md "Store address"):
// Slurm's compressed host lists, the store port of a Slurm step, the precedence of BRAID_STORE
// and torchrun's variables over what a launcher gives, and the errors for a port that is taken
// or held by another job's store. The real launchers run in tests/launchers (label launchers).
#include <gtest/gtest.h>

#include <braid/braid.hpp>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "bootstrap/pmix.hpp"
#include "bootstrap/slurm.hpp"

namespace braid {
namespace {

using bootstrap::expandHostList;
using bootstrap::slurmStorePort;
using Hosts = std::vector<std::string>;

TEST(SlurmHostList, ExpandsRangesListsAndPadding) {
  EXPECT_EQ(expandHostList("vm", "L"), Hosts{"vm"});
  EXPECT_EQ(expandHostList("node[01-03,07]", "L"), (Hosts{"node01", "node02", "node03", "node07"}));
  EXPECT_EQ(expandHostList("a,b[2],c", "L"), (Hosts{"a", "b2", "c"}));
  EXPECT_EQ(expandHostList("n[08-10]", "L"), (Hosts{"n08", "n09", "n10"}));
  EXPECT_EQ(expandHostList("n[9-11]", "L"), (Hosts{"n9", "n10", "n11"}));
  EXPECT_EQ(expandHostList("n[007-008]x", "L"), (Hosts{"n007x", "n008x"}));
  EXPECT_EQ(expandHostList("rack[1-2]-n[1-2]", "L"),
            (Hosts{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}));
  EXPECT_EQ(expandHostList("gpu[1-2],login,cpu[5]", "L"), (Hosts{"gpu1", "gpu2", "login", "cpu5"}));
  EXPECT_EQ(expandHostList("[1-3]", "L"), (Hosts{"1", "2", "3"}));
}

TEST(SlurmHostList, StopsAtTheLimit) {
  EXPECT_EQ(expandHostList("node[1-100000000]", "L", 2), (Hosts{"node1", "node2"}));
  EXPECT_EQ(expandHostList("a,b,c", "L", 1), Hosts{"a"});
  EXPECT_EQ(expandHostList("n[1-1000]", "L").size(), 1000u);
}

TEST(SlurmHostList, MalformedListsAreErrorsNamingTheVariable) {
  for (const char* bad : {"", "node[1-3", "node]1", "node[3-1]", "node[a-b]", "a,,b", "n[1,,2]",
                          "n[[1]]", "n[]", "n[1-]", "n[-2]", ",a", "a,"}) {
    try {
      expandHostList(bad, "SLURM_STEP_NODELIST");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find("SLURM_STEP_NODELIST='" + std::string(bad) + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(SlurmStorePort, StepsOfAJobAndNearbyJobsNeverCollide) {
  EXPECT_EQ(slurmStorePort(0, 0), bootstrap::kSlurmPortLow);
  EXPECT_EQ(slurmStorePort(624, 15), bootstrap::kSlurmPortHigh);
  EXPECT_EQ(slurmStorePort(1234, 2), 20000 + (1234 % 625) * 16 + 2);
  // Any 625 consecutive job ids x steps 0..15: all distinct, all in the range.
  for (std::uint64_t first : {std::uint64_t{1}, std::uint64_t{999983}, std::uint64_t{4294966000}}) {
    std::set<std::uint16_t> seen;
    for (std::uint64_t job = first; job < first + 625; ++job) {
      for (std::uint64_t step = 0; step < 16; ++step) {
        const auto p = slurmStorePort(job, step);
        EXPECT_GE(p, bootstrap::kSlurmPortLow);
        EXPECT_LE(p, bootstrap::kSlurmPortHigh);
        seen.insert(p);
      }
    }
    EXPECT_EQ(seen.size(), 625u * 16u) << "jobs from " << first;
  }
}

class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : {"BRAID_RANK",
                          "BRAID_WORLD_SIZE",
                          "BRAID_LOCAL_RANK",
                          "BRAID_STORE",
                          "BRAID_STORE_EXTERNAL",
                          "RANK",
                          "WORLD_SIZE",
                          "LOCAL_RANK",
                          "MASTER_ADDR",
                          "MASTER_PORT",
                          "TORCHELASTIC_USE_AGENT_STORE",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "PMIX_NAMESPACE",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "SLURM_LOCALID",
                          "SLURM_STEP_NODELIST",
                          "SLURM_JOB_NODELIST",
                          "SLURM_NODELIST",
                          "SLURM_JOB_ID",
                          "SLURM_JOBID",
                          "SLURM_STEP_ID",
                          "SLURM_STEPID",
                          "SLURM_NODEID"})
      unsetenv(v);
  }
  static void slurmTask(const char* rank, const char* nodes, const char* job, const char* step) {
    setenv("SLURM_PROCID", rank, 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_STEP_NODELIST", nodes, 1);
    setenv("SLURM_JOB_ID", job, 1);
    setenv("SLURM_STEP_ID", step, 1);
  }
  static std::string message(void (*f)()) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
};

TEST_F(LaunchEnvTest, SlurmStoreIsOnTheStepsFirstHost) {
  slurmTask("1", "node[03-04]", "1234", "2");
  const LaunchInfo li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.source, "slurm");
  EXPECT_EQ(li.storeSource, "slurm");
  EXPECT_EQ(li.storeHost, "node03");
  EXPECT_EQ(li.storePort, 20000 + (1234 % 625) * 16 + 2);
  EXPECT_TRUE(li.storeBindAny);
  EXPECT_EQ(li.jobId, "slurm job 1234 step 2");
  EXPECT_NE(li.storeDetail.find("SLURM_STEP_NODELIST='node[03-04]'"), std::string::npos)
      << li.storeDetail;
}

TEST_F(LaunchEnvTest, SlurmStepOnOneNodeUsesLoopback) {
  slurmTask("0", "vm", "7", "0");
  const LaunchInfo li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.storeHost, "127.0.0.1");
  EXPECT_FALSE(li.storeBindAny);
  EXPECT_EQ(li.storePort, 20000 + 7 * 16);
}

TEST_F(LaunchEnvTest, SlurmFallsBackToTheJobsNodeListAndOldNames) {
  slurmTask("2", "x", "5", "1");
  unsetenv("SLURM_STEP_NODELIST");
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_STEP_ID");
  setenv("SLURM_NODELIST", "c[10-11]", 1);
  setenv("SLURM_JOBID", "5", 1);
  setenv("SLURM_STEPID", "3", 1);
  const LaunchInfo li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.storeHost, "c10");
  EXPECT_EQ(li.storePort, 20000 + 5 * 16 + 3);
}

TEST_F(LaunchEnvTest, BraidStoreAndTorchrunWinOverSlurm) {
  slurmTask("1", "node[03-04]", "1234", "2");
  setenv("MASTER_ADDR", "10.0.0.9", 1);
  setenv("MASTER_PORT", "29500", 1);
  LaunchInfo li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.source, "slurm");
  EXPECT_EQ(li.storeSource, "MASTER_ADDR/MASTER_PORT");
  EXPECT_EQ(li.storeHost, "10.0.0.9");
  EXPECT_EQ(li.storePort, 29500);
  EXPECT_TRUE(li.jobId.empty());
  setenv("BRAID_STORE", "[::1]:4000", 1);
  li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.storeSource, "BRAID_STORE");
  EXPECT_EQ(li.storeHost, "::1");
  EXPECT_EQ(li.storePort, 4000);
}

TEST_F(LaunchEnvTest, SlurmErrorsNameWhatIsMissingOrWrong) {
  slurmTask("1", "node[03-04]", "1234", "2");
  unsetenv("SLURM_STEP_NODELIST");
  EXPECT_NE(message([] { LaunchInfo::fromEnv(); }).find("SLURM_STEP_NODELIST"), std::string::npos);
  setenv("SLURM_STEP_NODELIST", "node[03-", 1);
  EXPECT_NE(message([] { LaunchInfo::fromEnv(); }).find("SLURM_STEP_NODELIST='node[03-'"),
            std::string::npos);
  setenv("SLURM_STEP_NODELIST", "node[03-04]", 1);
  setenv("SLURM_JOB_ID", "x", 1);
  EXPECT_NE(message([] { LaunchInfo::fromEnv(); }).find("SLURM_JOB_ID"), std::string::npos);
  // Task 0 not on the step's first node: the others would look for the store elsewhere.
  slurmTask("0", "node[03-04]", "1234", "2");
  setenv("SLURM_NODEID", "1", 1);
  EXPECT_NE(message([] { LaunchInfo::fromEnv(); }).find("not on its first host node03"),
            std::string::npos)
      << message([] { LaunchInfo::fromEnv(); });
  setenv("SLURM_NODEID", "0", 1);
  setenv("BRAID_STORE_EXTERNAL", "1", 1);
  EXPECT_NE(message([] { LaunchInfo::fromEnv(); }).find("BRAID_STORE_EXTERNAL"), std::string::npos);
}

TEST_F(LaunchEnvTest, OpenMpiExchangesThroughPmix) {
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  EXPECT_NE(message([] { LaunchInfo::fromEnv(); }).find("PMIX_NAMESPACE"), std::string::npos);
  setenv("PMIX_NAMESPACE", "4711", 1);
  if (!bootstrap::pmixBuilt()) {
    EXPECT_NE(message([] { LaunchInfo::fromEnv(); }).find("built without PMIx"), std::string::npos);
    return;
  }
  LaunchInfo li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.storeSource, "pmix");
  EXPECT_EQ(li.storeHost, "127.0.0.1");  // every rank on one host
  EXPECT_EQ(li.storePort, 0);            // known once rank 0 has bound it
  EXPECT_EQ(li.jobId, "openmpi PMIx namespace 4711");
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  EXPECT_EQ(LaunchInfo::fromEnv().storeHost, "");  // rank 0 picks its interface address
  setenv("BRAID_STORE", "127.0.0.1:5000", 1);
  EXPECT_EQ(LaunchInfo::fromEnv().storeSource, "BRAID_STORE");
}

TEST_F(LaunchEnvTest, TorchrunsAgentStoreMovesBraidsToTheNextPort) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  EXPECT_EQ(LaunchInfo::fromEnv().storePort, 29500);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  const LaunchInfo li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.storePort, 29501);
  EXPECT_NE(li.storeDetail.find("TORCHELASTIC_USE_AGENT_STORE"), std::string::npos);
  setenv("MASTER_PORT", "65535", 1);
  EXPECT_THROW(LaunchInfo::fromEnv(), Error);
}

LaunchInfo slurmLaunch(int rank, std::uint16_t port, const std::string& job) {
  LaunchInfo li;
  li.rank = rank;
  li.size = 2;
  li.source = "slurm";
  li.storeHost = "127.0.0.1";
  li.storePort = port;
  li.storeSource = "slurm";
  li.storeDetail = "derived for the test";
  li.jobId = job;
  return li;
}

TEST(LaunchStore, ADerivedPortHeldByAnotherProgramFailsRankZeroNamingIt) {
  TcpStoreServer other("127.0.0.1", 0);
  Options o;
  o.connectTimeout = std::chrono::milliseconds(2000);
  try {
    Comm::create(slurmLaunch(0, other.port(), "slurm job 1 step 0"), o);
    ADD_FAILURE() << "rank 0 served a port that was taken";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("port " + std::to_string(other.port())), std::string::npos) << m;
    EXPECT_NE(m.find("derived from Slurm"), std::string::npos) << m;
    EXPECT_NE(m.find("BRAID_STORE"), std::string::npos) << m;
  }
}

TEST(LaunchStore, AStoreOfAnotherJobIsNeverJoined) {
  TcpStoreServer other("127.0.0.1", 0);
  TcpStore setter("127.0.0.1", other.port(), std::chrono::milliseconds(2000));
  const std::string theirs = "slurm job 7 step 0";
  setter.set("braid/launch/job", std::vector<std::uint8_t>(theirs.begin(), theirs.end()));
  Options o;
  o.connectTimeout = std::chrono::milliseconds(2000);
  try {
    Comm::create(slurmLaunch(1, other.port(), "slurm job 632 step 0"), o);
    ADD_FAILURE() << "rank 1 joined another job's store";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << m;
    EXPECT_NE(m.find("serves slurm job 7 step 0, not slurm job 632 step 0"), std::string::npos)
        << m;
  }
}

TEST(LaunchStore, AStoreThatNamesNoJobTimesOutSayingSo) {
  TcpStoreServer other("127.0.0.1", 0);
  Options o;
  o.connectTimeout = std::chrono::milliseconds(300);
  try {
    Comm::create(slurmLaunch(1, other.port(), "slurm job 632 step 0"), o);
    ADD_FAILURE() << "rank 1 joined a store that names no job";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not say which job it serves"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace braid
