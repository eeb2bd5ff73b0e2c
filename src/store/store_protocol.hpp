// The TCP store's wire format: pure encode/decode, no sockets, so it can be fuzzed alone.
//
// Every message is a frame: a 4-byte little-endian payload length, then the payload. The payload
// opens with a 1-byte type and carries the fields of that type, all little-endian:
//
//   string  u32 length, bytes            (a key: at most kMaxKeyBytes)
//   bytes   u32 length, bytes            (a value: at most kMaxValueBytes)
//   keys    u32 count, count strings     (at most kMaxKeys)
//
//   request  SET    key, value            -> OK
//            GET    u64 timeoutMs, key    -> VALUE value, or TIMEOUT [key]   (parked server-side)
//            ADD    key, i64 delta        -> INTEGER new value, or ERROR message
//            WAIT   u64 timeoutMs, keys   -> OK, or TIMEOUT missing keys     (parked server-side)
//            CHECK  keys                  -> BOOL u8 (0 or 1)
//            ONCLOSE key, value           -> OK; when this connection closes (the client exits,
//                                            dies or closes it), the server SETs key to value
//            UNCLOSE key                  -> OK; drops this connection's ONCLOSE of key
//            DELETE keys                  -> INTEGER how many of the keys existed (all removed)
//            NUMKEYS                      -> INTEGER how many keys the store holds
//            DELPREFIX key                -> INTEGER how many keys starting with key it removed
//            WAITANY u64 timeoutMs, keys  -> INTEGER the index of the first key present (of at
//                                            least one), or TIMEOUT keys   (parked server-side)
//
// A connection carries one request at a time: the client sends a request and reads its reply
// before sending the next. Every length is checked against its bound before anything is
// allocated, a payload must be consumed exactly, and a frame never exceeds kMaxFrameBytes; a
// frame that breaks any of these rules decodes as Malformed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace braid::store_protocol {

inline constexpr std::size_t kMaxKeyBytes = 4 * 1024;
inline constexpr std::size_t kMaxValueBytes = 64 * 1024 * 1024;
inline constexpr std::size_t kMaxKeys = 65536;
inline constexpr std::size_t kFrameHeaderBytes = 4;
/// The largest payload: a SET of the longest key and the largest value, with room to spare.
inline constexpr std::size_t kMaxFrameBytes = kMaxValueBytes + 2 * kMaxKeyBytes;

enum class RequestType : std::uint8_t {
  Set = 1,
  Get = 2,
  Add = 3,
  Wait = 4,
  Check = 5,
  OnClose = 6,
  UnClose = 7,
  Delete = 8,
  NumKeys = 9,
  DeletePrefix = 10,
  WaitAny = 11
};
enum class ResponseType : std::uint8_t {
  Ok = 1,
  Value = 2,
  Integer = 3,
  Bool = 4,
  Timeout = 5,
  Error = 6
};

/// "SET", "GET", ...: how error messages name an operation.
const char* toString(RequestType t) noexcept;

struct Request {
  RequestType type = RequestType::Set;
  std::vector<std::string> keys;  ///< one key for SET/GET/ADD/ONCLOSE/UNCLOSE/DELPREFIX; any number
                                  ///< for WAIT/CHECK/DELETE, at least one for WAITANY;
                                  ///< none for NUMKEYS
  std::vector<std::uint8_t> value;  ///< SET, ONCLOSE
  std::int64_t delta = 0;           ///< ADD
  std::uint64_t timeoutMs = 0;      ///< GET/WAIT/WAITANY
};

struct Response {
  ResponseType type = ResponseType::Ok;
  std::vector<std::uint8_t> value;  ///< VALUE
  std::int64_t integer = 0;         ///< INTEGER
  bool flag = false;                ///< BOOL
  std::vector<std::string> keys;    ///< TIMEOUT: the keys still missing
  std::string message;              ///< ERROR (at most kMaxKeyBytes)
};

/// Appends one frame. Returns false, appending nothing, when a field breaks its bound (a key too
/// long, a value too large, too many keys, a frame over kMaxFrameBytes, a request whose key count
/// does not fit its type).
bool appendRequest(const Request& req, std::vector<std::uint8_t>& out);
bool appendResponse(const Response& resp, std::vector<std::uint8_t>& out);

enum class DecodeStatus {
  Complete,    ///< one frame decoded; frameBytes says how many bytes it took
  Incomplete,  ///< more bytes needed; frameBytes is the whole frame's size once the header is in
  Malformed,   ///< the bytes break the format; error says how
};

struct DecodeResult {
  DecodeStatus status = DecodeStatus::Incomplete;
  std::size_t frameBytes = 0;
  std::string error;
};

/// Decodes the frame at the start of `bytes` (bytes past it are left alone).
DecodeResult decodeRequest(std::span<const std::uint8_t> bytes, Request& out);
DecodeResult decodeResponse(std::span<const std::uint8_t> bytes, Response& out);

/// Reads the 8-byte little-endian counter ADD keeps under a key.
std::int64_t decodeCounter(std::span<const std::uint8_t> value) noexcept;
std::vector<std::uint8_t> encodeCounter(std::int64_t v);
inline constexpr std::size_t kCounterBytes = 8;

}  // namespace braid::store_protocol
