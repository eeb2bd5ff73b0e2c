// libFuzzer target: the TCP transport's acceptor (transport/tcp/tcp_bootstrap.cpp) as a stranger
// meets it during creation. Rank 0 of a 2-rank job runs the real connectMesh on a real loopback
// listener; a stranger connects first and sends the input (in up to three pieces, then closes
// or stays), and only then does the real rank 1 connect. Whatever the stranger sends, rank 0
// must never fail because of it (issue 25, case 1: an unauthenticated Hello claiming another
// world size killed rank 0), nor crash or hang:
//
//   - first byte, bit 0 set: the job has a key. Nothing the fuzzer sends can pass the handshake
//     (the responder's nonce is fresh), so both ranks must connect and rank 0's link to rank 1
//     must be the real rank 1 (checked by a byte sent over it).
//   - bit 0 clear: no key. A Hello claiming rank 1 of a 2-rank job is taken for rank 1 (nothing
//     distinguishes it without a key: docs/security.md), so the real rank 1 may then time out;
//     rank 0 must still succeed, and any other claim must be dropped.
//
// Each input costs a listener, two threads and a few connections on loopback: a few hundred
// runs a second.
#include <sys/socket.h>
#include <unistd.h>

#include <braid/error.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "store/memory_store.hpp"
#include "transport/tcp/socket.hpp"
#include "transport/tcp/tcp_bootstrap.hpp"

namespace tcp = braid::transport::tcp;
using namespace std::chrono_literals;

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "transport_acceptor_fuzz: %s\n", why.c_str());
  std::abort();
}

int connectStranger(const std::string& address) {
  const auto hp = tcp::parseHostPort(address);
  if (!hp) fail("rank 0 published '" + address + "'");
  std::string error;
  tcp::Fd fd = tcp::connectTo(*hp, 0, braid::transport::Clock::now() + 2s, error);
  if (!fd) fail("the stranger cannot connect: " + error);
  return fd.release();
}

}  // namespace

// The standalone setup of one rank's mesh over the store: listen, publish, connect.
tcp::Mesh meshOverStore(braid::MemoryStore& store, int rank,
                        const braid::transport::TcpOptions& options) {
  tcp::Listener listener = tcp::listen(rank, 2, options);
  store.setString(tcp::addressKey(rank), listener.address);
  const auto peers = tcp::addressesInStore(
      std::shared_ptr<braid::Store>(&store, [](braid::Store*) {}));  // borrowed
  return tcp::connectMesh(std::move(listener), *peers, rank, 2, options);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::span<const std::uint8_t> bytes(data + 1, size - 1);
  const bool keyed = (mode & 1) != 0;
  const bool closeAfter = (mode & 2) != 0;

  braid::MemoryStore store;
  braid::transport::TcpOptions options;
  options.connectTimeout = 5000ms;
  options.security.handshakeTimeout = 1000ms;
  options.security.logRejections = false;
  if (keyed) options.security.authKey = "fuzz-key";

  std::string rank0Error;
  bool rank0Done = false;
  tcp::Mesh mesh0;
  std::thread rank0([&] {
    try {
      mesh0 = meshOverStore(store, 0, options);
      rank0Done = true;
    } catch (const braid::Error& e) {
      rank0Error = e.what();
    } catch (const std::exception& e) {
      rank0Error = std::string("not a braid::Error: ") + e.what();
    }
  });
  const std::string address = store.getString("tcp/addr/0", 5000ms);
  const int stranger = connectStranger(address);
  // Up to three pieces, with a pause between them so they arrive as separate reads.
  const std::size_t cut1 = bytes.size() / 3, cut2 = 2 * bytes.size() / 3;
  for (auto piece : {bytes.first(cut1), bytes.subspan(cut1, cut2 - cut1), bytes.subspan(cut2)}) {
    if (piece.empty()) continue;
    if (::send(stranger, piece.data(), piece.size(), MSG_NOSIGNAL) < 0) break;
    std::this_thread::sleep_for(200us);
  }
  if (closeAfter) ::shutdown(stranger, SHUT_WR);
  std::this_thread::sleep_for(1ms);  // let the acceptor see the stranger before rank 1

  std::string rank1Error;
  tcp::Mesh mesh1;
  try {
    // Without a key an impersonated rank 1 makes the real one wait for its timeout: keep it short.
    braid::transport::TcpOptions rank1Options = options;
    if (!keyed) rank1Options.connectTimeout = 300ms;
    mesh1 = meshOverStore(store, 1, rank1Options);
  } catch (const braid::Error& e) {
    rank1Error = e.what();
  }
  rank0.join();
  ::close(stranger);

  if (!rank0Done) fail("rank 0 failed because of a stranger: " + rank0Error);
  if (keyed) {
    if (!rank1Error.empty()) fail("rank 1 failed with a key: " + rank1Error);
    // Rank 0's link to rank 1 is the real rank 1.
    const std::uint8_t ping = 0x5c;
    if (::send(mesh1.links[0].fd.get(), &ping, 1, MSG_NOSIGNAL) != 1) fail("rank 1 cannot send");
    std::uint8_t got = 0;
    for (int i = 0; i < 2000; ++i) {
      const ssize_t n = ::recv(mesh0.links[1].fd.get(), &got, 1, MSG_DONTWAIT);
      if (n == 1) break;
      if (n == 0) fail("rank 0's link to rank 1 closed");
      std::this_thread::sleep_for(1ms);
    }
    if (got != ping) fail("rank 0's link to rank 1 is not the real rank 1");
  }
  return 0;
}
