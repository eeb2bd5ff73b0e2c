// One TCP connection of the transport: framing, matching of incoming frames to posted receives,
// and the failure of everything in flight when the connection breaks.
//
// A frame is a 24-byte header {tag, bytes, lane} (little-endian) followed by the payload. Sends
// are queued in posting order and written with one sendmsg of header + payload (several queued
// frames batched), at most 4 MiB per call, or 256 KiB while the connection also receives (a
// long call holds the socket's lock, which stalls the other direction: tcp_connection.cpp).
// Incoming bytes land in a 16 KiB staging buffer until a header is complete; the header is
// matched against the posted receives, and the payload goes to the matched request: what is
// already staged is copied, the rest is read straight into the user buffer. So a burst of
// small frames costs one recv, and a large payload is not copied twice.
//
// Matching is the engine's (engine.hpp, Inbox), per lane (the communicator's, when several
// share the connection): a non-P2P frame must match the first posted non-P2P receive of its lane
// exactly (tag and size, else Error(Mismatch) fails the connection); if none is posted the
// stream stalls (EPOLLIN off) while no receive at all is posted, and the frame is held aside
// (copied into a heap buffer) as soon as one is, so that it never stands between a waiting
// receive and its message. A P2P frame (kP2PTagBit) goes to the first posted receive of its
// lane and tag, else into a heap buffer held until a receive of that tag is posted.
//
// A header whose byte count is all ones (kControlFrameBytes, more than any memory) is a control
// frame with no payload: tag kLaneDestroyed or kLaneAborted says that the sender's communicator
// on that lane is gone (sendLaneGone, from the transport's closeLane / abortLane). It follows
// every frame the sender posted on the lane before, so when it arrives nothing more will come:
// the receives of that lane posted to the sender fail, and so does every later send or receive
// of the lane to it (PeerLost naming the sender and why; peerLaneError), instead of waiting for
// the timeout. Messages of the lane that arrived before it stay receivable.
#pragma once

#include <braid/error.hpp>
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/engine.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/transport.hpp"

namespace braid::transport::tcp {

/// A control frame's byte count (no payload follows); its tag says what it is.
inline constexpr std::uint64_t kControlFrameBytes = ~std::uint64_t{0};
/// Control frame tags: the sender's communicator on the frame's lane was destroyed / aborted.
inline constexpr std::uint64_t kLaneDestroyed = 1;
inline constexpr std::uint64_t kLaneAborted = 2;
/// Request::aux bit of a connection's own control frame (the transport's bits are the low ones).
inline constexpr std::size_t kAuxControlFrame = std::size_t{1} << 63;

/// A frame header on the wire: u64 tag, u64 payload bytes, u64 lane, little-endian.
inline constexpr std::size_t kFrameHeaderBytes = 24;
struct FrameHeader {
  std::uint64_t tag = 0;
  std::uint64_t bytes = 0;
  std::uint64_t lane = 0;
};
FrameHeader decodeFrameHeader(std::span<const std::uint8_t, kFrameHeaderBytes> in) noexcept;
void encodeFrameHeader(const FrameHeader& h, std::uint8_t* out) noexcept;
/// The largest P2P payload a connection holds before its receive is posted: this host's
/// physical memory. A header announcing more is corrupt (or hostile) and fails the connection
/// instead of making the process allocate it.
std::uint64_t maxHeldFrameBytes() noexcept;

/// What a connection reports to its transport (engine.hpp), with the transport's lock held.
class CompletionSink : public engine::CompletionSink {
 public:
  /// The connection failed with `error` (after every request on it was finished). Default:
  /// nothing; a striped transport uses it to fail its other streams (tcp_streams.hpp).
  virtual void connectionFailed(const Error& error) { (void)error; }
  /// Whether frames of `lane` are to be dropped (its communicator is gone on this rank).
  virtual bool laneClosed(std::uint64_t lane) const {
    (void)lane;
    return false;
  }

 protected:
  ~CompletionSink() = default;
};

/// One peer's socket and everything in flight on it. Not thread-safe: the transport calls it
/// with its lock held. The socket is registered in the transport's epoll set with the peer's
/// rank as event data.
class Connection {
 public:
  Connection() = default;
  /// `description` is "rank P (host:port)". Without a socket (this rank itself) only
  /// description() is used.
  Connection(int selfRank, int peer, std::string description, Fd fd, int epollFd,
             CompletionSink& sink);

  const std::string& description() const { return inbox_.description(); }
  /// Set once the connection failed; every request on it failed with this error.
  const std::optional<Error>& error() const { return error_; }

  /// Queues a send; if nothing is queued before it, writes what the socket takes now.
  void postSend(Request& req);
  /// Takes a held P2P message if one matches, else queues the receive; then reads what the
  /// socket has.
  void postRecv(Request& req);
  /// Reacts to epoll readiness.
  void handleEvents(std::uint32_t events);
  /// The transport failed: closes the socket and fails every request (not a connection error).
  void abandon();
  /// A lazy transport's connection: whether it has its socket yet.
  bool connected() const { return static_cast<bool>(fd_); }
  /// Gives a connection made without a socket its socket (and the peer's "rank P (host:port)"),
  /// then moves what was queued meanwhile.
  void attach(Fd fd, std::string description);
  /// Fails the connection before it had a socket (the dial failed): every request fails with
  /// `error` as after a lost connection.
  void failUnconnected(Error error) { fail(std::move(error)); }
  /// Fails the connection with `error` (every request on it fails with it; the peer sees the
  /// connection lost).
  void breakOff(Error error) { fail(std::move(error)); }
  /// Fails the requests of `lane` (finish(Failed, false)). False, failing nothing, when one of
  /// the lane's frames is half written or half read: the caller must breakOff().
  bool failLane(std::uint64_t lane);
  /// Drops the held messages of a closed lane (and what the peer said about the lane).
  void dropLane(std::uint64_t lane) {
    inbox_.dropLane(lane);
    peerGone_.erase(lane);
  }
  /// Tells the peer that this rank's communicator on `lane` is gone (`aborted`: aborted, else
  /// destroyed): a control frame queued behind what is queued. Nothing when the connection has
  /// no socket or has failed.
  void sendLaneGone(std::uint64_t lane, bool aborted);
  /// The error of operations with the peer on `lane` once the peer said its communicator there
  /// is gone; nullptr until then.
  const Error* peerLaneError(std::uint64_t lane) const {
    const auto it = peerGone_.find(lane);
    return it == peerGone_.end() ? nullptr : &it->second;
  }
  /// Requests are queued on it.
  bool hasPending() const { return !sends_.empty() || inbox_.hasPosted(); }
  /// Why `req` (pending on this connection) has not completed, in words, for a Timeout: how
  /// much of it moved, or what holds it up (nothing arrived; a message that waits for another
  /// receive ahead of it; a peer that does not read).
  std::string stallReason(const Request& req) const;

 private:
  std::size_t staged() const { return stageEnd_ - stageBegin_; }
  Error lost(int err, const char* during, std::size_t bytes) const;
  void fail(Error error);
  void finishAll(bool connectionError);
  void closeSocket();
  void updateInterest();
  void onEof();
  void read();
  bool matchHeader();
  void onControl(const FrameHeader& header);
  void write();
  // The end of a queued send: a control frame is freed, a caller's request published.
  void retire(Request& req, Request::State state, bool connectionError);

  int selfRank_ = -1;
  int peer_ = -1;
  Fd fd_;
  int epollFd_ = -1;
  CompletionSink* sink_ = nullptr;
  bool registered_ = false;   // in the epoll set
  std::uint32_t events_ = 0;  // epoll interest registered
  bool wantWrite_ = false;
  bool stalled_ = false;  // a complete non-P2P header waits for its receive
  bool eof_ = false;      // the peer closed its end; staged bytes may still be consumed
  std::optional<Error> error_;

  engine::RequestQueue sends_;  // in posting order, until fully written
  std::list<Request> control_;  // control frames of this connection, queued in sends_
  std::unordered_map<std::uint64_t, Error> peerGone_;  // lanes whose peer side is gone
  engine::Inbox inbox_;

  std::vector<std::uint8_t> staging_;
  std::size_t stageBegin_ = 0;
  std::size_t stageEnd_ = 0;
};

}  // namespace braid::transport::tcp
