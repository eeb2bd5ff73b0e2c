// The operations braid-perf measures and braid-check verifies, with nccl-tests' definitions of
// size and bus bandwidth, and for each one: how to run it, how to fill its inputs and how to
// verify its outputs.
#pragma once

#include <braid/comm.hpp>
#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace braid::tools {

enum class BenchOp {
  Allreduce,
  Allgather,
  ReduceScatter,
  Broadcast,
  Reduce,
  Alltoall,
  Gather,
  Scatter,
  SendRecv,
};

struct BenchOpInfo {
  BenchOp op;
  const char* name;
  Collective coll;    // what selectedAlgorithm() is asked about
  bool reduces;       // takes a ReduceOp
  bool rooted;        // takes a root
  bool perRankSplit;  // the size is split into nranks blocks: count rounded to a multiple
};

std::span<const BenchOpInfo> benchOps();
/// Accepts the names above plus nccl-tests / MPI spellings (all_reduce, bcast, reduce_scatter).
const BenchOpInfo* findBenchOp(std::string_view name);

/// nccl-tests' bus bandwidth factor: algbw * factor is comparable with the link bandwidth.
double busFactor(BenchOp op, int nranks);

/// One (operation, dtype, redop, root, count) on one communicator, over buffers allocated once.
/// `count` is the nccl-tests count: elements of the size buffer (for allgather the gathered
/// output, for reducescatter the whole input, for alltoall each rank's whole buffer).
struct BenchCase {
  const BenchOpInfo* info;
  DataType dtype;
  ReduceOp redop;  // ignored when !info->reduces
  int root;        // ignored when !info->rooted
  std::size_t count;
};

class BenchRunner {
 public:
  /// `send` and `recv` each hold at least count * dataTypeSize(dtype) bytes of any case run.
  BenchRunner(Comm& comm, void* send, void* recv) : comm_(comm), send_(send), recv_(recv) {}

  /// Runs the operation once, with the blocking API.
  void run(const BenchCase& c);
  /// Writes the check pattern into the inputs and a sentinel (all bits set) into the outputs.
  void prepare(const BenchCase& c);
  /// Elements of this rank's outputs that differ from the independently computed result.
  std::int64_t verify(const BenchCase& c) const;

 private:
  Comm& comm_;
  void* send_;
  void* recv_;
};

}  // namespace braid::tools
