// Argument checks run before an operation is issued. Each failure throws
// Error(InvalidArgument) whose message names the operation, the rank and the argument.
#pragma once

#include <braid/error.hpp>
#include <braid/types.hpp>
#include <cstddef>
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
  Validator& dtype(DataType t);
  Validator& op(ReduceOp op);
  Validator& root(int root);
  Validator& peer(int peer);
  /// A per-rank array must have size() entries (or 0 when `optional`).
  Validator& perRank(const char* name, std::size_t n, bool optional);
  /// A buffer of `bytes` bytes must not be null when bytes > 0.
  Validator& buffer(const char* name, const void* p, std::size_t bytes);
  /// send and recv either coincide (in place) or do not overlap at all.
  Validator& noPartialOverlap(const void* send, const void* recv, std::size_t bytes);
  /// count * dataTypeSize(t) * multiplier in bytes, or an error if it overflows.
  std::size_t bytes(const char* name, std::size_t count, DataType t, std::size_t multiplier);
  /// Bytes spanned by blocks counts[i] at displs[i] (elements); errors on overflow.
  std::size_t extent(const char* name, std::span<const std::size_t> counts,
                     const std::vector<std::size_t>& displs, DataType t);

 private:
  [[noreturn]] void fail(const std::string& what) const;
  int rank_;
  int size_;
  Collective coll_;
  std::string_view commId_;
};

}  // namespace braid::core
