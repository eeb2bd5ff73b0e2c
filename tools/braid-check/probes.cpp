#include "probes.hpp"

#include <chrono>
#include <cstring>

namespace braid::check {
namespace {

/// Byte i of the message between ranks lo < hi: differs by pair and by position.
std::uint8_t patternByte(int lo, int hi, std::size_t i) {
  return static_cast<std::uint8_t>(i * 131u + (i >> 8) * 7u + static_cast<std::size_t>(lo) * 17u +
                                   static_cast<std::size_t>(hi) * 29u + 1u);
}

std::int64_t countWrongBytes(const std::vector<std::uint8_t>& buf, int lo, int hi) {
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < buf.size(); ++i)
    if (buf[i] != patternByte(lo, hi, i)) ++wrong;
  return wrong;
}

}  // namespace

ProbeResult pingPong(Comm& comm, int peer, std::size_t bytes, int warmup, int iters,
                     std::uint32_t tag) {
  using Clock = std::chrono::steady_clock;
  const int me = comm.rank();
  const int lo = std::min(me, peer);
  const int hi = std::max(me, peer);
  const bool initiator = me == lo;
  std::vector<std::uint8_t> out(bytes), in(bytes);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = patternByte(lo, hi, i);
  auto roundTrip = [&] {
    if (initiator) {
      comm.send(out.data(), bytes, DataType::Uint8, peer, tag);
      comm.recv(in.data(), bytes, DataType::Uint8, peer, tag);
    } else {
      comm.recv(in.data(), bytes, DataType::Uint8, peer, tag);
      comm.send(in.data(), bytes, DataType::Uint8, peer, tag);
    }
  };
  ProbeResult result;
  for (int w = 0; w < warmup; ++w) roundTrip();
  const auto t0 = Clock::now();
  for (int it = 0; it < iters; ++it) roundTrip();
  if (initiator && iters > 0)
    result.roundTripSeconds = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  // The verified round trip: a stale buffer cannot pass, and the responder checks what arrived
  // before echoing it, so a corruption is attributed to the direction it happened in.
  std::memset(in.data(), 0, bytes);
  if (initiator) {
    comm.send(out.data(), bytes, DataType::Uint8, peer, tag);
    comm.recv(in.data(), bytes, DataType::Uint8, peer, tag);
  } else {
    comm.recv(in.data(), bytes, DataType::Uint8, peer, tag);
    result.wrongBytes = countWrongBytes(in, lo, hi);
    for (std::size_t i = 0; i < bytes; ++i) in[i] = patternByte(lo, hi, i);
    comm.send(in.data(), bytes, DataType::Uint8, peer, tag);
  }
  if (initiator) result.wrongBytes = countWrongBytes(in, lo, hi);
  return result;
}

}  // namespace braid::check
