// Launch conventions and their precedence; options parsing and its errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <braid/braid.hpp>
#include <cstdio>
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
                          "BRAID_SHM_CHUNK_SIZE",
                          "BRAID_HIER_PIECE_SIZE",
                          "BRAID_LLC_SIZE",
                          "BRAID_CONNECT",
                          "BRAID_SHARE_CONNECTIONS",
                          "BRAID_TUNE_MAX_BUSY"})
      unsetenv(v);
    unsetenv("BRAID_KERNEL_ISA");
  }
};

TEST_F(EnvTest, ConnectMode) {
  EXPECT_TRUE(Options::fromEnv().lazyConnect);  // lazy by default
  setenv("BRAID_CONNECT", "lazy", 1);
  EXPECT_TRUE(Options::fromEnv().lazyConnect);
  setenv("BRAID_CONNECT", "eager", 1);
  EXPECT_FALSE(Options::fromEnv().lazyConnect);
  setenv("BRAID_CONNECT", "sometimes", 1);
  try {
    Options::fromEnv();
    ADD_FAILURE() << "BRAID_CONNECT=sometimes accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("BRAID_CONNECT"), std::string::npos) << e.what();
  }
  bool listed = false;
  for (const auto& v : environmentVariables())
    listed = listed || v.name == std::string("BRAID_CONNECT");
  EXPECT_TRUE(listed);
  char entry[] = "BRAID_CONECT=lazy";
  char* env[] = {entry, nullptr};
  const auto warnings = environmentWarnings(env);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("did you mean BRAID_CONNECT?"), std::string::npos) << warnings[0];
}

TEST_F(EnvTest, ShareConnections) {
  EXPECT_TRUE(Options::fromEnv().shareConnections);  // on by default
  setenv("BRAID_SHARE_CONNECTIONS", "0", 1);
  EXPECT_FALSE(Options::fromEnv().shareConnections);
  setenv("BRAID_SHARE_CONNECTIONS", "1", 1);
  EXPECT_TRUE(Options::fromEnv().shareConnections);
  setenv("BRAID_SHARE_CONNECTIONS", "maybe", 1);
  try {
    Options::fromEnv();
    ADD_FAILURE() << "BRAID_SHARE_CONNECTIONS=maybe accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("BRAID_SHARE_CONNECTIONS"), std::string::npos) << e.what();
  }
  bool listed = false;
  for (const auto& v : environmentVariables())
    listed = listed || v.name == std::string("BRAID_SHARE_CONNECTIONS");
  EXPECT_TRUE(listed);
}

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

// Timeouts read like torch's and HCCL's: a unit, or a bare number of milliseconds as before.
TEST_F(EnvTest, TimeoutsAcceptUnits) {
  const std::pair<const char*, long long> cases[] = {
      {"500ms", 500},  {"60s", 60000}, {"5m", 300000},        {"5min", 300000},
      {"1h", 3600000}, {"1500", 1500}, {"720h", 2592000000LL}};
  for (const char* var : {"BRAID_CONNECT_TIMEOUT", "BRAID_EXEC_TIMEOUT"})
    for (auto [text, ms] : cases) {
      setenv(var, text, 1);
      const Options o = Options::fromEnv();
      EXPECT_EQ(
          (std::string(var) == "BRAID_EXEC_TIMEOUT" ? o.execTimeout : o.connectTimeout).count(), ms)
          << var << "=" << text;
      unsetenv(var);
    }
  for (const char* bad : {"0s", "721h", "5 s", "5sec", "1d", "s", "-5s", "1.5s"}) {
    setenv("BRAID_EXEC_TIMEOUT", bad, 1);
    try {
      Options::fromEnv();
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BRAID_EXEC_TIMEOUT"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("500ms, 60s, 5m"), std::string::npos) << e.what();
    }
  }
}

// What creation warns about: unknown BRAID_* names (with the closest known one when it is
// close), and timeouts given as a bare number under a second.
TEST_F(EnvTest, WarningsNameTyposAndUnitlessTimeouts) {
  std::vector<std::string> entries = {
      "BRAID_EXEC_TIMOUT=300",  "BRAID_FROBNICATE=1",  "BRAID_CONNECT_TIMEOUT=20",
      "BRAID_EXEC_TIMEOUT=20s", "BRAID_SOAK_SEED=7",   "BRAID_NODE_RANK=0",
      "BRAID_CHUNK_SIZE=64K",   "PATH=/bin",           "BRAID_SHM_STAGNG=1M",
      "BRAID_CONNECT_TIMEOUT",  "BRAID_AB_ITERS=2000", "BRAID_ELASTIC_ROUNDS=3"};
  std::vector<char*> env;
  for (std::string& e : entries) env.push_back(e.data());
  env.push_back(nullptr);
  const std::vector<std::string> w = environmentWarnings(env.data());
  ASSERT_EQ(w.size(), 4u) << ::testing::PrintToString(w);
  EXPECT_NE(w[0].find("BRAID_EXEC_TIMOUT is ignored: did you mean BRAID_EXEC_TIMEOUT?"),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[1].find("BRAID_FROBNICATE is ignored"), std::string::npos) << w[1];
  EXPECT_EQ(w[1].find("did you mean"), std::string::npos) << w[1];
  EXPECT_NE(w[2].find("BRAID_CONNECT_TIMEOUT=20 is 20 ms"), std::string::npos) << w[2];
  EXPECT_NE(w[2].find("20s"), std::string::npos) << w[2];
  EXPECT_NE(w[3].find("did you mean BRAID_SHM_STAGING?"), std::string::npos) << w[3];
  char* none[] = {nullptr};
  EXPECT_TRUE(environmentWarnings(none).empty());
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

TEST_F(EnvTest, TransportBetweenHosts) {
  EXPECT_EQ(Options::fromEnv().interHostTransport, "auto");
  for (const char* v : {"auto", "tcp", "ucx"}) {
    setenv("BRAID_TRANSPORT", v, 1);
    EXPECT_EQ(Options::fromEnv().interHostTransport, v);
  }
  unsetenv("BRAID_TRANSPORT");
  bool listed = false;
  for (const auto& v : environmentVariables())
    listed = listed || std::string(v.name) == "BRAID_TRANSPORT";
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

// Issue 25 (4): every numeric variable is range-checked where it is parsed. Each hostile value
// must fail Options::fromEnv / LaunchInfo::fromEnv with an InvalidArgument naming the variable
// (before: -1 ms timeouts meant 0, 2^63-1 ms overflowed the clock, 2^32 ranks wrapped to 0).
void expectRejected(const char* name, const char* value, bool launch) {
  setenv(name, value, 1);
  try {
    if (launch)
      LaunchInfo::fromEnv();
    else
      Options::fromEnv();
    ADD_FAILURE() << name << "=" << value << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  unsetenv(name);
}

// BRAID_SHM_CHUNK_SIZE: auto (0, measured or BRAID_CHUNK_SIZE) or a positive size; the hostile
// sizes are in the test below.
TEST_F(EnvTest, ShmChunkSize) {
  EXPECT_EQ(Options::fromEnv().shmChunkBytes, 0u);
  setenv("BRAID_SHM_CHUNK_SIZE", "auto", 1);
  EXPECT_EQ(Options::fromEnv().shmChunkBytes, 0u);
  setenv("BRAID_SHM_CHUNK_SIZE", "512K", 1);
  EXPECT_EQ(Options::fromEnv().shmChunkBytes, std::size_t{512} << 10);
  for (const char* bad : {"0", "lots"}) expectRejected("BRAID_SHM_CHUNK_SIZE", bad, false);
}

// How busy the machine may have been for a measurement to be kept (docs/env.md).
TEST_F(EnvTest, TuneMaxBusyIsAPercentage) {
  EXPECT_EQ(Options::fromEnv().tuneMaxBusyPercent, 20);
  setenv("BRAID_TUNE_MAX_BUSY", "100", 1);
  EXPECT_EQ(Options::fromEnv().tuneMaxBusyPercent, 100);
  setenv("BRAID_TUNE_MAX_BUSY", "0", 1);
  EXPECT_EQ(Options::fromEnv().tuneMaxBusyPercent, 0);
  for (const char* bad : {"101", "-1", "half", "20%"})
    expectRejected("BRAID_TUNE_MAX_BUSY", bad, false);
}

TEST_F(EnvTest, HostileValuesOfEveryNumericVariableAreRejectedNamingIt) {
  const char* kOverflow[] = {"9223372036854775807",
                             "9223372036854775808",
                             "18446744073709551615",
                             "18446744073709551616",
                             "-9223372036854775809",
                             "4294967296",
                             "-1",
                             "1e3",
                             "0x10",
                             "12abc"};
  for (const char* t : {"BRAID_CONNECT_TIMEOUT", "BRAID_EXEC_TIMEOUT"}) {
    for (const char* v : kOverflow) expectRejected(t, v, false);
    expectRejected(t, "0", false);           // 0 ms has no meaning for a timeout
    expectRejected(t, "2592000001", false);  // over the 30-day bound
  }
  for (const char* t : {"BRAID_SPIN_US", "BRAID_DIAG_STALL", "BRAID_DIAG_GRACE",
                        "BRAID_FLIGHT_RECORDER", "BRAID_SOCKET_NTHREADS", "BRAID_NSOCKS_PERTHREAD"})
    for (const char* v : kOverflow) expectRejected(t, v, false);
  expectRejected("BRAID_TRANSPORT", "rdma", false);
  for (const char* b :
       {"BRAID_SHM_DISABLE", "BRAID_SHM_CMA_DISABLE", "BRAID_SHM_LIGHT_WAKE", "BRAID_SHM_NAMED",
        "BRAID_DETERMINISTIC", "BRAID_FLIGHT_SIGNAL", "BRAID_FINGERPRINT"}) {
    for (const char* v : kOverflow) expectRejected(b, v, false);
    expectRejected(b, "2", false);
  }
  for (const char* sz :
       {"BRAID_CHUNK_SIZE", "BRAID_BUFFSIZE", "BRAID_SMALL_MSG_SIZE", "BRAID_SHM_SLOTS",
        "BRAID_SHM_SLOT_SIZE", "BRAID_SHM_MAX_SEGMENT", "BRAID_SHM_CMA_THRESHOLD",
        "BRAID_SHM_STAGING", "BRAID_FUSION_THRESHOLD", "BRAID_SOCKET_STRIPE_MIN",
        "BRAID_HIER_PIECE_SIZE", "BRAID_SHM_CHUNK_SIZE"})
    for (const char* v : {"18446744073709551615", "18446744073709551616", "17179869184G", "2048G",
                          "-1", "1.5M", "4T"})
      expectRejected(sz, v, false);
  for (const char* v : {"-1", "nan", "4294967297", "2147483648"})
    expectRejected("BRAID_CYCLE_TIME", v, false);

  // The launch variables: BRAID_RANK=2^32 with BRAID_WORLD_SIZE=1 used to run as rank 0, and
  // BRAID_WORLD_SIZE=2^32+1 as a world of 1.
  setenv("BRAID_STORE", "127.0.0.1:1234", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  for (auto [rankVar, sizeVar] :
       {std::pair{"BRAID_RANK", "BRAID_WORLD_SIZE"}, std::pair{"RANK", "WORLD_SIZE"},
        std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        std::pair{"SLURM_PROCID", "SLURM_NTASKS"}}) {
    setenv(sizeVar, "1", 1);
    for (const char* v : {"4294967296", "-4294967296", "-1", "1", "18446744073709551616"})
      expectRejected(rankVar, v, true);
    setenv(rankVar, "0", 1);
    for (const char* v : {"4294967297", "2147483648", "0", "-1", "9223372036854775808"})
      expectRejected(sizeVar, v, true);
    unsetenv(rankVar);
    unsetenv(sizeVar);
  }
  setenv("BRAID_RANK", "0", 1);
  setenv("BRAID_WORLD_SIZE", "2", 1);
  for (const char* v : {"2", "-1", "4294967296"}) expectRejected("BRAID_LOCAL_RANK", v, true);
  for (const char* v : {"2", "-1", "4294967296"}) expectRejected("BRAID_STORE_EXTERNAL", v, true);
  unsetenv("BRAID_STORE");
  setenv("MASTER_PORT", "65536", 1);
  expectRejected("MASTER_PORT", "65536", true);
  expectRejected("MASTER_PORT", "4294967296", true);
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");

  // The bounds themselves are accepted.
  setenv("BRAID_CONNECT_TIMEOUT", "1", 1);
  setenv("BRAID_EXEC_TIMEOUT", "2592000000", 1);
  const Options o = Options::fromEnv();
  EXPECT_EQ(o.connectTimeout.count(), 1);
  EXPECT_EQ(o.execTimeout.count(), 2592000000LL);
  unsetenv("BRAID_CONNECT_TIMEOUT");
  unsetenv("BRAID_EXEC_TIMEOUT");
  setenv("BRAID_WORLD_SIZE", "2147483647", 1);
  setenv("BRAID_RANK", "2147483646", 1);
  setenv("BRAID_STORE", "127.0.0.1:1234", 1);
  EXPECT_EQ(LaunchInfo::fromEnv().rank, 2147483646);
  unsetenv("BRAID_STORE");
}

// BRAID_AUTH_KEY_FILE: the key from a file readable only by the user; anything looser, a link,
// an empty file, or both variables set is an InvalidArgument naming the variable.
TEST_F(EnvTest, AuthKeyFileMustBeTheUsersAlone) {
  char dir[] = "/tmp/braid-keyfile-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/key";
  const auto writeKey = [&](const std::string& text, mode_t mode) {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    ::chmod(file.c_str(), mode);
  };
  const auto rejected = [&](const char* why) {
    try {
      Options::fromEnv();
      ADD_FAILURE() << "accepted: " << why;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("BRAID_AUTH_KEY_FILE"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  writeKey("0123456789abcdef0123456789abcdef\n", 0600);
  setenv("BRAID_AUTH_KEY_FILE", file.c_str(), 1);
  EXPECT_EQ(Options::fromEnv().security.authKey, "0123456789abcdef0123456789abcdef");
  writeKey("secret", 0400);
  EXPECT_EQ(Options::fromEnv().security.authKey, "secret");
  writeKey("secret", 0640);
  rejected("chmod 600");
  writeKey("secret", 0604);
  rejected("mode 0604");
  writeKey(" \n", 0600);
  rejected("empty");
  writeKey("secret", 0600);
  const std::string link = std::string(dir) + "/link";
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  setenv("BRAID_AUTH_KEY_FILE", link.c_str(), 1);
  rejected("cannot open");
  setenv("BRAID_AUTH_KEY_FILE", dir, 1);
  rejected("not a regular file");
  setenv("BRAID_AUTH_KEY_FILE", (std::string(dir) + "/missing").c_str(), 1);
  rejected("cannot open");
  setenv("BRAID_AUTH_KEY_FILE", file.c_str(), 1);
  setenv("BRAID_AUTH_KEY", "other", 1);
  rejected("both set");
  unsetenv("BRAID_AUTH_KEY");
  unsetenv("BRAID_AUTH_KEY_FILE");
  ::unlink(link.c_str());
  ::unlink(file.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace braid
