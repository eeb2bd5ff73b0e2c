// The straggler analysis on made-up stamps (core/straggler.hpp): the last arrival is named
// whatever offsets the ranks' clocks have, its lateness is its arrival minus the median of the
// others', collectives
// some rank's window lost are counted as missed, nothing is analyzed twice; the store record's
// encoding; the OpenMetrics rendering against the strict reader (harness/openmetrics.hpp).
#include "core/straggler.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "core/flight_recorder.hpp"
#include "core/metrics.hpp"
#include "harness/openmetrics.hpp"

namespace braid::test {
namespace {

using core::StragglerStats;
using core::StragglerVerdict;
using core::WaitSample;
using Windows = std::vector<std::optional<std::vector<WaitSample>>>;

TEST(Straggler, EncodingRoundTripsAndRejectsGarbage) {
  std::vector<WaitSample> s = {{0, 5, 6, 1}, {7, -3, 4, 2}, {~std::uint64_t{0}, 1LL << 40, -1, 9}};
  const auto bytes = core::encodeWaits(42, s);
  const auto d = core::decodeWaits(bytes);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->first, 42u);
  ASSERT_EQ(d->second.size(), 3u);
  for (std::size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(d->second[i].seq, s[i].seq);
    EXPECT_EQ(d->second[i].startNs, s[i].startNs);
    EXPECT_EQ(d->second[i].finishNs, s[i].finishNs);
    EXPECT_EQ(d->second[i].coll, s[i].coll);
  }
  EXPECT_FALSE(core::decodeWaits({}));
  auto cut = bytes;
  cut.pop_back();
  EXPECT_FALSE(core::decodeWaits(cut));
  auto bad = bytes;
  bad[0] ^= 1;
  EXPECT_FALSE(core::decodeWaits(bad));
  EXPECT_TRUE(core::decodeWaits(core::encodeWaits(0, {})));
}

constexpr auto kAllreduce = static_cast<std::uint8_t>(Collective::Allreduce);
constexpr auto kBroadcast = static_cast<std::uint8_t>(Collective::Broadcast);

// Every world size, every rank's clock off by up to +-1000 s: at each collective a random rank
// arrives late by a random amount (true time); synchronizing collectives end on every rank
// within 20 ns, broadcasts end on the root early. The verdicts are computed here from the true
// arrivals.
TEST(Straggler, NamesTheLastArrivalWhateverTheClocksSay) {
  std::mt19937_64 rng(7);
  for (int n : {2, 3, 4, 5, 7, 8}) {
    std::vector<std::int64_t> clockOffset(n);
    for (int r = 0; r < n; ++r)
      clockOffset[r] = static_cast<std::int64_t>(rng() % 2'000'000'000'000ull) - 1'000'000'000'000;
    StragglerStats stats(n);
    Windows w(n, std::vector<WaitSample>{});
    std::vector<int> expectLast;
    std::vector<std::int64_t> expectLate;
    std::int64_t now = 5'000'000'000;  // true time, ns
    for (std::uint64_t seq = 0; seq < 60; ++seq) {
      const bool bcast = seq % 3 == 2;
      const int last = static_cast<int>(rng() % n);
      std::vector<std::int64_t> arrive(n);
      for (int r = 0; r < n; ++r)
        arrive[r] = now + static_cast<std::int64_t>(rng() % 200) +
                    (r == last ? 3000 + static_cast<std::int64_t>(rng() % 5000) : 0);
      std::vector<std::int64_t> others;
      for (int r = 0; r < n; ++r)
        if (r != last) others.push_back(arrive[r]);
      std::sort(others.begin(), others.end());
      expectLast.push_back(last);
      expectLate.push_back(arrive[last] - others[others.size() / 2]);
      const std::int64_t end = arrive[last] + 1000;
      for (int r = 0; r < n; ++r) {
        std::int64_t finish = end + static_cast<std::int64_t>(rng() % 20);
        if (bcast && r == 0) finish = arrive[0] + 10;  // the root hands its data over and leaves
        w[r]->push_back({seq, arrive[r] + clockOffset[r], finish + clockOffset[r],
                         bcast ? kBroadcast : kAllreduce});
      }
      now = end + 5000;
    }
    std::vector<StragglerVerdict> got;
    stats.analyze(w, [&](const StragglerVerdict& v) { got.push_back(v); });
    ASSERT_EQ(got.size(), 60u) << n;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].seq, i);
      EXPECT_EQ(got[i].lastRank, expectLast[i]) << n << " " << i;
      EXPECT_NEAR(static_cast<double>(got[i].lateNs), static_cast<double>(expectLate[i]), 40)
          << n << " " << i;
    }
    EXPECT_EQ(stats.analyzed(), 60u);
    EXPECT_EQ(stats.missed(), 0u);
    std::uint64_t total = 0;
    for (int r = 0; r < n; ++r) total += stats.timesLast(r);
    EXPECT_EQ(total, 60u);
    // The same windows again: nothing new.
    stats.analyze(w, [&](const StragglerVerdict&) { ADD_FAILURE() << "analyzed twice"; });
    EXPECT_EQ(stats.analyzed(), 60u);
  }
}

// One host's clock (no offsets): rank r arrives at 100 * r (rank 2 last of 3).
WaitSample at(std::uint64_t seq, int r, std::int64_t base) {
  return {seq, base + 100 * r, base + 1000, kAllreduce};
}

TEST(Straggler, CountsCollectivesAWindowLostAndWaitsForTheSlowestWindow) {
  StragglerStats stats(3);
  // Rank 1's window lost seq 2 and 3; rank 2 has only reached seq 5.
  Windows w(3, std::vector<WaitSample>{});
  for (std::uint64_t s = 0; s <= 9; ++s) {
    const std::int64_t base = 10000 * static_cast<std::int64_t>(s);
    w[0]->push_back(at(s, 0, base));
    if (s != 2 && s != 3) w[1]->push_back(at(s, 1, base));
    if (s <= 5) w[2]->push_back(at(s, 2, base));
  }
  stats.analyze(w, nullptr);
  EXPECT_EQ(stats.analyzed(), 4u);  // 0, 1, 4, 5
  EXPECT_EQ(stats.missed(), 2u);
  EXPECT_EQ(stats.timesLast(2), 4u);
  EXPECT_EQ(stats.meanLateNs(2), 200 - 100);  // the median of {0, 100} is the upper one
  EXPECT_EQ(stats.peerWaitNs(0), 4 * 200);
  EXPECT_EQ(stats.peerWaitNs(1), 4 * 100);
  EXPECT_EQ(stats.peerWaitNs(2), 0);
  // Rank 2 catches up, and is early now: rank 1 is last at 6..9, and 0..5 are not counted again.
  for (std::uint64_t s = 6; s <= 9; ++s)
    w[2]->push_back({s, 10000 * static_cast<std::int64_t>(s) - 500,
                     10000 * static_cast<std::int64_t>(s) + 1000, kAllreduce});
  stats.analyze(w, nullptr);
  EXPECT_EQ(stats.analyzed(), 8u);
  EXPECT_EQ(stats.timesLast(1), 4u);
  // An unknown window: nothing happens.
  Windows partial = w;
  partial[1].reset();
  stats.analyze(partial, nullptr);
  EXPECT_EQ(stats.analyzed(), 8u);
  const std::string report = stats.report("0");
  EXPECT_NE(report.find("8 collectives analyzed (2 left"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 2 arrived last in 4 of 8 (50.0%)"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 1 arrived last in 4 of 8"), std::string::npos) << report;
}

// Only every 4th collective is stamped (the sample): the others are not missing.
TEST(Straggler, ASampleCountsOnlyTheSampledCollectives) {
  StragglerStats stats(3, 4);
  Windows w(3, std::vector<WaitSample>{});
  for (std::uint64_t s = 0; s <= 12; s += 4)
    for (int r = 0; r < 3; ++r)
      if (!(r == 1 && s == 8)) w[r]->push_back(at(s, r, 10000 * static_cast<std::int64_t>(s)));
  stats.analyze(w, nullptr);
  EXPECT_EQ(stats.analyzed(), 3u);  // 0, 4, 12
  EXPECT_EQ(stats.missed(), 1u);    // 8: rank 1 lost it
  EXPECT_EQ(stats.timesLast(2), 3u);
}

// The flight recorder hands out the stamps of its finished, sampled collectives and shows the
// verdicts in its dump.
TEST(Straggler, FlightRecorderStampsAndVerdicts) {
  const auto origin = core::Clock::now();
  core::FlightRecorder rec(8, origin);
  rec.setPreciseEvery(2);
  for (std::uint64_t seq = 0; seq < 5; ++seq) {
    core::OpDesc d;
    d.coll = Collective::Allreduce;
    d.count = 2;
    d.seq = seq;
    const auto t0 = origin + std::chrono::microseconds(100 * seq);
    const std::uint64_t serial = rec.begin(d, 8, "ring", t0);
    rec.finished(serial, d, seq == 4 ? "failed" : nullptr, t0 + std::chrono::microseconds(7));
  }
  const std::vector<WaitSample> w = rec.waits();
  ASSERT_EQ(w.size(), 2u);  // seq 0 and 2 (4 failed; 1 and 3 not sampled)
  EXPECT_EQ(w[0].seq, 0u);
  EXPECT_EQ(w[1].seq, 2u);
  EXPECT_EQ(w[1].finishNs - w[1].startNs, 7000);
  EXPECT_EQ(w[1].coll, static_cast<std::uint8_t>(Collective::Allreduce));
  std::vector<core::Clock::time_point> started;
  rec.annotate({{2, Collective::Allreduce, 3, 1500}, {9, Collective::Allreduce, 1, 5}}, &started);
  ASSERT_EQ(started.size(), 2u);
  EXPECT_EQ(started[0], origin + std::chrono::microseconds(200));
  EXPECT_EQ(started[1], core::Clock::time_point{});  // not in the ring
  const std::string dump = rec.dump("test");
  EXPECT_NE(dump.find("op #2    allreduce"), std::string::npos) << dump;
  EXPECT_NE(dump.find("last: rank 3 (+1.5 us)"), std::string::npos) << dump;
  EXPECT_NE(dump.find("last: not exchanged yet"), std::string::npos) << dump;  // op #0
  EXPECT_EQ(dump.find("last: rank 1"), std::string::npos) << dump;
}

TEST(Metrics, RendersStrictOpenMetrics) {
  core::Metrics a("0", 1, 3), b("0/s\"1", 0, 3);
  static const char* kRing = "ring";
  a.opDone(Collective::Allreduce, kRing, 1024, 500);           // 0.5 us: first bucket
  a.opDone(Collective::Allreduce, kRing, 1024, 3'000'000);     // 3 ms
  a.opDone(Collective::Allreduce, kRing, 8, 100'000'000'000);  // 100 s: +Inf
  a.opDone(Collective::Broadcast, nullptr, 4, 1000);
  a.opFailed(Collective::Allreduce, ErrorCode::Timeout);
  StragglerStats s(3);
  Windows w(3, std::vector<WaitSample>{});
  // Rank 2 arrives 1000 ns after the others at each of 4 allreduces.
  for (std::uint64_t q = 0; q < 4; ++q)
    for (int r = 0; r < 3; ++r)
      w[r]->push_back(
          {q, r == 2 ? 1000 : 0, 2000, static_cast<std::uint8_t>(Collective::Allreduce)});
  s.analyze(w, nullptr);
  b.setStraggler(s);
  const std::string text = core::Metrics::render({&a, &b});
  OmExposition e;
  ASSERT_NO_THROW(e = parseOpenMetrics(text)) << text;
  try {
    e = parseOpenMetrics(text);
  } catch (const std::exception& ex) {
    FAIL() << ex.what() << "\n" << text;
  }
  EXPECT_EQ(e.sum("braid_operations_total", {{"collective", "allreduce"}}), 3);
  EXPECT_EQ(e.sum("braid_bytes_total", {{"rank", "1"}}), 1024 + 1024 + 8 + 4);
  EXPECT_EQ(e.sum("braid_operation_seconds_bucket", {{"collective", "allreduce"}, {"le", "1e-06"}}),
            1);
  EXPECT_EQ(
      e.sum("braid_operation_seconds_bucket", {{"collective", "allreduce"}, {"le", "0.004096"}}),
      2);
  EXPECT_EQ(e.sum("braid_operation_seconds_bucket", {{"collective", "allreduce"}, {"le", "+Inf"}}),
            3);
  EXPECT_NEAR(e.sum("braid_operation_seconds_sum", {{"collective", "allreduce"}}), 100.0030005,
              1e-9);
  EXPECT_EQ(e.sum("braid_errors_total", {{"code", "Timeout"}}), 1);
  EXPECT_EQ(e.sum("braid_straggler_rank", {{"comm", "0/s\"1"}}), 2);
  EXPECT_NEAR(e.sum("braid_straggler_lateness_seconds"), 1000e-9, 1e-15);
  EXPECT_EQ(e.sum("braid_straggler_last_total", {{"last_rank", "2"}}), 4);
  EXPECT_NEAR(e.sum("braid_peer_wait_seconds_total", {{"waiting_rank", "0"}}), 4000e-9, 1e-15);
  EXPECT_EQ(e.sum("braid_straggler_analyzed_total"), 4);
}

// What the communicator does with a finished operation (core/comm_diag.cpp, opDone): the
// common case counted in its OpCounters, the rest in its Metrics.
void finish(core::OpCounters& oc, core::Metrics& m, Collective c, const char* algorithm,
            std::uint64_t bytes, std::int64_t ns = -1) {
  if (ns >= 0 || !oc.count(c, algorithm, bytes)) m.opDone(c, algorithm, bytes, ns);
}

TEST(Metrics, CountsEveryOperationOnceWhenCollectivesChangeAlgorithm) {
  core::OpCounters oc;
  core::Metrics m("c", 0, 2, &oc);
  static const char* kRing = "ring";
  static const char* kTree = "tree";
  // allreduce: ring 3x (16 B each), tree 2x (100 B), ring again 4x (1 B), one timed tree (7 B);
  // broadcast without an algorithm name 2x; a send 5x.
  for (int i = 0; i < 3; ++i) finish(oc, m, Collective::Allreduce, kRing, 16);
  for (int i = 0; i < 2; ++i) finish(oc, m, Collective::Allreduce, kTree, 100);
  for (int i = 0; i < 4; ++i) finish(oc, m, Collective::Allreduce, kRing, 1);
  finish(oc, m, Collective::Allreduce, kTree, 7, 2000);
  for (int i = 0; i < 2; ++i) finish(oc, m, Collective::Broadcast, nullptr, 8);
  for (int i = 0; i < 5; ++i) finish(oc, m, Collective::Send, "p2p", 3);
  const OmExposition e = parseOpenMetrics(core::Metrics::render({&m}));
  const auto ops = [&](const char* coll, const char* algo) {
    return e.sum("braid_operations_total", {{"collective", coll}, {"algorithm", algo}});
  };
  const auto bytes = [&](const char* coll, const char* algo) {
    return e.sum("braid_bytes_total", {{"collective", coll}, {"algorithm", algo}});
  };
  EXPECT_EQ(ops("allreduce", "ring"), 7);
  EXPECT_EQ(bytes("allreduce", "ring"), 3 * 16 + 4 * 1);
  EXPECT_EQ(ops("allreduce", "tree"), 3);
  EXPECT_EQ(bytes("allreduce", "tree"), 2 * 100 + 7);
  EXPECT_EQ(e.sum("braid_operation_seconds_count", {{"algorithm", "tree"}}), 1);  // timed only
  EXPECT_EQ(ops("broadcast", "-"), 2);
  EXPECT_EQ(ops("send", "p2p"), 5);
  EXPECT_EQ(bytes("send", "p2p"), 15);
}

TEST(Metrics, AReaderDuringAlgorithmChangesNeverCountsAnOperationTwiceOrLosesOne) {
  core::OpCounters oc;
  core::Metrics m("c", 0, 2, &oc);
  static const char* kAlgos[] = {"a", "b", "c"};
  constexpr int kOps = 200000;
  std::atomic<int> done{0};
  std::thread writer([&] {
    for (int i = 0; i < kOps; ++i) {
      finish(oc, m, Collective::Allreduce, kAlgos[(i / 997) % 3], 1);  // a change every 997
      done.store(i + 1, std::memory_order_release);
    }
  });
  // What a read may see: every operation finished before it began, and counts that never go
  // down (a fold seen half-done would count an operation twice, then not). Not an upper bound
  // from `done`: an operation's counts may be seen before its `done` store.
  double lastOps = 0, lastBytes = 0;
  int reads = 0;
  std::string failure;
  while (failure.empty() && (done.load(std::memory_order_acquire) < kOps || reads < 3)) {
    const int before = done.load(std::memory_order_acquire);
    const OmExposition e = parseOpenMetrics(core::Metrics::render({&m}));
    const double ops = e.sum("braid_operations_total");
    const double bytes = e.sum("braid_bytes_total");  // one byte per operation
    if (ops < before || bytes < before)
      failure = "operations finished before the read are missing: " + std::to_string(ops) +
                " ops, " + std::to_string(bytes) + " bytes, " + std::to_string(before) + " done";
    else if (ops < lastOps || bytes < lastBytes)
      failure = "a counter went down: " + std::to_string(lastOps) + " -> " + std::to_string(ops) +
                " ops, " + std::to_string(lastBytes) + " -> " + std::to_string(bytes) + " bytes";
    lastOps = ops;
    lastBytes = bytes;
    ++reads;
  }
  writer.join();
  EXPECT_EQ(failure, "");
  const OmExposition end = parseOpenMetrics(core::Metrics::render({&m}));
  EXPECT_EQ(end.sum("braid_operations_total"), kOps);
  EXPECT_EQ(end.sum("braid_bytes_total"), kOps);
}

TEST(Metrics, TheStrictReaderRejectsWhatTheFormatForbids) {
  const char* bad[] = {
      "# TYPE a counter\na_total 1\n",                          // no # EOF
      "# TYPE a counter\na 1\n# EOF\n",                         // counter without _total
      "# TYPE a counter\na_total{x=\"1\",x=\"2\"} 1\n# EOF\n",  // duplicate label
      "# TYPE a counter\na_total{x=1} 1\n# EOF\n",              // unquoted
      "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\n# EOF\n",  // family split
      "# TYPE a_seconds gauge\n# UNIT a_seconds bytes\na_seconds 1\n# EOF\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 1\n"
      "# EOF\n",                                                                // not cumulative
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\nh_sum 1\n# EOF\n",  // no +Inf
      "# TYPE a gauge\na one\n# EOF\n",
      "a 1\n# EOF\n",  // no TYPE
  };
  for (const char* t : bad) EXPECT_THROW(parseOpenMetrics(t), std::runtime_error) << t;
  EXPECT_NO_THROW(parseOpenMetrics(
      "# TYPE h_seconds histogram\n# UNIT h_seconds seconds\n# HELP h_seconds x\n"
      "h_seconds_bucket{le=\"1\"} 1\nh_seconds_bucket{le=\"+Inf\"} 1\nh_seconds_count 1\n"
      "h_seconds_sum 0.5\n# EOF\n"));
}

}  // namespace
}  // namespace braid::test
