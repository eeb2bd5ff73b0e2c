// BRAID_TIMELINE: one Chrome-trace JSON file per rank, parsed here by Python's json module (what
// chrome://tracing and Perfetto load), with every operation as an "X" event holding "queued" and
// "running" children on the same lane, the algorithm and byte count in args.
#include "core/timeline.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/ranks.hpp"

namespace braid::test {
namespace {

using namespace std::chrono_literals;

TEST(Timeline, FileNamesPerRank) {
  using core::Timeline;
  EXPECT_EQ(Timeline::expandPath("/tmp/t.json", 3, "0"), "/tmp/t.rank3.json");
  EXPECT_EQ(Timeline::expandPath("/tmp/t", 3, "0"), "/tmp/t.rank3");
  EXPECT_EQ(Timeline::expandPath("/tmp/t.json", 1, "0/s1c2"), "/tmp/t.comm0-s1c2.rank1.json");
  EXPECT_EQ(Timeline::expandPath("/tmp/r%r-c%c-100%%.json", 2, "1"), "/tmp/r2-c1-100%.json");
  EXPECT_EQ(Timeline::expandPath("/tmp/p%p.%r", 0, "0"),
            "/tmp/p" + std::to_string(::getpid()) + ".0");
}

// Checks one rank's file; prints what is wrong and exits non-zero.
constexpr const char* kChecker = R"PY(
import json, sys
path, rank, expect_ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
events = json.load(open(path))
assert isinstance(events, list), "not a JSON array"
meta = [e for e in events if e["ph"] == "M"]
assert any(e["name"] == "process_name" and e["pid"] == rank for e in meta), "no process_name"
xs = [e for e in events if e["ph"] == "X"]
for e in xs:
    assert e["pid"] == rank and e["dur"] >= 0 and e["ts"] > 1e15, e
ops = [e for e in xs if e["cat"] == "op"]
phases = [e for e in xs if e["cat"] == "phase"]
assert len(ops) == expect_ops, (len(ops), expect_ops)
eps = 0.002
for op in ops:
    a = op["args"]
    for k in ("call", "seq", "bytes", "algorithm", "state"):
        assert k in a, (k, op)
    assert a["state"] == "done", op
    end = op["ts"] + op["dur"]
    kids = [p for p in phases if p["tid"] == op["tid"] and p["ts"] >= op["ts"] - eps
            and p["ts"] + p["dur"] <= end + eps]
    q = [p for p in kids if p["name"] == "queued"]
    r = [p for p in kids if p["name"] == "running"]
    assert len(q) >= 1 and len(r) >= 1, ("phases not nested in", op, kids)
    q, r = q[0], r[0]
    assert abs(q["ts"] - op["ts"]) <= eps and abs(r["ts"] + r["dur"] - end) <= eps, (op, q, r)
    assert q["ts"] + q["dur"] <= r["ts"] + eps, (q, r)
    assert r["args"]["bytes"] == a["bytes"] and r["args"]["algorithm"] == a["algorithm"], (r, a)
    if not op["name"].startswith(("send", "recv")):
        assert a["algorithm"] != "-", op
# Ops of one lane never overlap, so every event of a lane nests.
by_lane = {}
for op in ops:
    by_lane.setdefault(op["tid"], []).append(op)
for lane, lst in by_lane.items():
    lst.sort(key=lambda e: e["ts"])
    for x, y in zip(lst, lst[1:]):
        assert x["ts"] + x["dur"] <= y["ts"] + eps, ("overlap on lane", lane, x, y)
names = sorted(op["name"].split(" ")[0] for op in ops)
print(path, len(ops), "ops OK:", ", ".join(sorted(set(names))))
)PY";

TEST(Timeline, EveryOperationWithNestedPhasesPerRank) {
  char tmpl[] = "/tmp/braid-timeline-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  Options o = testOptions();
  o.timeline = dir + "/trace.json";
  o.flightSignal = false;
  constexpr int kRanks = 3;
  runThreads(kRanks, o, [](Comm& c) {
    std::vector<float> a(100, 1.0f), b(300);
    c.allreduce(a.data(), a.data(), 100, DataType::Float32, ReduceOp::Sum);  // 1
    c.allgather(a.data(), b.data(), 100, DataType::Float32);                 // 2
    c.broadcast(a.data(), 10, DataType::Float32, 2);                         // 3
    std::vector<Work> ws;
    for (int i = 0; i < 3; ++i)  // 4-6, queued
      ws.push_back(c.allreduceAsync(a.data(), a.data(), 33, DataType::Float32, ReduceOp::Max));
    for (auto& w : ws) w.wait();
    const int next = (c.rank() + 1) % kRanks, prev = (c.rank() + kRanks - 1) % kRanks;
    Work r = c.recvAsync(b.data(), 7, DataType::Float32, prev);  // 7
    c.send(a.data(), 7, DataType::Float32, next);                // 8
    r.wait();
    c.barrier();  // 9
  });
  const std::string python =
      ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  const std::string script = dir + "/check.py";
  FILE* f = std::fopen(script.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(kChecker, f);
  std::fclose(f);
  for (int r = 0; r < kRanks; ++r) {
    const std::string file = dir + "/trace.rank" + std::to_string(r) + ".json";
    const std::string cmd = python + " " + script + " " + file + " " + std::to_string(r) + " 9";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    ::unlink(file.c_str());
  }
  ::unlink(script.c_str());
  ::rmdir(dir.c_str());
}

TEST(Timeline, UnwritablePathIsNamed) {
  try {
    core::Timeline t("/nonexistent-dir/x.rank0.json", 0, "0", core::Clock::now());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("BRAID_TIMELINE"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.rank0.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace braid::test
