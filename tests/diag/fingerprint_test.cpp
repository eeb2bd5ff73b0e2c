// Operation fingerprints and the texts diagnosis composes: tags change with every field that
// must agree across ranks (collective, dtype, op, root, sequence number, count, communicator),
// never with per-rank counts that may legitimately differ, and decode back to what the peer
// called; the mismatch and timeout messages have their documented form.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/diagnosis.hpp"
#include "core/tag.hpp"

namespace braid::test {
namespace {

using core::OpDesc;

std::uint64_t tagOf(Collective c, DataType t, ReduceOp op, int root, std::uint64_t seq,
                    std::uint64_t count, const std::string& comm) {
  return core::collectiveTag(c, t, op, root, seq, core::countKey(c, count, {}),
                             core::commIdHash(comm));
}

TEST(Fingerprint, EveryFieldThatMustAgreeChangesTheTag) {
  const auto base =
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0, 57, 1024, "0");
  EXPECT_EQ(base, tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0, 57, 1024, "0"));
  std::set<std::uint64_t> tags = {
      base,
      tagOf(Collective::Allgather, DataType::Float32, ReduceOp::Sum, 0, 57, 1024, "0"),
      tagOf(Collective::Allreduce, DataType::Float64, ReduceOp::Sum, 0, 57, 1024, "0"),
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Max, 0, 57, 1024, "0"),
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 1, 57, 1024, "0"),
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 4096, 57, 1024, "0"),
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0, 58, 1024, "0"),
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0, 57 + (1u << 20), 1024, "0"),
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0, 57, 1023, "0"),
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0, 57, 1024, "1"),
      tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0, 57, 1024, "0/s1c0"),
  };
  EXPECT_EQ(tags.size(), 11u);
  for (auto t : tags) EXPECT_EQ(t >> 63, 0u) << "collective tags never look point-to-point";
  // Counts closer than 2^20 always give different tags (their low bits enter unhashed).
  std::set<std::uint64_t> byCount;
  for (std::uint64_t n = 0; n < 4096; ++n)
    byCount.insert(tagOf(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0, 3, n, "0"));
  EXPECT_EQ(byCount.size(), 4096u);
  // The measurement switch drops exactly the fingerprint.
  const auto plain = core::collectiveTag(Collective::Allreduce, DataType::Float32, ReduceOp::Sum, 0,
                                         57, 1024, core::commIdHash("0"), false);
  EXPECT_EQ(plain, base & ((1ull << 43) - 1));
}

// Every dtype and op (the 5-bit dtype and 4-bit op fields hold all of them) encodes and
// decodes, changes the tag, and leaves the other fields intact.
TEST(Fingerprint, EveryDtypeAndOpEncodesAndDecodes) {
  std::set<std::uint64_t> tags;
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto dt = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      for (std::uint64_t seq : {0ull, 5ull, 131071ull, 131072ull, 987654321ull}) {
        const auto tag = tagOf(Collective::ReduceScatter, dt, op, 4095, seq, 77, "0");
        const core::TagFields f = core::decodeTag(tag);
        EXPECT_FALSE(f.p2p);
        EXPECT_EQ(f.coll, Collective::ReduceScatter);
        EXPECT_EQ(f.dtype, dt) << toString(dt);
        EXPECT_EQ(f.op, op) << toString(op);
        EXPECT_EQ(f.rootLow, 4095u);
        EXPECT_EQ(core::nearestSeq(f.seqLow, seq + 3), seq);
        EXPECT_EQ(tag >> 63, 0u);
        if (seq == 5) tags.insert(tag);
      }
      const core::TagFields p = core::decodeTag(core::p2pTag(dt, 0xffffffffu));
      EXPECT_TRUE(p.p2p);
      EXPECT_EQ(p.dtype, dt);
      EXPECT_EQ(p.userTag, 0xffffffffu);
      EXPECT_EQ(core::describeTag(tagOf(Collective::Allreduce, dt, op, 0, 9, 4, "0")),
                std::string("allreduce(") + toString(dt) + ", " + toString(op) + ") op #9");
    }
  }
  EXPECT_EQ(tags.size(), static_cast<std::size_t>(kNumDataTypes * kNumReduceOps));
}

TEST(Fingerprint, VariableCountsKeyOnlyWhatEveryRankAgreesOn) {
  const std::vector<std::size_t> a = {3, 1, 4, 1, 5}, b = {3, 1, 4, 1, 6}, c = {3, 1, 4, 1};
  EXPECT_EQ(core::countKey(Collective::Allgatherv, 0, a),
            core::countKey(Collective::Allgatherv, 0, a));
  EXPECT_NE(core::countKey(Collective::Allgatherv, 0, a),
            core::countKey(Collective::Allgatherv, 0, b));
  EXPECT_NE(core::countKey(Collective::ReduceScatterv, 0, a),
            core::countKey(Collective::ReduceScatterv, 0, c));
  // alltoallv: per-rank counts legitimately differ, so they are not part of the fingerprint.
  EXPECT_EQ(core::countKey(Collective::Alltoallv, 0, a),
            core::countKey(Collective::Alltoallv, 0, b));
  EXPECT_EQ(core::countKey(Collective::Allreduce, 77, {}), 77u);
}

TEST(Fingerprint, TagsDecodeToWhatThePeerCalled) {
  for (std::uint64_t seq : {0ull, 1ull, 57ull, 1048575ull, 1048576ull, 123456789ull}) {
    const auto t = tagOf(Collective::Broadcast, DataType::BFloat16, ReduceOp::Min, 3, seq, 8, "0");
    const core::TagFields f = core::decodeTag(t);
    EXPECT_FALSE(f.p2p);
    EXPECT_EQ(f.coll, Collective::Broadcast);
    EXPECT_EQ(f.dtype, DataType::BFloat16);
    EXPECT_EQ(f.op, ReduceOp::Min);
    EXPECT_EQ(f.rootLow, 3u);
    EXPECT_EQ(core::nearestSeq(f.seqLow, seq), seq);
    EXPECT_EQ(core::nearestSeq(f.seqLow, seq + 5), seq);
    if (seq >= 5) {
      EXPECT_EQ(core::nearestSeq(f.seqLow, seq - 5), seq);
    }
  }
  const core::TagFields p = core::decodeTag(core::p2pTag(DataType::Int32, 99));
  EXPECT_TRUE(p.p2p);
  EXPECT_EQ(p.userTag, 99u);
  EXPECT_EQ(core::describeTag(core::p2pTag(DataType::Int32, 99)), "send/recv(int32, tag 99)");
  EXPECT_EQ(
      core::describeTag(tagOf(Collective::Reduce, DataType::Float32, ReduceOp::Max, 2, 9, 4, "0")),
      "reduce(fp32, max, root 2) op #9");
}

OpDesc desc(Collective c, std::uint64_t count, std::uint64_t seq, DataType t = DataType::Float32) {
  OpDesc d;
  d.coll = c;
  d.dtype = t;
  d.count = count;
  d.countKey = core::countKey(c, count, {});
  d.seq = seq;
  return d;
}

TEST(DiagnosisText, MismatchMessageHasTheDocumentedForm) {
  core::RankReport peer;
  peer.rank = 1;
  peer.failed = true;
  peer.recent = {desc(Collective::Allreduce, 1024, 56), desc(Collective::Allgather, 1024, 57)};
  const auto tag = tagOf(Collective::Allgather, DataType::Float32, ReduceOp::Sum, 0, 57, 1024, "0");
  std::uint64_t seq = 0;
  const std::string call = core::peerCallText(tag, 57, peer, &seq);
  EXPECT_EQ(seq, 57u);
  EXPECT_EQ(core::mismatchMessage(1, call, seq, 0, desc(Collective::Allreduce, 1024, 57), "0"),
            "rank 1 called allgather(fp32, count=1024) where rank 0 called allreduce(fp32, "
            "count=1024) at op #57 of communicator 0");
  // Without the peer's report the tag still names its collective and dtype.
  EXPECT_EQ(core::peerCallText(tag, 57, std::nullopt, nullptr),
            "allgather(fp32, count not reported)");
  // Skewed sequence numbers are said as such; differing reduction ops are shown.
  OpDesc mine = desc(Collective::Allreduce, 8, 5);
  OpDesc theirs = mine;
  theirs.op = ReduceOp::Max;
  EXPECT_EQ(core::mismatchMessage(2, core::callText(theirs), 6, 0, mine, "0/s1c0"),
            "rank 2 called allreduce(fp32, count=8) as its op #6 where rank 0 called "
            "allreduce(fp32, count=8, op=sum) at op #5 of communicator 0/s1c0");
}

TEST(DiagnosisText, TimeoutMessageNamesTheRanksThatHaveNotReachedTheOp) {
  core::Reports reports(4);
  core::RankReport r1;
  r1.rank = 1;
  r1.any = true;
  r1.at = desc(Collective::Allreduce, 1024, 57);
  r1.state = core::OpState::Running;
  reports[1] = r1;
  core::RankReport r2;
  r2.rank = 2;
  r2.any = true;
  r2.at = desc(Collective::Broadcast, 8, 55);
  r2.state = core::OpState::Running;
  reports[2] = r2;
  EXPECT_EQ(core::timeoutMessage(desc(Collective::Allreduce, 1024, 57), 0, 4,
                                 std::chrono::milliseconds(3000), reports),
            "allreduce #57 timed out after 3000 ms on rank 0: ranks 2, 3 have not reached it "
            "(rank 2 is at op #55 broadcast; rank 3 did not report)");
  reports[3] = r1;
  reports[3]->rank = 3;
  reports[2]->at.seq = 58;
  EXPECT_EQ(core::timeoutMessage(desc(Collective::Allreduce, 1024, 57), 0, 4,
                                 std::chrono::milliseconds(3000), reports),
            "allreduce #57 timed out after 3000 ms on rank 0: every other rank reached it");
  core::Reports two(2);
  EXPECT_EQ(core::timeoutMessage(desc(Collective::Barrier, 0, 0), 1, 2,
                                 std::chrono::milliseconds(10), two),
            "barrier #0 timed out after 10 ms on rank 1: rank 0 has not reached it (rank 0 did "
            "not report)");
}

TEST(DiagnosisText, ReportsSurviveTheStore) {
  core::RankReport r;
  r.rank = 3;
  r.failed = true;
  r.error = "Mismatch";
  r.any = true;
  r.at = desc(Collective::Allgatherv, 12, 9, DataType::Int64);
  r.at.countKey = 0xabcdef12345ull;
  r.state = core::OpState::Failed;
  r.forMs = 12.5;
  r.mismatch = true;
  r.mismatchPeer = 1;
  r.receivedTag = 0xfedcba9876543210ull;
  r.mismatchMine = desc(Collective::Reduce, 4, 9);
  r.mismatchMine.root = 2;
  r.recent = {desc(Collective::Barrier, 0, 7), r.at};
  r.lostPeer = 5;
  const auto back = core::decodeReport(core::encodeReport(r));
  ASSERT_TRUE(back);
  EXPECT_EQ(core::encodeReport(*back), core::encodeReport(r));
  EXPECT_EQ(back->mismatchMine.root, 2);
  EXPECT_EQ(back->receivedTag, r.receivedTag);
  EXPECT_EQ(back->lostPeer, 5);
  // A report without the line (none found gone, or an older braid) decodes with -1.
  r.lostPeer = -1;
  EXPECT_EQ(core::decodeReport(core::encodeReport(r))->lostPeer, -1);
  EXPECT_FALSE(core::decodeReport("braid-diag 1\nrank 1\nlost -2\n"));
  EXPECT_FALSE(core::decodeReport("garbage"));
  EXPECT_FALSE(core::decodeReport("braid-diag 1\nat 99 0 0 0 0 0 0 0 0 0 0\n"));
}

TEST(DiagnosisText, CallTexts) {
  OpDesc d = desc(Collective::Broadcast, 8, 1);
  d.root = 3;
  EXPECT_EQ(core::callText(d), "broadcast(fp32, count=8, root=3)");
  EXPECT_EQ(core::callText(desc(Collective::Barrier, 0, 1)), "barrier()");
  OpDesc s;
  s.coll = Collective::Send;
  s.dtype = DataType::Int8;
  s.count = 4;
  s.peer = 2;
  s.userTag = 7;
  EXPECT_EQ(core::callText(s), "send(int8, count=4, to rank 2, tag 7)");
  OpDesc v = desc(Collective::Allgatherv, 30, 2);
  v.countKey = 0x123456789ull;
  EXPECT_EQ(core::callText(v), "allgatherv(fp32, total count=30, counts hash=456789)");
}

}  // namespace
}  // namespace braid::test
