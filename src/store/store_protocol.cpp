#include "store/store_protocol.hpp"

namespace braid::store_protocol {
namespace {

void putU8(std::vector<std::uint8_t>& out, std::uint8_t v) {
  out.push_back(v);
}

void putU32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void putU64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void putBytes(std::vector<std::uint8_t>& out, const void* data, std::size_t n) {
  putU32(out, static_cast<std::uint32_t>(n));
  const auto* p = static_cast<const std::uint8_t*>(data);
  out.insert(out.end(), p, p + n);
}

void putKeys(std::vector<std::uint8_t>& out, const std::vector<std::string>& keys) {
  putU32(out, static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) putBytes(out, k.data(), k.size());
}

bool keysFit(const std::vector<std::string>& keys) {
  if (keys.size() > kMaxKeys) return false;
  for (const auto& k : keys)
    if (k.size() > kMaxKeyBytes) return false;
  return true;
}

std::uint32_t loadU32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

std::uint64_t loadU64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

// Writes the payload after a placeholder header, then fills the header in; undoes everything if
// the payload breaks the frame bound.
template <typename WritePayload>
bool appendFrame(std::vector<std::uint8_t>& out, WritePayload&& write) {
  const std::size_t start = out.size();
  putU32(out, 0);
  write();
  const std::size_t payload = out.size() - start - kFrameHeaderBytes;
  if (payload > kMaxFrameBytes) {
    out.resize(start);
    return false;
  }
  for (int i = 0; i < 4; ++i) out[start + i] = static_cast<std::uint8_t>(payload >> (8 * i));
  return true;
}

// Bounds-checked reads over one payload. Every read fails (returns false) rather than run past
// the end, and every length is checked against its bound before anything is allocated.
class PayloadReader {
 public:
  explicit PayloadReader(std::span<const std::uint8_t> payload) : data_(payload) {}

  bool u8(std::uint8_t& v) {
    if (left() < 1) return fail("truncated field");
    v = data_[pos_++];
    return true;
  }
  bool u32(std::uint32_t& v) {
    if (left() < 4) return fail("truncated field");
    v = loadU32(data_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(std::uint64_t& v) {
    if (left() < 8) return fail("truncated field");
    v = loadU64(data_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool string(std::string& s, std::size_t bound, const char* what) {
    std::uint32_t n = 0;
    if (!u32(n)) return false;
    if (n > bound)
      return fail(std::string(what) + " of " + std::to_string(n) + " bytes exceeds " +
                  std::to_string(bound));
    if (left() < n) return fail(std::string("truncated ") + what);
    s.assign(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool bytes(std::vector<std::uint8_t>& v) {
    std::uint32_t n = 0;
    if (!u32(n)) return false;
    if (n > kMaxValueBytes)
      return fail("value of " + std::to_string(n) + " bytes exceeds " +
                  std::to_string(kMaxValueBytes));
    if (left() < n) return fail("truncated value");
    v.assign(data_.begin() + static_cast<std::ptrdiff_t>(pos_),
             data_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return true;
  }
  bool keys(std::vector<std::string>& keys) {
    std::uint32_t n = 0;
    if (!u32(n)) return false;
    if (n > kMaxKeys)
      return fail("key count " + std::to_string(n) + " exceeds " + std::to_string(kMaxKeys));
    // Each key takes at least its 4-byte length, so a count the payload cannot hold is rejected
    // before the vector is sized from it.
    if (left() / 4 < n) return fail("truncated key list");
    keys.resize(n);
    for (auto& k : keys)
      if (!string(k, kMaxKeyBytes, "key")) return false;
    return true;
  }
  bool finish() { return left() == 0 ? true : fail("trailing bytes after the payload"); }
  const std::string& error() const { return error_; }

 private:
  std::size_t left() const { return data_.size() - pos_; }
  bool fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }

  std::span<const std::uint8_t> data_;
  std::size_t pos_ = 0;
  std::string error_;
};

// Splits off the frame at the start of `bytes`: Incomplete until the whole frame is in.
DecodeResult frameAt(std::span<const std::uint8_t> bytes, std::span<const std::uint8_t>& payload) {
  DecodeResult r;
  if (bytes.size() < kFrameHeaderBytes) return r;
  const std::uint32_t n = loadU32(bytes.data());
  if (n > kMaxFrameBytes) {
    r.status = DecodeStatus::Malformed;
    r.error = "frame of " + std::to_string(n) + " bytes exceeds " + std::to_string(kMaxFrameBytes);
    return r;
  }
  if (n == 0) {
    r.status = DecodeStatus::Malformed;
    r.error = "empty frame";
    return r;
  }
  r.frameBytes = kFrameHeaderBytes + n;
  if (bytes.size() < r.frameBytes) return r;
  payload = bytes.subspan(kFrameHeaderBytes, n);
  r.status = DecodeStatus::Complete;
  return r;
}

DecodeResult malformed(DecodeResult r, const std::string& why) {
  r.status = DecodeStatus::Malformed;
  r.error = why;
  return r;
}

}  // namespace

const char* toString(RequestType t) noexcept {
  switch (t) {
    case RequestType::Set:
      return "SET";
    case RequestType::Get:
      return "GET";
    case RequestType::Add:
      return "ADD";
    case RequestType::Wait:
      return "WAIT";
    case RequestType::Check:
      return "CHECK";
    case RequestType::OnClose:
      return "ONCLOSE";
    case RequestType::UnClose:
      return "UNCLOSE";
    case RequestType::Delete:
      return "DELETE";
    case RequestType::NumKeys:
      return "NUMKEYS";
    case RequestType::DeletePrefix:
      return "DELPREFIX";
    case RequestType::WaitAny:
      return "WAITANY";
  }
  return "UNKNOWN";
}

bool appendRequest(const Request& req, std::vector<std::uint8_t>& out) {
  if (!keysFit(req.keys)) return false;
  const bool oneKey = req.type == RequestType::Set || req.type == RequestType::Get ||
                      req.type == RequestType::Add || req.type == RequestType::OnClose ||
                      req.type == RequestType::UnClose || req.type == RequestType::DeletePrefix;
  if (oneKey && req.keys.size() != 1) return false;
  if (req.type == RequestType::NumKeys && !req.keys.empty()) return false;
  if (req.type == RequestType::WaitAny && req.keys.empty()) return false;
  if ((req.type == RequestType::Set || req.type == RequestType::OnClose) &&
      req.value.size() > kMaxValueBytes)
    return false;
  return appendFrame(out, [&] {
    putU8(out, static_cast<std::uint8_t>(req.type));
    switch (req.type) {
      case RequestType::Set:
      case RequestType::OnClose:
        putBytes(out, req.keys[0].data(), req.keys[0].size());
        putBytes(out, req.value.data(), req.value.size());
        break;
      case RequestType::Get:
        putU64(out, req.timeoutMs);
        putBytes(out, req.keys[0].data(), req.keys[0].size());
        break;
      case RequestType::Add:
        putBytes(out, req.keys[0].data(), req.keys[0].size());
        putU64(out, static_cast<std::uint64_t>(req.delta));
        break;
      case RequestType::Wait:
      case RequestType::WaitAny:
        putU64(out, req.timeoutMs);
        putKeys(out, req.keys);
        break;
      case RequestType::Check:
      case RequestType::Delete:
        putKeys(out, req.keys);
        break;
      case RequestType::UnClose:
      case RequestType::DeletePrefix:
        putBytes(out, req.keys[0].data(), req.keys[0].size());
        break;
      case RequestType::NumKeys:
        break;
    }
  });
}

bool appendResponse(const Response& resp, std::vector<std::uint8_t>& out) {
  if (resp.type == ResponseType::Value && resp.value.size() > kMaxValueBytes) return false;
  if (resp.type == ResponseType::Timeout && !keysFit(resp.keys)) return false;
  if (resp.type == ResponseType::Error && resp.message.size() > kMaxKeyBytes) return false;
  return appendFrame(out, [&] {
    putU8(out, static_cast<std::uint8_t>(resp.type));
    switch (resp.type) {
      case ResponseType::Ok:
        break;
      case ResponseType::Value:
        putBytes(out, resp.value.data(), resp.value.size());
        break;
      case ResponseType::Integer:
        putU64(out, static_cast<std::uint64_t>(resp.integer));
        break;
      case ResponseType::Bool:
        putU8(out, resp.flag ? 1 : 0);
        break;
      case ResponseType::Timeout:
        putKeys(out, resp.keys);
        break;
      case ResponseType::Error:
        putBytes(out, resp.message.data(), resp.message.size());
        break;
    }
  });
}

DecodeResult decodeRequest(std::span<const std::uint8_t> bytes, Request& out) {
  std::span<const std::uint8_t> payload;
  DecodeResult r = frameAt(bytes, payload);
  if (r.status != DecodeStatus::Complete) return r;
  PayloadReader in(payload);
  std::uint8_t type = 0;
  in.u8(type);
  out = Request{};
  out.type = static_cast<RequestType>(type);
  bool ok = false;
  switch (out.type) {
    case RequestType::Set:
    case RequestType::OnClose:
      out.keys.resize(1);
      ok = in.string(out.keys[0], kMaxKeyBytes, "key") && in.bytes(out.value);
      break;
    case RequestType::Get:
      out.keys.resize(1);
      ok = in.u64(out.timeoutMs) && in.string(out.keys[0], kMaxKeyBytes, "key");
      break;
    case RequestType::Add: {
      std::uint64_t delta = 0;
      out.keys.resize(1);
      ok = in.string(out.keys[0], kMaxKeyBytes, "key") && in.u64(delta);
      out.delta = static_cast<std::int64_t>(delta);
      break;
    }
    case RequestType::Wait:
      ok = in.u64(out.timeoutMs) && in.keys(out.keys);
      break;
    case RequestType::WaitAny:
      ok = in.u64(out.timeoutMs) && in.keys(out.keys);
      if (ok && out.keys.empty()) return malformed(r, "WAITANY without a key");
      break;
    case RequestType::Check:
    case RequestType::Delete:
      ok = in.keys(out.keys);
      break;
    case RequestType::UnClose:
    case RequestType::DeletePrefix:
      out.keys.resize(1);
      ok = in.string(out.keys[0], kMaxKeyBytes, "key");
      break;
    case RequestType::NumKeys:
      ok = true;
      break;
    default:
      return malformed(r, "unknown request type " + std::to_string(type));
  }
  if (!ok || !in.finish()) return malformed(r, in.error());
  return r;
}

DecodeResult decodeResponse(std::span<const std::uint8_t> bytes, Response& out) {
  std::span<const std::uint8_t> payload;
  DecodeResult r = frameAt(bytes, payload);
  if (r.status != DecodeStatus::Complete) return r;
  PayloadReader in(payload);
  std::uint8_t type = 0;
  in.u8(type);
  out = Response{};
  out.type = static_cast<ResponseType>(type);
  bool ok = false;
  switch (out.type) {
    case ResponseType::Ok:
      ok = true;
      break;
    case ResponseType::Value:
      ok = in.bytes(out.value);
      break;
    case ResponseType::Integer: {
      std::uint64_t v = 0;
      ok = in.u64(v);
      out.integer = static_cast<std::int64_t>(v);
      break;
    }
    case ResponseType::Bool: {
      std::uint8_t v = 0;
      ok = in.u8(v);
      out.flag = v != 0;
      break;
    }
    case ResponseType::Timeout:
      ok = in.keys(out.keys);
      break;
    case ResponseType::Error:
      ok = in.string(out.message, kMaxKeyBytes, "message");
      break;
    default:
      return malformed(r, "unknown response type " + std::to_string(type));
  }
  if (!ok || !in.finish()) return malformed(r, in.error());
  return r;
}

std::int64_t decodeCounter(std::span<const std::uint8_t> value) noexcept {
  if (value.size() != kCounterBytes) return 0;
  return static_cast<std::int64_t>(loadU64(value.data()));
}

std::vector<std::uint8_t> encodeCounter(std::int64_t v) {
  std::vector<std::uint8_t> out;
  out.reserve(kCounterBytes);
  putU64(out, static_cast<std::uint64_t>(v));
  return out;
}

}  // namespace braid::store_protocol
