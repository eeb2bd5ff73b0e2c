#include "core/validate.hpp"

#include <cstdint>
#include <limits>

namespace braid::core {

namespace {
// Largest byte count braid accepts for one buffer: keeps every offset arithmetic in range.
constexpr std::size_t kMaxBytes = std::size_t{1} << 56;
}  // namespace

std::string whereText(Collective c, int rank, std::string_view commId, int size) {
  std::string s(toString(c));
  s += " on rank " + std::to_string(rank) + " of communicator ";
  s += commId;
  s += " (size " + std::to_string(size) + ")";
  return s;
}

void Validator::fail(const std::string& what) const {
  throw Error(ErrorCode::InvalidArgument, whereText(coll_, rank_, commId_, size_) + ": " + what);
}

Validator& Validator::dtype(DataType t) {
  if (!isValid(t))
    fail("argument 'dtype' has unknown value " + std::to_string(static_cast<int>(t)));
  return *this;
}

Validator& Validator::op(ReduceOp op) {
  if (!isValid(op)) fail("argument 'op' has unknown value " + std::to_string(static_cast<int>(op)));
  return *this;
}

Validator& Validator::root(int root) {
  if (root < 0 || root >= size_)
    fail("argument 'root' = " + std::to_string(root) + " is outside [0, " + std::to_string(size_) +
         ")");
  return *this;
}

Validator& Validator::peer(int peer) {
  if (peer < 0 || peer >= size_)
    fail("argument 'peer' = " + std::to_string(peer) + " is outside [0, " + std::to_string(size_) +
         ")");
  if (peer == rank_) fail("argument 'peer' = " + std::to_string(peer) + " is this rank");
  return *this;
}

Validator& Validator::perRank(const char* name, std::size_t n, bool optional) {
  if (n == static_cast<std::size_t>(size_) || (optional && n == 0)) return *this;
  fail(std::string("argument '") + name + "' has " + std::to_string(n) + " entries, expected " +
       std::to_string(size_) + (optional ? " (or 0)" : ""));
}

Validator& Validator::buffer(const char* name, const void* p, std::size_t bytes) {
  if (p == nullptr && bytes > 0)
    fail(std::string("argument '") + name + "' is null but the operation needs " +
         std::to_string(bytes) + " bytes there");
  return *this;
}

Validator& Validator::noPartialOverlap(const void* send, const void* recv, std::size_t bytes) {
  if (bytes == 0 || send == recv || send == nullptr || recv == nullptr) return *this;
  auto s = reinterpret_cast<std::uintptr_t>(send);
  auto r = reinterpret_cast<std::uintptr_t>(recv);
  if (s < r + bytes && r < s + bytes)
    fail("arguments 'send' and 'recv' partially overlap (pass the same pointer for in-place)");
  return *this;
}

std::size_t Validator::bytes(const char* name, std::size_t count, DataType t,
                             std::size_t multiplier) {
  const std::size_t esz = dataTypeSize(t);
  if (esz == 0) dtype(t);
  // count * esz * multiplier > kMaxBytes, without the two divisions (per-call path).
  const unsigned __int128 total = static_cast<unsigned __int128>(count) * esz * multiplier;
  if (total > kMaxBytes)
    fail(std::string("argument '") + name + "' = " + std::to_string(count) +
         " overflows: the buffer would exceed 2^56 bytes");
  return count * esz * multiplier;
}

std::size_t Validator::extent(const char* name, std::span<const std::size_t> counts,
                              const std::vector<std::size_t>& displs, DataType t) {
  std::size_t end = 0;
  for (std::size_t i = 0; i < counts.size() && i < displs.size(); ++i) {
    if (counts[i] > kMaxBytes || displs[i] > kMaxBytes)
      fail(std::string("argument '") + name + "[" + std::to_string(i) + "]' overflows");
    end = std::max(end, bytes(name, counts[i] + displs[i], t, 1));
  }
  return end;
}

}  // namespace braid::core
