// Argument checks run before an operation is issued. Each failure throws
// Error(InvalidArgument) whose message names the operation, the rank and the argument.
#pragma once

#include <braid/error.hpp>
#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid::core {

/// "allreduce on rank 1 of communicator 0 (size 4)": how every error names an operation.
std::string whereText(Collective c, int rank, std::string_view commId, int size);

class Validator {
 public:
  /// The operation's name is built only when a check fails: validation is on every call's
  /// path, and building the string costs more than the checks (docs/benchmarks.md).
  Validator(int rank, int size, Collective c, std::string_view commId)
      : rank_(rank), size_(size), coll_(c), commId_(commId) {}
  // The checks are inline and their failures out of line (validate.cpp): every call runs
  // them, and a failure builds its message only then.
  Validator& dtype(DataType t) {
    if (!isValid(t)) failDtype(t);
    return *this;
  }
  Validator& op(ReduceOp op) {
    if (!isValid(op)) failOp(op);
    return *this;
  }
  /// A reduction on dtype t: a known op that isSupported(t, op) (BAnd on fp32 is an error
  /// naming both), and for PremulSum on an integer dtype an integral factor in int64's range.
  Validator& reduction(DataType t, const Reduction& r) {
    if (!isSupported(t, r.op)) [[unlikely]]
      failUnsupported(t, r.op);
    if (r.op == ReduceOp::PremulSum && isInteger(t)) checkIntegerFactor(r.factor);
    return *this;
  }
  Validator& root(int root) {
    if (root < 0 || root >= size_) failRoot(root);
    return *this;
  }
  Validator& peer(int peer);
  /// A per-rank array must have size() entries (or 0 when `optional`).
  Validator& perRank(const char* name, std::size_t n, bool optional);
  /// A buffer of `bytes` bytes must not be null when bytes > 0.
  Validator& buffer(const char* name, const void* p, std::size_t bytes) {
    if (p == nullptr && bytes > 0) failBuffer(name, bytes);
    return *this;
  }
  /// send and recv either coincide (in place) or do not overlap at all.
  Validator& noPartialOverlap(const void* send, const void* recv, std::size_t bytes) {
    if (bytes == 0 || send == recv || send == nullptr || recv == nullptr) return *this;
    const auto s = reinterpret_cast<std::uintptr_t>(send);
    const auto r = reinterpret_cast<std::uintptr_t>(recv);
    if (s < r + bytes && r < s + bytes) failOverlap();
    return *this;
  }
  /// count * dataTypeSize(t) * multiplier in bytes, or an error if it overflows.
  std::size_t bytes(const char* name, std::size_t count, DataType t, std::size_t multiplier) {
    const std::size_t esz = dataTypeSize(t);
    if (esz == 0) failDtype(t);
    // count * esz * multiplier > kMaxBytes, without the two divisions.
    const unsigned __int128 total = static_cast<unsigned __int128>(count) * esz * multiplier;
    if (total > kMaxBytes) failOverflow(name, count);
    return count * esz * multiplier;
  }
  /// Bytes spanned by blocks counts[i] at displs[i] (elements); errors on overflow.
  std::size_t extent(const char* name, std::span<const std::size_t> counts,
                     const std::vector<std::size_t>& displs, DataType t);

  /// Largest byte count braid accepts for one buffer: keeps every offset arithmetic in range.
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 56;

 private:
  [[noreturn]] void fail(const std::string& what) const;
  [[noreturn, gnu::cold]] void failDtype(DataType t) const;
  [[noreturn, gnu::cold]] void failOp(ReduceOp op) const;
  [[noreturn, gnu::cold]] void failUnsupported(DataType t, ReduceOp op) const;
  void checkIntegerFactor(double factor) const;
  [[noreturn, gnu::cold]] void failRoot(int root) const;
  [[noreturn, gnu::cold]] void failBuffer(const char* name, std::size_t bytes) const;
  [[noreturn, gnu::cold]] void failOverlap() const;
  [[noreturn, gnu::cold]] void failOverflow(const char* name, std::size_t count) const;
  int rank_;
  int size_;
  Collective coll_;
  std::string_view commId_;
};

}  // namespace braid::core
