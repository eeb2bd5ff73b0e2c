// libFuzzer target: the TCP store's wire decoder (store/store_protocol.hpp), as the server and
// the client run it over a stream of frames. Checks, besides the sanitizers' memory checks:
// a frame never claims more bytes than it has or than the format allows, and what decodes
// re-encodes to something that decodes to the same thing.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "store/store_protocol.hpp"

namespace proto = braid::store_protocol;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool same(const proto::Request& a, const proto::Request& b) {
  return a.type == b.type && a.keys == b.keys && a.value == b.value && a.delta == b.delta &&
         a.timeoutMs == b.timeoutMs;
}

bool same(const proto::Response& a, const proto::Response& b) {
  return a.type == b.type && a.value == b.value && a.integer == b.integer && a.flag == b.flag &&
         a.keys == b.keys && a.message == b.message;
}

template <typename Message, typename Decode, typename Encode>
void stream(std::span<const std::uint8_t> bytes, Decode decode, Encode encode) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    Message m;
    const auto r = decode(bytes.subspan(at), m);
    if (r.status == proto::DecodeStatus::Malformed) {
      check(!r.error.empty());
      return;
    }
    if (r.status == proto::DecodeStatus::Incomplete) {
      check(r.frameBytes == 0 || r.frameBytes > bytes.size() - at);
      check(r.frameBytes <= proto::kFrameHeaderBytes + proto::kMaxFrameBytes);
      return;
    }
    check(r.frameBytes > proto::kFrameHeaderBytes && r.frameBytes <= bytes.size() - at);
    std::vector<std::uint8_t> again;
    check(encode(m, again));
    Message back;
    const auto r2 = decode(std::span<const std::uint8_t>(again), back);
    check(r2.status == proto::DecodeStatus::Complete && r2.frameBytes == again.size());
    check(same(m, back));
    at += r.frameBytes;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  stream<proto::Request>(
      bytes, [](auto b, proto::Request& m) { return proto::decodeRequest(b, m); },
      [](const proto::Request& m, std::vector<std::uint8_t>& out) {
        return proto::appendRequest(m, out);
      });
  stream<proto::Response>(
      bytes, [](auto b, proto::Response& m) { return proto::decodeResponse(b, m); },
      [](const proto::Response& m, std::vector<std::uint8_t>& out) {
        return proto::appendResponse(m, out);
      });
  if (size == proto::kCounterBytes) proto::decodeCounter(bytes);
  return 0;
}
