// Launch conventions and their precedence; options parsing and its errors.
#include <gtest/gtest.h>

#include <braid/braid.hpp>
#include <cstdlib>

#include "kernels/reduce.hpp"

namespace braid {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : {"BRAID_RANK",
                          "BRAID_WORLD_SIZE",
                          "BRAID_LOCAL_RANK",
                          "BRAID_STORE",
                          "RANK",
                          "WORLD_SIZE",
                          "LOCAL_RANK",
                          "MASTER_ADDR",
                          "MASTER_PORT",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "SLURM_LOCALID",
                          "BRAID_CHUNK_SIZE",
                          "BRAID_EXEC_TIMEOUT",
                          "BRAID_DEBUG",
                          "BRAID_STORE_EXTERNAL",
                          "BRAID_DETERMINISTIC",
                          "BRAID_SHM_STAGING",
                          "BRAID_HIER_PIECE_SIZE",
                          "BRAID_LLC_SIZE"})
      unsetenv(v);
    unsetenv("BRAID_KERNEL_ISA");
  }
};

TEST_F(EnvTest, DeterministicMode) {
  EXPECT_FALSE(Options::fromEnv().deterministic);
  setenv("BRAID_DETERMINISTIC", "1", 1);
  EXPECT_TRUE(Options::fromEnv().deterministic);
  setenv("BRAID_DETERMINISTIC", "0", 1);
  EXPECT_FALSE(Options::fromEnv().deterministic);
  setenv("BRAID_DETERMINISTIC", "yes", 1);
  EXPECT_THROW(Options::fromEnv(), Error);
  bool listed = false;
  for (const auto& v : environmentVariables())
    listed = listed || v.name == std::string("BRAID_DETERMINISTIC");
  EXPECT_TRUE(listed);
}

TEST_F(EnvTest, NoLauncherMeansOneRank) {
  auto li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.rank, 0);
  EXPECT_EQ(li.size, 1);
  EXPECT_EQ(li.source, "default");
}

TEST_F(EnvTest, PrecedenceBraidThenTorchrunThenOpenMpiThenSlurm) {
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("BRAID_STORE", "127.0.0.1:1234", 1);
  auto li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.source, "slurm");
  EXPECT_EQ(li.rank, 3);
  EXPECT_EQ(li.localRank, 1);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_EQ(LaunchInfo::fromEnv().source, "openmpi");
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "4", 1);
  EXPECT_EQ(LaunchInfo::fromEnv().source, "torchrun");
  setenv("BRAID_RANK", "0", 1);
  setenv("BRAID_WORLD_SIZE", "4", 1);
  li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.source, "braid");
  EXPECT_EQ(li.rank, 0);
  EXPECT_EQ(li.storeHost, "127.0.0.1");
  EXPECT_EQ(li.storePort, 1234);
}

TEST_F(EnvTest, TorchrunStoreFromMasterAddr) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "localhost", 1);
  setenv("MASTER_PORT", "29500", 1);
  auto li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.storeHost, "localhost");
  EXPECT_EQ(li.storePort, 29500);
  EXPECT_FALSE(li.storeExternal);
}

TEST_F(EnvTest, MissingStoreOrSizeIsNamed) {
  setenv("RANK", "1", 1);
  try {
    LaunchInfo::fromEnv();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WORLD_SIZE"), std::string::npos) << e.what();
  }
  setenv("WORLD_SIZE", "2", 1);
  try {
    LaunchInfo::fromEnv();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_STORE"), std::string::npos) << e.what();
  }
  setenv("BRAID_STORE", "nonsense", 1);
  EXPECT_THROW(LaunchInfo::fromEnv(), Error);
}

TEST_F(EnvTest, OptionsParseSizesAndRejectGarbage) {
  setenv("BRAID_CHUNK_SIZE", "128K", 1);
  setenv("BRAID_EXEC_TIMEOUT", "1500", 1);
  setenv("BRAID_DEBUG", "INFO", 1);
  Options o = Options::fromEnv();
  EXPECT_EQ(o.chunkBytes, 128u * 1024);
  EXPECT_EQ(o.execTimeout.count(), 1500);
  EXPECT_EQ(o.logLevel, 2);
  setenv("BRAID_EXEC_TIMEOUT", "soon", 1);
  try {
    Options::fromEnv();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_EXEC_TIMEOUT"), std::string::npos);
  }
}

TEST_F(EnvTest, KernelIsaIsParsedAndCheckedAgainstTheCpu) {
  EXPECT_EQ(Options::fromEnv().kernelIsa, "");
  setenv("BRAID_KERNEL_ISA", "auto", 1);
  EXPECT_EQ(Options::fromEnv().kernelIsa, "");
  setenv("BRAID_KERNEL_ISA", "SCALAR", 1);
  EXPECT_EQ(Options::fromEnv().kernelIsa, "scalar");
  setenv("BRAID_KERNEL_ISA", "sse9", 1);
  try {
    Options::fromEnv();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_KERNEL_ISA"), std::string::npos);
  }
  for (auto isa : kernels::kAllIsas) {
    setenv("BRAID_KERNEL_ISA", kernels::toString(isa), 1);
    if (kernels::isaSupported(isa))
      EXPECT_EQ(Options::fromEnv().kernelIsa, kernels::toString(isa));
    else
      EXPECT_THROW(Options::fromEnv(), Error) << kernels::toString(isa);
  }
}

TEST_F(EnvTest, LastLevelCacheSizeIsAutoOrABoundedSize) {
  EXPECT_EQ(Options::fromEnv().llcBytes, 0u);
  setenv("BRAID_LLC_SIZE", "auto", 1);
  EXPECT_EQ(Options::fromEnv().llcBytes, 0u);
  setenv("BRAID_LLC_SIZE", "8K", 1);
  EXPECT_EQ(Options::fromEnv().llcBytes, 8192u);
  setenv("BRAID_LLC_SIZE", "480M", 1);  // an override is taken as given, not bounded
  EXPECT_EQ(Options::fromEnv().llcBytes, std::size_t{480} << 20);
  for (const char* bad : {"1K", "0", "2T", "big"}) {
    setenv("BRAID_LLC_SIZE", bad, 1);
    try {
      Options::fromEnv();
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BRAID_LLC_SIZE"), std::string::npos) << e.what();
    }
  }
}

TEST_F(EnvTest, ShmStagingSize) {
  EXPECT_EQ(Options::fromEnv().shmStagingBytes, std::size_t{2} << 20);
  setenv("BRAID_SHM_STAGING", "256K", 1);
  EXPECT_EQ(Options::fromEnv().shmStagingBytes, std::size_t{256} << 10);
  setenv("BRAID_SHM_STAGING", "0", 1);
  EXPECT_EQ(Options::fromEnv().shmStagingBytes, 0u);
  setenv("BRAID_SHM_STAGING", "lots", 1);
  try {
    Options::fromEnv();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_SHM_STAGING"), std::string::npos);
  }
  bool listed = false;
  for (const auto& v : environmentVariables())
    listed = listed || std::string(v.name) == "BRAID_SHM_STAGING";
  EXPECT_TRUE(listed);
}

TEST_F(EnvTest, EveryVariableIsDocumented) {
  bool found = false;
  for (const auto& v : environmentVariables()) {
    EXPECT_NE(std::string(v.meaning), "");
    if (std::string(v.name) == "BRAID_ALGO") found = true;
  }
  EXPECT_TRUE(found);
}

TEST_F(EnvTest, HierarchicalPieceSize) {
  EXPECT_EQ(Options::fromEnv().hierPieceBytes, 0u);  // auto: the cost model picks
  setenv("BRAID_HIER_PIECE_SIZE", "64K", 1);
  EXPECT_EQ(Options::fromEnv().hierPieceBytes, std::size_t{64} << 10);
  setenv("BRAID_HIER_PIECE_SIZE", "auto", 1);
  EXPECT_EQ(Options::fromEnv().hierPieceBytes, 0u);
  for (const char* bad : {"0", "big"}) {
    setenv("BRAID_HIER_PIECE_SIZE", bad, 1);
    try {
      Options::fromEnv();
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BRAID_HIER_PIECE_SIZE"), std::string::npos);
    }
  }
  bool listed = false;
  for (const auto& v : environmentVariables())
    listed = listed || std::string(v.name) == "BRAID_HIER_PIECE_SIZE";
  EXPECT_TRUE(listed);
}

}  // namespace
}  // namespace braid
