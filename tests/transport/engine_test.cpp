// The message engine's Inbox (src/transport/engine.hpp) on its own, for what the conformance
// suite reaches only through one transport: a payload that travels apart from its header (UCX's
// rendezvous) leaves the inbox through rxDetach() and rxPark(), and the inbox keeps matching.
#include "transport/engine.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace braid::transport::engine {
namespace {

// Records what the inbox finishes, in order.
class Sink final : public CompletionSink {
 public:
  std::vector<std::pair<Request*, State>> finished;
  std::vector<std::pair<const Request*, std::string>> kept;  // finishAlone's errors, in order
  void finish(Request& req, State state, bool) override {
    finished.emplace_back(&req, state);
    req.state.store(state);
  }
  void finishAlone(Request& req, Error error) override {
    EXPECT_EQ(error.code(), ErrorCode::Mismatch);
    kept.emplace_back(&req, error.what());
    finish(req, State::Failed, false);
  }
  std::string tagText(std::uint64_t tag) const override { return "tag " + std::to_string(tag); }
  void mismatchSeen(int, std::uint64_t, std::uint64_t) const override {}
};

void armRecv(Request& r, std::vector<std::uint8_t>& buf, std::uint64_t tag) {
  arm(r, false, 1, buf.data(), buf.size(), tag);
}

// Delivers a whole small payload into what the inbox is receiving.
void deliverSmall(Inbox& in, const std::vector<std::uint8_t>& bytes) {
  std::uint8_t* dst = in.rxSpace(bytes.size());
  ASSERT_NE(dst, nullptr);
  if (!bytes.empty()) std::memcpy(dst, bytes.data(), bytes.size());
  in.rxCommit(bytes.size());
  in.rxComplete();
}

TEST(EngineInbox, ADetachedPayloadLeavesTheInboxFreeForTheNextHeader) {
  Sink sink;
  Inbox in(0, 1, "rank 1", sink);
  std::vector<std::uint8_t> big(100000), small(5);
  Request a, b;
  armRecv(a, big, 1);
  armRecv(b, small, 2);
  std::optional<Error> err;
  ASSERT_EQ(in.post(a, err), Inbox::Posted::Queued);
  ASSERT_EQ(in.post(b, err), Inbox::Posted::Queued);
  ASSERT_EQ(in.arrive(1, big.size(), SIZE_MAX, err), Inbox::Arrival::Receiving);
  EXPECT_EQ(in.rxDetach(), &a);
  EXPECT_FALSE(in.receiving());
  // The next message matches the next receive while the first payload is still elsewhere.
  ASSERT_EQ(in.arrive(2, small.size(), SIZE_MAX, err), Inbox::Arrival::Receiving);
  EXPECT_EQ(in.receivingRequest(), &b);
  deliverSmall(in, {1, 2, 3, 4, 5});
  ASSERT_EQ(sink.finished.size(), 1u);
  EXPECT_EQ(sink.finished[0].first, &b);
  EXPECT_EQ(small, (std::vector<std::uint8_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(a.state.load(), State::Pending);  // the transport finishes it
}

TEST(EngineInbox, ParkedP2PMessagesGoToTheirReceivesInOrderWithNothingCopied) {
  Sink sink;
  Inbox in(0, 1, "rank 1", sink);
  const std::uint64_t t7 = kP2PTagBit | 7, t8 = kP2PTagBit | 8;
  std::optional<Error> err;
  // Two large messages of one tag, parked (their payloads stay with the transport), and a small
  // one of another tag held with its bytes.
  for (std::size_t bytes : {std::size_t{10000}, std::size_t{20000}}) {
    ASSERT_EQ(in.arrive(t7, bytes, SIZE_MAX, err), Inbox::Arrival::Receiving);
    EXPECT_EQ(in.receivingRequest(), nullptr);
    in.rxPark();
    EXPECT_FALSE(in.receiving());
  }
  ASSERT_EQ(in.arrive(t8, 3, SIZE_MAX, err), Inbox::Arrival::Receiving);
  deliverSmall(in, {7, 8, 9});
  const std::string held = in.heldText("rank 1");
  EXPECT_NE(held.find("(10000 bytes) tag " + std::to_string(t7) + " (20000 bytes)"),
            std::string::npos)
      << held;

  std::vector<std::uint8_t> x(10000, 0xEE), y(20000, 0xEE), z(3);
  Request rx, ry, rz;
  armRecv(rz, z, t8);
  EXPECT_EQ(in.post(rz, err), Inbox::Posted::Done);
  EXPECT_EQ(z, (std::vector<std::uint8_t>{7, 8, 9}));
  armRecv(rx, x, t7);
  ASSERT_EQ(in.post(rx, err), Inbox::Posted::Receiving);  // the first of tag 7: 10000 bytes
  EXPECT_EQ(in.rxDetach(), &rx);
  EXPECT_EQ(rx.progress, 0u);
  EXPECT_EQ(x, std::vector<std::uint8_t>(10000, 0xEE));  // nothing written
  armRecv(ry, y, t7);
  ASSERT_EQ(in.post(ry, err), Inbox::Posted::Receiving);  // then the 20000-byte one
  EXPECT_EQ(in.rxDetach(), &ry);
  EXPECT_EQ(in.heldText("rank 1"), "");
  ASSERT_EQ(sink.finished.size(), 1u);  // only the small one
}

TEST(EngineInbox, AReceiveOfAnotherSizeThanAParkedMessageFailsAloneAndTheMessageStays) {
  Sink sink;
  Inbox in(0, 1, "rank 1", sink);
  const std::uint64_t t = kP2PTagBit | 3;
  std::optional<Error> err;
  ASSERT_EQ(in.arrive(t, 50000, SIZE_MAX, err), Inbox::Arrival::Receiving);
  in.rxPark();
  std::vector<std::uint8_t> buf(999), right(50000);
  Request r, r2;
  armRecv(r, buf, t);
  ASSERT_EQ(in.post(r, err), Inbox::Posted::Failed);
  EXPECT_FALSE(err);  // the stream is fine
  ASSERT_EQ(sink.finished.size(), 1u);
  EXPECT_EQ(sink.finished[0], std::make_pair(&r, State::Failed));
  ASSERT_EQ(sink.kept.size(), 1u);
  EXPECT_EQ(sink.kept[0].first, &r);
  EXPECT_NE(sink.kept[0].second.find("rank 0 expected tag " + std::to_string(t) +
                                     " (999 bytes) from rank 1 but received tag " +
                                     std::to_string(t) + " (50000 bytes)"),
            std::string::npos)
      << sink.kept[0].second;
  // The message waits for a receive of its size.
  EXPECT_NE(in.heldText("rank 1").find("(50000 bytes)"), std::string::npos);
  armRecv(r2, right, t);
  ASSERT_EQ(in.post(r2, err), Inbox::Posted::Receiving);
  EXPECT_EQ(in.rxDetach(), &r2);
  EXPECT_EQ(in.heldText("rank 1"), "");
}

TEST(EngineInbox, AP2PMessageFailsPostedReceivesOfAnotherSizeAndFillsTheNextOfItsSize) {
  Sink sink;
  Inbox in(0, 1, "rank 1", sink);
  const std::uint64_t t = kP2PTagBit | 4, u = kP2PTagBit | 5;
  std::vector<std::uint8_t> small(2), other(3), right(3, 0xEE);
  Request a, b, c;
  armRecv(a, small, t);  // another size: fails
  armRecv(b, other, u);  // another tag: untouched
  armRecv(c, right, t);  // takes the message
  std::optional<Error> err;
  ASSERT_EQ(in.post(a, err), Inbox::Posted::Queued);
  ASSERT_EQ(in.post(b, err), Inbox::Posted::Queued);
  ASSERT_EQ(in.post(c, err), Inbox::Posted::Queued);
  ASSERT_EQ(in.arrive(t, 3, SIZE_MAX, err), Inbox::Arrival::Receiving);
  EXPECT_FALSE(err);
  EXPECT_EQ(in.receivingRequest(), &c);
  deliverSmall(in, {4, 5, 6});
  EXPECT_EQ(right, (std::vector<std::uint8_t>{4, 5, 6}));
  ASSERT_EQ(sink.finished.size(), 2u);
  EXPECT_EQ(sink.finished[0], std::make_pair(&a, State::Failed));
  EXPECT_EQ(sink.finished[1], std::make_pair(&c, State::Done));
  ASSERT_EQ(sink.kept.size(), 1u);
  EXPECT_EQ(sink.kept[0].first, &a);
  EXPECT_EQ(in.firstPosted(), &b);
  // With no receive of its size left, the next message of the tag fails none and is held.
  Request d;
  armRecv(d, small, t);
  ASSERT_EQ(in.post(d, err), Inbox::Posted::Queued);
  ASSERT_EQ(in.arrive(t, 7, SIZE_MAX, err), Inbox::Arrival::Receiving);
  EXPECT_EQ(in.receivingRequest(), nullptr);  // held aside, d failed
  deliverSmall(in, {1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(d.state.load(), State::Failed);
  EXPECT_NE(in.heldText("rank 1").find("(7 bytes)"), std::string::npos);
}

TEST(EngineInbox, ACollectiveReceiveOfAnotherSizeIsAMismatchOfTheStream) {
  Sink sink;
  Inbox in(0, 1, "rank 1", sink);
  std::vector<std::uint8_t> buf(8);
  Request r;
  armRecv(r, buf, 9);
  std::optional<Error> err;
  ASSERT_EQ(in.post(r, err), Inbox::Posted::Queued);
  ASSERT_EQ(in.arrive(9, 16, SIZE_MAX, err), Inbox::Arrival::Mismatch);
  ASSERT_TRUE(err);
  EXPECT_NE(std::string(err->what())
                .find("expected tag 9 (8 bytes) from rank 1 but received tag 9 "
                      "(16 bytes)"),
            std::string::npos)
      << err->what();
  EXPECT_TRUE(sink.finished.empty());  // the transport fails the peer, and with it r
  EXPECT_TRUE(sink.kept.empty());
}

// A request's own error is thrown for that request until a request at its address is
// published again; a peer's or the transport's error is thrown as before.
TEST(EngineErrors, AnOwnErrorBelongsToItsRequestUntilItIsPublishedAgain) {
  Engine engine(0);
  std::lock_guard<std::mutex> lk(engine.mutex());
  const std::optional<Error> peerError = Error(ErrorCode::PeerLost, "the peer is gone");
  auto thrown = [&](const Request& r) {
    try {
      engine.throwFailure(r, peerError, "rank 1");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("nothing");
  };
  Request a, b;
  engine.publishAlone(a, Error(ErrorCode::Mismatch, "a's size"));
  EXPECT_EQ(a.state.load(), State::Failed);
  EXPECT_TRUE(Engine::failedAlone(a));
  EXPECT_FALSE(Engine::failedByTransport(a));
  EXPECT_NE(thrown(a).find("a's size"), std::string::npos);
  EXPECT_NE(thrown(a).find("a's size"), std::string::npos) << "thrown again";
  engine.publish(b, State::Failed, true);  // another request: the peer's error
  EXPECT_FALSE(Engine::failedAlone(b));
  EXPECT_NE(thrown(b).find("the peer is gone"), std::string::npos);
  engine.publish(a, State::Done, false);  // a reused: its old error is gone
  engine.publish(a, State::Failed, true);
  EXPECT_FALSE(Engine::failedAlone(a));
  EXPECT_NE(thrown(a).find("the peer is gone"), std::string::npos);
}

}  // namespace
}  // namespace braid::transport::engine
