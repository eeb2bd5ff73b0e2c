// The UCX transport's setup (src/transport/ucx, docs/ucx.md): what creation refuses and says,
// and the settings it gives UCX (the tcp receive segment, only where UCX loads tcp). The
// transport's rules and the collectives over it are in ucx_test.cpp.
#include <gtest/gtest.h>

#include <braid/braid.hpp>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/transport_ranks.hpp"
#include "harness/ucx_env.hpp"
#include "store/memory_store.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport {
namespace {

using namespace std::chrono_literals;
using test::Bytes;
using test::useUcxTls;

#ifdef BRAID_HAVE_UCX

UcxOptions quick(std::chrono::milliseconds connect = 20000ms) {
  UcxOptions o;
  o.connectTimeout = connect;
  o.spin = 20us;
  return o;
}

// UCX 1.13's shared-memory transports detect dead peers only with their error handling on:
// without it, creation says what to set instead of running without peer failure detection.
TEST(UcxSetup, SharedMemoryWithoutErrorHandlingSaysWhatToSet) {
  ::setenv("UCX_TLS", "sm,cma", 1);
  ::unsetenv("UCX_POSIX_ERROR_HANDLING");
  ::unsetenv("UCX_SYSV_ERROR_HANDLING");
  MemoryStore store;
  std::vector<std::string> errors(2);
  std::vector<ErrorCode> codes(2, ErrorCode::Internal);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      codes[r] = test::codeOf([&] { createUcxTransport(store, r, 2, quick(5000ms)); }, errors[r]);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], ErrorCode::InvalidArgument) << errors[r];
    EXPECT_NE(errors[r].find("UCX_POSIX_ERROR_HANDLING=y"), std::string::npos) << errors[r];
  }
}

// UCX's tcp receive segment carries one pipeline chunk and its headers, within bounds, unless
// the user set it.
TEST(UcxSetup, ReceiveSegmentFollowsTheChunkUnlessTheUserSetIt) {
  UcxOptions o;
  EXPECT_EQ(tcpRxSegmentFor(o, nullptr, nullptr), "");  // no chunk: UCX's own setting
  o.chunkBytes = 256 * 1024;
  EXPECT_EQ(tcpRxSegmentFor(o, nullptr, nullptr), std::to_string(256 * 1024 + kRxSegmentHeaders));
  EXPECT_EQ(tcpRxSegmentFor(o, "128K", nullptr),
            "");      // UCX_TCP_RX_SEG_SIZE in the environment wins
  o.chunkBytes = 64;  // never below UCX's default
  EXPECT_EQ(tcpRxSegmentFor(o, nullptr, nullptr), std::to_string(kUcxDefaultRxSegment));
  o.chunkBytes = std::size_t{64} << 20;  // nor above the memory bound
  EXPECT_EQ(tcpRxSegmentFor(o, nullptr, nullptr), std::to_string(kMaxRxSegment));
  for (const char* name : {"RX_SEG_SIZE", "TCP_RX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE"}) {
    o.config = {{"TLS", "tcp"}, {name, "1M"}};
    EXPECT_EQ(tcpRxSegmentFor(o, nullptr, nullptr), "") << name;
  }
  o.config = {{"TX_SEG_SIZE", "16K"}};
  EXPECT_NE(tcpRxSegmentFor(o, nullptr, nullptr), "");
  // Only where UCX may load its tcp transport (it warns about a setting no loaded one takes).
  o.config = {};
  for (const char* tls : {"tcp", "tcp,self", "sm,tcp", "all", "^sm,cma", "\\tcp", ""})
    EXPECT_NE(tcpRxSegmentFor(o, nullptr, tls), "") << tls;
  for (const char* tls : {"sm,cma,self", "posix", "^tcp", "^sm,tcp", "rc,ud", "tcpx"})
    EXPECT_EQ(tcpRxSegmentFor(o, nullptr, tls), "") << tls;
  o.config = {{"TLS", "sm,self"}};  // the transport's own TLS over the environment's
  EXPECT_EQ(tcpRxSegmentFor(o, nullptr, "tcp"), "");
  o.config = {{"UCX_TLS", "tcp"}};
  EXPECT_NE(tcpRxSegmentFor(o, nullptr, "sm"), "");
}

// The name the transport sets is one UCX knows: UCX 1.13 takes any name through
// ucp_config_modify and warns "invalid configuration: NAME=value" when the worker starts if no
// transport has it (over tcp the segment would silently stay at 64 KiB; with tcp not loaded,
// as over shared memory, every rank would print the warning). Two ranks over UCX's tcp and
// over its shared memory, a message larger than a chunk, and no such warning.
class UcxSegmentSetting : public testing::TestWithParam<const char*> {};

TEST_P(UcxSegmentSetting, IsOneUcxKnows) {
  useUcxTls(GetParam());
  ::unsetenv("UCX_TCP_RX_SEG_SIZE");
  ::setenv("UCX_WARN_INVALID_CONFIG", "y", 1);  // UCX's default, whatever the caller's
  UcxOptions o = quick();
  o.chunkBytes = 256 * 1024;
  // Set over tcp (the warning would say the name is wrong), left alone over shared memory.
  EXPECT_EQ(tcpRxSegmentFor(o, nullptr, GetParam()).empty(), std::string(GetParam()) != "tcp");
  // UCX's warnings go to stdout or stderr (UCX_LOG_FILE): both are read.
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  {
    MemoryStore store;
    std::unique_ptr<Transport> t[2];
    std::thread ranks[2];
    for (int r = 0; r < 2; ++r)
      ranks[r] = std::thread([&, r] {
        t[r] = createUcxTransport(store, r, 2, o);
        Bytes buf(600 * 1024, static_cast<std::uint8_t>(r));
        Request req;
        if (r == 0)
          t[r]->postSend(1, buf.data(), buf.size(), 3, req);
        else
          t[r]->postRecv(0, buf.data(), buf.size(), 3, req);
        t[r]->wait(req, Clock::now() + 20s);
        if (r == 1) {
          EXPECT_EQ(buf, Bytes(buf.size(), 0));
        }
        t[r].reset();  // both close at once
      });
    for (auto& r : ranks) r.join();
  }
  const std::string out =
      testing::internal::GetCapturedStdout() + testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.find("invalid configuration"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxSegmentSetting, testing::Values("tcp", "sm,cma"),
                         [](const auto& info) {
                           return std::string(info.param) == "tcp" ? "tcp" : "sm_cma";
                         });

#endif  // BRAID_HAVE_UCX

}  // namespace
}  // namespace braid::transport
