// The variables of straggler attribution and metrics (docs/env.md, "Diagnosis"): defaults,
// units, ranges, and errors naming the variable.
#include <gtest/gtest.h>

#include <braid/braid.hpp>
#include <cstdlib>
#include <string>

namespace braid {
namespace {

using namespace std::chrono_literals;

class ObserveEnv : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"BRAID_STRAGGLER", "BRAID_METRICS_FILE",
                                          "BRAID_METRICS_INTERVAL", "BRAID_METRICS_PORT",
                                          "BRAID_METRICS_ADDR"};
  void SetUp() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
  void TearDown() override { SetUp(); }
  static void expectRejected(const char* name, const char* value) {
    ::setenv(name, value, 1);
    try {
      Options::fromEnv();
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
    ::unsetenv(name);
  }
};

TEST_F(ObserveEnv, Defaults) {
  const Options o = Options::fromEnv();
  EXPECT_EQ(o.stragglerSample, 0u);
  EXPECT_EQ(o.metricsFile, "");
  EXPECT_EQ(o.metricsInterval, 10s);
  EXPECT_EQ(o.metricsPort, -1);
  EXPECT_EQ(o.metricsAddress, "127.0.0.1");
}

TEST_F(ObserveEnv, ValuesAndUnits) {
  ::setenv("BRAID_STRAGGLER", "1", 1);
  ::setenv("BRAID_METRICS_FILE", "/tmp/m.%r.prom", 1);
  ::setenv("BRAID_METRICS_INTERVAL", "500ms", 1);
  ::setenv("BRAID_METRICS_PORT", "9400", 1);
  ::setenv("BRAID_METRICS_ADDR", "::1", 1);
  Options o = Options::fromEnv();
  EXPECT_EQ(o.stragglerSample, 1u);
  EXPECT_EQ(o.metricsFile, "/tmp/m.%r.prom");
  EXPECT_EQ(o.metricsInterval, 500ms);
  EXPECT_EQ(o.metricsPort, 9400);
  EXPECT_EQ(o.metricsAddress, "::1");
  ::setenv("BRAID_STRAGGLER", "16", 1);
  for (auto [text, ms] :
       {std::pair{"2m", 120000}, std::pair{"30s", 30000}, std::pair{"250", 250}}) {
    ::setenv("BRAID_METRICS_INTERVAL", text, 1);
    o = Options::fromEnv();
    EXPECT_EQ(o.metricsInterval, std::chrono::milliseconds(ms)) << text;
  }
  EXPECT_EQ(o.stragglerSample, 16u);
  ::setenv("BRAID_METRICS_PORT", "0", 1);
  EXPECT_EQ(Options::fromEnv().metricsPort, 0);
}

TEST_F(ObserveEnv, BadValuesNameTheVariable) {
  expectRejected("BRAID_STRAGGLER", "-1");
  expectRejected("BRAID_STRAGGLER", "yes");
  expectRejected("BRAID_STRAGGLER", "2000000");
  expectRejected("BRAID_METRICS_INTERVAL", "0");
  expectRejected("BRAID_METRICS_INTERVAL", "10 parsecs");
  expectRejected("BRAID_METRICS_PORT", "65536");
  expectRejected("BRAID_METRICS_PORT", "-2");
  expectRejected("BRAID_METRICS_PORT", "http");
}

TEST_F(ObserveEnv, EveryVariableIsListedWithAMeaning) {
  for (const char* v : kVars) {
    bool listed = false;
    for (const EnvVarDoc& d : environmentVariables())
      listed = listed || (std::string(d.name) == v && std::string(d.meaning).size() > 10);
    EXPECT_TRUE(listed) << v;
  }
  // A typo is caught by the unknown-variable check.
  std::string typo = "BRAID_METRICS_INTERVALL=1s";
  char* env[] = {typo.data(), nullptr};
  const auto warnings = environmentWarnings(env);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("BRAID_METRICS_INTERVAL?"), std::string::npos) << warnings[0];
}

}  // namespace
}  // namespace braid
