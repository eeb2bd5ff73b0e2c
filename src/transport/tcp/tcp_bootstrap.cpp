// Connection setup. Every rank listens on an ephemeral port and publishes it under
// "tcp/addr/<rank>". Rank r connects to ranks 0..r-1 in order, then accepts r+1..size-1 in
// whatever order they arrive. This cannot deadlock: a connect completes in the kernel's backlog
// before the lower rank calls accept, and a rank only waits for the handshake reply of a lower
// rank, which in turn only waits for ranks lower than itself.
//
// Handshake, 16 bytes each way, little-endian: {magic, version, rank, size}. The connecting rank
// sends its own; the accepting rank checks it and answers with its own, so both ends know they
// reached the right job and the right rank.
#include "transport/tcp/tcp_bootstrap.hpp"

#include <algorithm>
#include <array>
#include <braid/error.hpp>
#include <cstdint>
#include <thread>

namespace braid::transport::tcp {

namespace {

constexpr std::uint32_t kHandshakeMagic = 0x42524443;  // "BRDC"
constexpr std::uint32_t kHandshakeVersion = 1;
constexpr std::size_t kHandshakeBytes = 16;
using Handshake = std::array<std::uint8_t, kHandshakeBytes>;

void putU32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t getU32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

Handshake makeHandshake(int rank, int size) {
  Handshake h{};
  putU32(h.data(), kHandshakeMagic);
  putU32(h.data() + 4, kHandshakeVersion);
  putU32(h.data() + 8, static_cast<std::uint32_t>(rank));
  putU32(h.data() + 12, static_cast<std::uint32_t>(size));
  return h;
}

struct Hello {
  bool valid = false;
  int rank = -1;
  int size = -1;
};

Hello parseHandshake(const Handshake& h) {
  Hello hello;
  hello.valid = getU32(h.data()) == kHandshakeMagic && getU32(h.data() + 4) == kHandshakeVersion;
  hello.rank = static_cast<int>(getU32(h.data() + 8));
  hello.size = static_cast<int>(getU32(h.data() + 12));
  return hello;
}

std::string addressKey(int rank) {
  return "tcp/addr/" + std::to_string(rank);
}

std::string msText(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

// Connects to `peer`, retrying refused or failed attempts with a growing pause until deadline.
Fd connectToPeer(int rank, int size, int peer, const std::string& address,
                 const TcpOptions& options, Deadline deadline) {
  const auto hostPort = parseHostPort(address);
  if (!hostPort)
    throw Error(ErrorCode::InvalidArgument, "rank " + std::to_string(rank) + ": rank " +
                                                std::to_string(peer) + " published address '" +
                                                address + "', expected host:port");
  std::string lastError = "none";
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    Fd fd = connectTo(*hostPort, options.socketBufferBytes, deadline, lastError);
    if (fd) {
      setNoDelay(fd.get());
      const Handshake mine = makeHandshake(rank, size);
      Handshake reply{};
      if (sendExactly(fd.get(), mine.data(), mine.size(), deadline, lastError) &&
          recvExactly(fd.get(), reply.data(), reply.size(), deadline, lastError)) {
        const Hello hello = parseHandshake(reply);
        if (hello.valid && hello.rank == peer && hello.size == size) return fd;
        lastError = hello.valid ? "reached rank " + std::to_string(hello.rank) + " of a job of " +
                                      std::to_string(hello.size) + " ranks"
                                : "not a braid endpoint";
      }
    }
    const auto now = Clock::now();
    if (now >= deadline)
      throw Error(ErrorCode::Timeout,
                  "rank " + std::to_string(rank) + " could not connect to rank " +
                      std::to_string(peer) + " at " + address + " within " +
                      msText(options.connectTimeout) + " (last error: " + lastError + ")");
    std::this_thread::sleep_for(
        std::min<Clock::duration>(pause, deadline - now + std::chrono::milliseconds(1)));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace

Mesh connectMesh(Store& store, int rank, int size, const TcpOptions& options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::InvalidArgument, "createTcpTransport: rank " + std::to_string(rank) +
                                                " is outside a world of size " +
                                                std::to_string(size));
  const Deadline deadline = Clock::now() + options.connectTimeout;
  const std::string host = options.listenAddress.empty() ? "127.0.0.1" : options.listenAddress;
  std::uint16_t port = 0;
  Fd listener = listenOn(host, options.socketBufferBytes, port);

  Mesh mesh;
  mesh.links.resize(static_cast<std::size_t>(size));
  mesh.links[static_cast<std::size_t>(rank)].address = formatHostPort(host, port);
  store.setString(addressKey(rank), mesh.links[static_cast<std::size_t>(rank)].address);

  for (int peer = 0; peer < rank; ++peer) {
    PeerLink& link = mesh.links[static_cast<std::size_t>(peer)];
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        std::max(deadline - Clock::now(), Clock::duration::zero()));
    try {
      link.address = store.getString(addressKey(peer), left);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank) + " timed out after " +
                                          msText(options.connectTimeout) + " waiting for rank " +
                                          std::to_string(peer) + " to publish its address (" +
                                          e.detail() + ")");
    }
    link.fd = connectToPeer(rank, size, peer, link.address, options, deadline);
  }

  int missing = size - rank - 1;
  while (missing > 0) {
    Fd fd = acceptFrom(listener.get(), deadline);
    if (!fd) {
      std::string names;
      for (int peer = rank + 1; peer < size; ++peer)
        if (!mesh.links[static_cast<std::size_t>(peer)].fd)
          names += (names.empty() ? "" : ", ") + std::to_string(peer);
      throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank) + " (" +
                                          mesh.links[static_cast<std::size_t>(rank)].address +
                                          ") timed out after " + msText(options.connectTimeout) +
                                          " waiting for rank" + (missing > 1 ? "s " : " ") + names +
                                          " to connect");
    }
    setNoDelay(fd.get());
    Handshake theirs{};
    std::string error;
    if (!recvExactly(fd.get(), theirs.data(), theirs.size(), deadline, error)) continue;
    const Hello hello = parseHandshake(theirs);
    if (!hello.valid) continue;  // a stray connection, not a braid rank
    if (hello.size != size)
      throw Error(ErrorCode::Mismatch,
                  "rank " + std::to_string(rank) + ": rank " + std::to_string(hello.rank) +
                      " connected from a job of " + std::to_string(hello.size) +
                      " ranks, this job has " + std::to_string(size));
    if (hello.rank <= rank || hello.rank >= size ||
        mesh.links[static_cast<std::size_t>(hello.rank)].fd)
      continue;  // not a rank this one accepts (or a duplicate): drop it
    const Handshake mine = makeHandshake(rank, size);
    if (!sendExactly(fd.get(), mine.data(), mine.size(), deadline, error)) continue;
    PeerLink& link = mesh.links[static_cast<std::size_t>(hello.rank)];
    // The address the peer listens on, for error messages; it published before connecting.
    link.address =
        store.getString(addressKey(hello.rank),
                        std::chrono::ceil<std::chrono::milliseconds>(std::max(
                            deadline - Clock::now(), Clock::duration(std::chrono::seconds(1)))));
    link.fd = std::move(fd);
    --missing;
  }
  return mesh;
}

}  // namespace braid::transport::tcp
