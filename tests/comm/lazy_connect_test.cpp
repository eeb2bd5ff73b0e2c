// BRAID_CONNECT=lazy at the communicator: over TCP and over UCX (BRAID_TRANSPORT=ucx with
// UCX_TLS=tcp; shared memory off) a ring allreduce on 8 ranks makes each rank connect to its two
// ring neighbours only, where eager connects all 7 peers; results are identical either way, and
// identical to an independently computed sum.
#include <gtest/gtest.h>

#include <braid/braid.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/ranks.hpp"
#include "harness/ucx_env.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::test {
namespace {

constexpr int kRanks = 8;

// Element i of rank r's input: small integers, so the float sum is exact in any order.
float input(int r, std::size_t i) {
  return static_cast<float>((r * 37 + static_cast<int>(i % 1009) * 11) % 257 - 128);
}

struct Outcome {
  std::vector<std::vector<float>> results;  // by rank
  std::vector<std::size_t> connections;     // by rank, after the allreduces
};

Outcome ringAllreduce(bool lazy, int streams, const char* between = "tcp") {
  Options o = testOptions("ring");
  o.interHostTransport = between;
  o.algoForce = true;
  o.shmDisable = true;
  o.lazyConnect = lazy;
  o.socketThreads = streams;
  o.socketStripeMinBytes = 4096;
  Outcome out;
  out.results.resize(kRanks);
  out.connections.resize(kRanks);
  runThreads(kRanks, o, [&](Comm& c) {
    const int r = c.rank();
    for (std::size_t count : {std::size_t{8}, std::size_t{1000}, std::size_t{70000}}) {
      std::vector<float> in(count), res(count);
      for (std::size_t i = 0; i < count; ++i) in[i] = input(r, i);
      c.allreduce(in.data(), res.data(), count, DataType::Float32, ReduceOp::Sum);
      for (std::size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int k = 0; k < kRanks; ++k) want += input(k, i);
        if (res[i] != want) {
          ADD_FAILURE() << "rank " << r << " count " << count << " element " << i << ": " << res[i]
                        << ", expected " << want;
          break;
        }
      }
      out.results[static_cast<std::size_t>(r)].insert(
          out.results[static_cast<std::size_t>(r)].end(), res.begin(), res.end());
    }
    out.connections[static_cast<std::size_t>(r)] = c.connectionCount();
  });
  return out;
}

TEST(LazyConnect, RingAllreduceConnectsOnlyRingNeighbours) {
  for (int streams : {1, 2}) {
    SCOPED_TRACE(std::to_string(streams) + " stream(s) per peer");
    const Outcome eager = ringAllreduce(false, streams);
    const Outcome lazy = ringAllreduce(true, streams);
    for (int r = 0; r < kRanks; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      EXPECT_EQ(eager.connections[ur], static_cast<std::size_t>((kRanks - 1) * streams))
          << "rank " << r;
      EXPECT_LE(lazy.connections[ur], static_cast<std::size_t>(2 * streams)) << "rank " << r;
      EXPECT_GE(lazy.connections[ur], 2u) << "rank " << r;
      EXPECT_EQ(lazy.results[ur], eager.results[ur]) << "rank " << r;
    }
  }
}

TEST(LazyConnect, RingAllreduceOverUcxConnectsOnlyRingNeighbours) {
  if (!transport::ucxAvailable()) GTEST_SKIP() << transport::ucxUnavailableReason();
  useUcxTls("tcp");
  const Outcome eager = ringAllreduce(false, 1, "ucx");
  const Outcome lazy = ringAllreduce(true, 1, "ucx");
  for (int r = 0; r < kRanks; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    EXPECT_EQ(eager.connections[ur], static_cast<std::size_t>(kRanks - 1)) << "rank " << r;
    EXPECT_EQ(lazy.connections[ur], 2u) << "rank " << r;
    EXPECT_EQ(lazy.results[ur], eager.results[ur]) << "rank " << r;
  }
}

}  // namespace
}  // namespace braid::test
