#include "core/validate.hpp"

#include <cstdint>
#include <cstdio>
#include <limits>

namespace braid::core {

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

void Validator::failDtype(DataType t) const {
  fail("argument 'dtype' has unknown value " + std::to_string(static_cast<int>(t)));
}

void Validator::failOp(ReduceOp op) const {
  fail("argument 'op' has unknown value " + std::to_string(static_cast<int>(op)));
}

void Validator::failUnsupported(DataType t, ReduceOp op) const {
  if (!isValid(t)) failDtype(t);
  if (!isValid(op)) failOp(op);
  fail(std::string("argument 'op' = ") + toString(op) +
       " is not supported for argument 'dtype' = " + toString(t) +
       (op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor
            ? " (bitwise ops need an integer or bool dtype)"
        : isComplex(t) ? " (complex dtypes have sum, prod, avg and premul_sum)"
                       : " (bool has sum, prod, min, max and the bitwise ops)"));
}

namespace {
std::string shortestText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}
}  // namespace

void Validator::checkIntegerFactor(double factor) const {
  // The range check first: a cast of a value outside int64 would be undefined.
  if (!(factor >= -9223372036854775808.0 && factor < 9223372036854775808.0) ||
      static_cast<double>(static_cast<std::int64_t>(factor)) != factor)
    fail("argument 'op' = premul_sum has factor " + shortestText(factor) +
         ", which is not an integer in int64's range (integer dtypes need one)");
}

void Validator::failRoot(int root) const {
  fail("argument 'root' = " + std::to_string(root) + " is outside [0, " + std::to_string(size_) +
       ")");
}

void Validator::failBuffer(const char* name, std::size_t bytes) const {
  fail(std::string("argument '") + name + "' is null but the operation needs " +
       std::to_string(bytes) + " bytes there");
}

void Validator::failOverlap() const {
  fail("arguments 'send' and 'recv' partially overlap (pass the same pointer for in-place)");
}

void Validator::failOverflow(const char* name, std::size_t count) const {
  fail(std::string("argument '") + name + "' = " + std::to_string(count) +
       " overflows: the buffer would exceed 2^56 bytes");
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
