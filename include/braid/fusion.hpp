// braid public API, training layer: a fusion buffer (many small allreduces packed into few large
// ones) and a chunked asynchronous allreduce for overlapping communication with computation.
// Built on the communicator's public API only (src/train/); docs/training.md.
#pragma once

#include <braid/comm.hpp>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

namespace braid::train {

namespace detail {
struct FusedState;
}

/// Completion of one tensor queued in a FusionBuffer. Copyable; copies share the state.
class FusedWork {
 public:
  FusedWork() = default;
  explicit FusedWork(std::shared_ptr<detail::FusedState> s) : state_(std::move(s)) {}
  /// True once the tensor's result is in its buffer (or its allreduce failed). Never blocks.
  bool test() const;
  /// Blocks until done; rethrows the failure (braid::Error).
  void wait() const;
  /// At most `timeout`: false while still pending; rethrows the failure.
  bool wait(std::chrono::milliseconds timeout) const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::FusedState> state_;
};

struct FusionOptions {
  /// A fused allreduce carries at most this many bytes, and the buffer sends what is queued once
  /// this many bytes are (Options::fusionThresholdBytes, BRAID_FUSION_THRESHOLD).
  std::size_t thresholdBytes = std::size_t{64} << 20;
  /// ... or once the oldest queued tensor has waited this long (BRAID_CYCLE_TIME).
  std::chrono::microseconds cycleTime{1000};

  static FusionOptions from(const Options& o) { return {o.fusionThresholdBytes, o.cycleTime}; }
};

/// Packs many small in-place allreduces into few large ones, as Horovod's tensor fusion does.
///
/// Every rank must queue the same tensors (count, dtype, op) in the same order. A background
/// thread owns a communicator of its own (split from the one given, so that one stays free for
/// the caller) and, whenever its rank has something to send (threshold reached, cycle time
/// passed, or flush()), agrees with the other ranks how many queued tensors all of them have
/// (one 8-byte allreduce, MIN): those are packed, grouped by (dtype, op) in queue order, into
/// allreduces of at most thresholdBytes through a staging buffer (a tensor larger than that goes
/// alone, in place), and completed one by one. Hence ranks never disagree on the grouping,
/// whatever their timing.
///
/// Buffers stay owned by the caller and must stay valid and untouched until their FusedWork
/// completes. Callbacks run on the buffer's thread after the result is in place; they must not
/// block on the buffer. A failed allreduce fails the FusedWork of every tensor it carried; the
/// communicator is then failed (docs in comm.hpp), so everything queued later fails too.
class FusionBuffer {
 public:
  /// Collective over `comm` (it splits off the buffer's own communicator).
  explicit FusionBuffer(Comm& comm);
  FusionBuffer(Comm& comm, const FusionOptions& options);
  /// Sends and waits for everything still queued (errors are not rethrown here), then stops.
  ~FusionBuffer();
  FusionBuffer(const FusionBuffer&) = delete;
  FusionBuffer& operator=(const FusionBuffer&) = delete;

  /// Queues an in-place allreduce of `count` elements at `data`. Throws Error(InvalidArgument)
  /// for a null buffer with a non-zero count, an invalid dtype or op.
  FusedWork allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op,
                      std::function<void()> onDone = {});
  /// As allreduce(), with a callback that runs on the buffer's thread in every case, after the
  /// result is in place (argument nullptr) or once the tensor's allreduce failed (argument: the
  /// error), before the FusedWork completes. An exception it throws on success fails the
  /// FusedWork; on failure it is ignored. (The PyTorch binding completes its futures with it.)
  FusedWork allreduceNotify(void* data, std::size_t count, DataType dtype, ReduceOp op,
                            std::function<void(std::exception_ptr)> onComplete);
  /// Sends everything queued now, without waiting for the threshold or the cycle time.
  void flush();
  /// flush() and waits until every tensor queued so far completed; rethrows the first failure.
  void synchronize();

  struct Stats {
    std::size_t tensors = 0;     ///< tensors completed
    std::size_t allreduces = 0;  ///< data allreduces issued (negotiations not counted)
    std::size_t rounds = 0;      ///< negotiations (one per batch)
    std::size_t bytes = 0;       ///< bytes allreduced
  };
  Stats stats() const;
  const FusionOptions& options() const noexcept;

  struct Impl;

 private:
  FusedWork enqueue(void* data, std::size_t count, DataType dtype, ReduceOp op,
                    std::shared_ptr<detail::FusedState> state);
  std::unique_ptr<Impl> impl_;
};

/// A chunked asynchronous allreduce: the caller produces `data` chunk by chunk and hands each
/// over with ready(i) as soon as it is final; the chunk's allreduce then runs on the
/// communicator's worker while the caller computes the next chunk. wait() returns when all are
/// done. Chunks are handed over in order 0, 1, ... (else Error(InvalidArgument)); the
/// communicator runs them in that order, behind anything queued before.
class OverlappedAllreduce {
 public:
  /// `chunks` >= 1 (clamped to count when count is smaller; count 0 gives one empty chunk).
  OverlappedAllreduce(Comm& comm, void* data, std::size_t count, DataType dtype, ReduceOp op,
                      std::size_t chunks);
  std::size_t chunks() const noexcept { return bounds_.size() - 1; }
  /// Elements [begin, end) of chunk i.
  std::size_t chunkBegin(std::size_t i) const { return bounds_.at(i); }
  std::size_t chunkEnd(std::size_t i) const { return bounds_.at(i + 1); }
  /// Chunk i is final: starts its allreduce.
  void ready(std::size_t i);
  /// Waits for every chunk handed over (all must have been); rethrows the first failure.
  void wait();

 private:
  Comm& comm_;
  unsigned char* data_;
  DataType dtype_;
  ReduceOp op_;
  std::vector<std::size_t> bounds_;
  std::vector<Work> works_;
};

}  // namespace braid::train
