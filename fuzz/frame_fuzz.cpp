// libFuzzer target: the TCP transport's receive path (transport/tcp/tcp_connection.hpp). A
// Connection over a socket pair gets a few posted receives chosen by the input's first bytes,
// then the rest of the input as the byte stream a peer sent: frame headers with any tag and
// size, payloads, truncation, end of stream. The frame header parser, the matching of headers
// to receives, the held P2P messages and the staging buffer all run as in a job.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "transport/tcp/tcp_connection.hpp"

namespace tt = braid::transport;
namespace tcp = braid::transport::tcp;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

class Sink final : public tcp::CompletionSink {
 public:
  void finish(tt::Request& req, tt::Request::State state, bool) override {
    check(req.state.load() == tt::Request::State::Pending);
    if (state == tt::Request::State::Done) check(req.progress == req.bytes);
    req.state.store(state);
  }
  // A P2P receive of another size than its message: fails alone, the stream goes on.
  void finishAlone(tt::Request& req, braid::Error error) override {
    check(req.state.load() == tt::Request::State::Pending);
    check(error.code() == braid::ErrorCode::Mismatch && (req.tag & tt::kP2PTagBit) != 0);
    req.state.store(tt::Request::State::Failed);
  }
  std::string tagText(std::uint64_t tag) const override { return "tag " + std::to_string(tag); }
  void mismatchSeen(int, std::uint64_t, std::uint64_t) const override {}
};

struct Posted {
  tt::Request req;
  std::vector<std::uint8_t> buffer;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> in(data, size);
  if (in.size() >= tcp::kFrameHeaderBytes) {
    const auto h = tcp::decodeFrameHeader(in.first<tcp::kFrameHeaderBytes>());
    std::uint8_t again[tcp::kFrameHeaderBytes];
    tcp::encodeFrameHeader(h, again);
    const auto back = tcp::decodeFrameHeader(
        std::span<const std::uint8_t, tcp::kFrameHeaderBytes>(again, tcp::kFrameHeaderBytes));
    check(back.tag == h.tag && back.bytes == h.bytes && back.lane == h.lane);
  }
  if (in.empty()) return 0;
  // Receives: count, then per receive {kind, tag byte, size byte}.
  const std::size_t count = in[0] % 5;
  in = in.subspan(1);
  if (in.size() < 3 * count) return 0;
  std::deque<Posted> posted(count);  // stable addresses; outlives the connection
  for (std::size_t i = 0; i < count; ++i) {
    Posted& p = posted[i];
    const std::uint8_t kind = in[3 * i];
    p.req.tag = in[3 * i + 1] | ((kind & 1) != 0 ? tt::kP2PTagBit : 0);
    p.req.bytes = static_cast<std::size_t>(in[3 * i + 2]) * ((kind & 2) != 0 ? 97 : 1);
    p.buffer.resize(p.req.bytes);
    p.req.data = p.buffer.data();
    p.req.isSend = false;
    p.req.peer = 1;
  }
  in = in.subspan(3 * count);

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  const int epfd = ::epoll_create1(EPOLL_CLOEXEC);
  Sink sink;
  {
    tcp::Connection conn(0, 1, "rank 1 (fuzz)", tcp::Fd(fds[0]), epfd, sink);
    // Half the receives before the bytes arrive, half after (held P2P messages meet them then).
    for (std::size_t i = 0; i < count / 2; ++i) {
      posted[i].req.state.store(tt::Request::State::Pending);
      conn.postRecv(posted[i].req);
    }
    if (!in.empty()) ::send(fds[1], in.data(), in.size(), MSG_NOSIGNAL);
    ::shutdown(fds[1], SHUT_WR);
    for (int round = 0; round < 64 && !conn.error(); ++round) conn.handleEvents(EPOLLIN);
    for (std::size_t i = count / 2; i < count; ++i) {
      posted[i].req.state.store(tt::Request::State::Pending);
      conn.postRecv(posted[i].req);
    }
    for (int round = 0; round < 64 && !conn.error(); ++round) conn.handleEvents(EPOLLIN);
    conn.abandon();  // fails whatever is still posted
  }
  for (const Posted& p : posted) check(p.req.state.load() != tt::Request::State::Pending);
  ::close(fds[1]);
  ::close(epfd);
  return 0;
}
