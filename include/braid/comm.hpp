// braid public API: the communicator and the Work handle of asynchronous operations.
#pragma once

#include <braid/error.hpp>
#include <braid/options.hpp>
#include <braid/store.hpp>
#include <braid/types.hpp>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace braid {

namespace detail {
struct WorkState;
}

/// Handle of an asynchronous operation. Copyable; all copies refer to the same operation.
/// The buffers passed to the operation must stay valid and untouched until it completes.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> s) : state_(std::move(s)) {}
  /// True when the operation finished (successfully or not). Never blocks, never throws.
  bool test() const;
  /// Blocks until the operation finishes; rethrows its error (braid::Error).
  void wait() const;
  /// Waits at most `timeout`: returns false if the operation is still running (it keeps
  /// running), true when it finished; rethrows its error.
  bool wait(std::chrono::milliseconds timeout) const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

/// Sentinel color for split(): the caller joins no sub-communicator (split returns nullptr).
inline constexpr int kUndefinedColor = -1;

/// A group of ranks that run collectives together.
///
/// Threading: a communicator may be used from any thread, but the operations of one
/// communicator run in issue order, so callers should issue them in the same order on every
/// rank. Several communicators run concurrently, also in one process (ranks as threads).
/// A blocking call with nothing queued runs on the caller's thread; asynchronous collectives run
/// on the communicator's worker thread, in order. Asynchronous send/recv are posted in issue
/// order (on the caller's thread when nothing is queued) but do not hold up the operations
/// behind them (an irecv followed by a send cannot deadlock); a later collective starts only
/// once they completed. The thread that waits on (or tests) a send/recv's Work moves it itself.
///
/// Counts are in elements of `dtype`. A send buffer equal to the receive buffer means in-place
/// where the operation allows it (allreduce, reduce, broadcast, reduce_scatter with the input
/// being the full buffer and output its rank's slice at offset rank*count; allgather with the
/// input at offset rank*count of the output). Buffers may be null only when their count is 0.
///
/// Every failure throws braid::Error naming the operation, the argument and the rank.
/// InvalidArgument errors are raised before anything is sent and leave the communicator usable.
/// An operation that fails with Timeout, PeerLost, Mismatch (of collectives; a point-to-point
/// receive of the wrong size fails alone, see recv) or Aborted leaves it failed: every
/// later operation fails too (its peers see PeerLost promptly); create a new communicator, or
/// keep going with the survivors: shrink(), then grow() and join() (docs/reliability.md).
/// A rank that detects a failure (Timeout, PeerLost, Mismatch) revokes the communicator through
/// the store: every pending and later operation on every rank fails at once with
/// Error(PeerLost) "... was revoked by rank R: <R's error>", without waiting for its timeout.
class Comm {
 public:
  /// Joins the job described by the launcher's environment (see LaunchInfo::fromEnv); rank 0
  /// serves the store unless it is external.
  static std::unique_ptr<Comm> fromEnv(const Options& options = Options::fromEnv());
  /// Joins using explicit launch information.
  static std::unique_ptr<Comm> create(const LaunchInfo& launch, const Options& options);
  /// Joins through an existing store (the caller keeps the store alive via the shared_ptr).
  static std::unique_ptr<Comm> create(std::shared_ptr<Store> store, int rank, int size,
                                      const Options& options);
  /// Non-blocking creation: the same as create(), on a thread of its own, so that a job can
  /// overlap making its communicators (connections, shared memory, topology) with other start-up
  /// work; get() returns the communicator or throws what create() would have. Bad arguments
  /// (a null store, a rank outside the size) throw here, before anything starts. The store
  /// variant numbers the communicator (its id) in the order of the calls, not of their
  /// completion, so several may be in flight on one store at once, as long as every rank makes
  /// the same calls in the same order. The future's destructor waits for the creation to end.
  static std::future<std::unique_ptr<Comm>> createAsync(const LaunchInfo& launch,
                                                        const Options& options);
  static std::future<std::unique_ptr<Comm>> createAsync(std::shared_ptr<Store> store, int rank,
                                                        int size, const Options& options);

  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  /// Identifier of this communicator within the job (0 for the world communicator).
  const std::string& id() const noexcept;
  const Options& options() const noexcept;

  // ---- collectives: blocking form, then asynchronous form returning Work ----
  // A reduction is a ReduceOp or a Reduction carrying PremulSum's factor
  // (braid::premulSum(f)); isSupported(dtype, op) says which pairs are defined, any other is
  // Error(InvalidArgument) naming both, raised on the calling rank before anything is sent.
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, Reduction op);
  Work allreduceAsync(const void* send, void* recv, std::size_t count, DataType dtype,
                      Reduction op);

  /// Result on `root` only; recv may be null on other ranks.
  void reduce(const void* send, void* recv, std::size_t count, DataType dtype, Reduction op,
              int root);
  Work reduceAsync(const void* send, void* recv, std::size_t count, DataType dtype, Reduction op,
                   int root);

  /// In place: root's buf is sent, every other rank's buf is overwritten.
  void broadcast(void* buf, std::size_t count, DataType dtype, int root);
  Work broadcastAsync(void* buf, std::size_t count, DataType dtype, int root);

  /// recv holds size()*count elements, rank r's contribution at offset r*count.
  void allgather(const void* send, void* recv, std::size_t count, DataType dtype);
  Work allgatherAsync(const void* send, void* recv, std::size_t count, DataType dtype);

  /// Rank r contributes counts[r] elements; recv holds them at displs[r] (displs empty:
  /// packed in rank order).
  void allgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                  std::span<const std::size_t> displs, DataType dtype);
  Work allgathervAsync(const void* send, void* recv, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, DataType dtype);

  /// send holds size()*count elements; rank r receives the reduction of slice r (count elements).
  void reduceScatter(const void* send, void* recv, std::size_t count, DataType dtype, Reduction op);
  Work reduceScatterAsync(const void* send, void* recv, std::size_t count, DataType dtype,
                          Reduction op);

  /// send holds sum(counts) elements packed in rank order; rank r receives counts[r].
  void reduceScatterv(const void* send, void* recv, std::span<const std::size_t> counts,
                      DataType dtype, Reduction op);
  Work reduceScattervAsync(const void* send, void* recv, std::span<const std::size_t> counts,
                           DataType dtype, Reduction op);

  /// recv (root only) holds size()*count elements.
  void gather(const void* send, void* recv, std::size_t count, DataType dtype, int root);
  Work gatherAsync(const void* send, void* recv, std::size_t count, DataType dtype, int root);

  /// send (root only) holds size()*count elements; every rank receives count.
  void scatter(const void* send, void* recv, std::size_t count, DataType dtype, int root);
  Work scatterAsync(const void* send, void* recv, std::size_t count, DataType dtype, int root);

  /// send and recv hold size()*count elements; block j of send goes to rank j.
  void alltoall(const void* send, void* recv, std::size_t count, DataType dtype);
  Work alltoallAsync(const void* send, void* recv, std::size_t count, DataType dtype);

  /// Block j of send (sendCounts[j] elements at sendDispls[j]) goes to rank j, which stores it
  /// at its recvDispls[this rank]. Empty displs: packed in rank order.
  void alltoallv(const void* send, std::span<const std::size_t> sendCounts,
                 std::span<const std::size_t> sendDispls, void* recv,
                 std::span<const std::size_t> recvCounts, std::span<const std::size_t> recvDispls,
                 DataType dtype);
  Work alltoallvAsync(const void* send, std::span<const std::size_t> sendCounts,
                      std::span<const std::size_t> sendDispls, void* recv,
                      std::span<const std::size_t> recvCounts,
                      std::span<const std::size_t> recvDispls, DataType dtype);

  void barrier();
  Work barrierAsync();

  /// Point-to-point. A receive takes the first message from `peer` of its tag and dtype that no
  /// earlier receive took; messages of other tags wait aside, so they may be received in any
  /// order. A receive whose count differs from that message's fails alone with Error(Mismatch)
  /// naming both sizes: the message stays for the next receive of its tag and the communicator
  /// goes on. Send/recv are ordered with the communicator's other operations.
  void send(const void* buf, std::size_t count, DataType dtype, int peer, std::uint32_t tag = 0);
  Work sendAsync(const void* buf, std::size_t count, DataType dtype, int peer,
                 std::uint32_t tag = 0);
  void recv(void* buf, std::size_t count, DataType dtype, int peer, std::uint32_t tag = 0);
  Work recvAsync(void* buf, std::size_t count, DataType dtype, int peer, std::uint32_t tag = 0);

  /// Collective over this communicator: ranks with the same color form a new communicator,
  /// ordered by (key, old rank). kUndefinedColor returns nullptr.
  std::unique_ptr<Comm> split(int color, int key);
  /// Collective over this communicator: a sub-communicator of the listed ranks (every rank
  /// must pass the same list, else Error(InvalidArgument) names a disagreeing rank). Ranks not
  /// in the list get nullptr.
  std::unique_ptr<Comm> subgroup(std::span<const int> ranks);
  /// Collective over the listed ranks only (the other ranks do not call it, and it sends nothing
  /// over this communicator): a sub-communicator of `ranks` (this communicator's ranks, in the
  /// new communicator's order), like subgroup() and sharing this communicator's connections as
  /// it does (docs/architecture.md, "Shared connections"). For frameworks whose groups are
  /// created by their members alone (torch.distributed's new_group). Every member passes the
  /// same list and the same `name`, which tells this communicator's groups made this way apart:
  /// a name is used once per communicator. Error(InvalidArgument): a rank outside [0, size()),
  /// a rank listed twice, this rank not listed, an empty name, a name used already (also by a
  /// call that failed), a list that differs from the one of the first listed rank, or two
  /// members that each listed themselves first: the member that finds the disagreement says so
  /// through the store, and every member that called fails at once, naming it (a rank that the
  /// first listed rank did not list fails alone: the group that rank made is not its own);
  /// Error(Timeout) when some member has not called it within Options::connectTimeout. May be
  /// called while other threads run operations on this communicator.
  std::unique_ptr<Comm> memberSubgroup(std::span<const int> ranks, const std::string& name);

  /// Fails every pending and later operation with Error(Aborted). Callable from any thread.
  void abort();

  // ---- elastic: keep going when ranks die (docs/reliability.md) ----
  /// Revokes this communicator on every rank (what a detected failure does by itself): every
  /// pending and later operation fails with Error(PeerLost) naming this rank. Any thread.
  void revoke();
  /// Collective over the live ranks, after a failure (or at any time): revokes this
  /// communicator, agrees through the store with every other live rank on who is alive, and
  /// returns a new communicator of exactly those ranks, in their old order, renumbered from 0.
  /// No launcher is involved. Every caller that returns gets the same member set. A rank is
  /// left out once it is known dead (its store connection closed, or it destroyed this
  /// communicator) or when it has not called shrink() within the operation timeout (a slow rank
  /// is waited for until then). Throws Error(PeerLost) on a rank that was left out,
  /// Error(Timeout) when no agreement was reached in time (e.g. the store is gone). This
  /// communicator stays revoked; destroy it when done.
  std::unique_ptr<Comm> shrink();
  /// Collective over this communicator: adds `count` (>= 1) ranks that call Comm::join on the
  /// same store. Returns the grown communicator: this rank keeps its rank, the newcomers get
  /// size() .. size() + count - 1 in the order they joined. Within the operation timeout.
  std::unique_ptr<Comm> grow(int count);
  /// A replacement rank: waits (at most `timeout`) until some communicator of the job grows,
  /// and returns this rank's place in it.
  static std::unique_ptr<Comm> join(std::shared_ptr<Store> store, const Options& options,
                                    std::chrono::milliseconds timeout);
  /// join() through the launcher's store (LaunchInfo::fromEnv: BRAID_STORE etc.; rank and size
  /// are not used), waiting at most options.connectTimeout.
  static std::unique_ptr<Comm> joinFromEnv(const Options& options = Options::fromEnv());

  /// Bound on each operation issued from now on (by any thread), replacing Options::execTimeout
  /// (BRAID_EXEC_TIMEOUT) until changed again; std::nullopt restores that default. Returns the
  /// previous override (nullopt: there was none). An operation keeps the bound that was current
  /// when it was issued and counts it from when it starts running; at the bound it fails with
  /// Error(Timeout) naming the operation and the ranks that have not reached it, and the
  /// communicator is failed like after any timeout. Only this rank's bound changes: ranks may
  /// differ. An async send/recv that nobody waits on or tests is failed when it is next waited
  /// on, tested, or waited for by a later collective. Throws Error(InvalidArgument) for a
  /// bound <= 0. See also ScopedOpTimeout.
  std::optional<std::chrono::milliseconds> setOpTimeout(
      std::optional<std::chrono::milliseconds> timeout);

  /// How this rank reaches `peer`: "shm+cma" (shared memory, single copy for large messages),
  /// "shm", "tcp", or "self".
  std::string pathTo(int peer) const;

  /// From which block size this rank's direct shared-memory collectives read peers' buffers
  /// single-copy (process_vm_readv), and why (then how messages go, where that differs): "from
  /// 16384 B: measured at creation in 3.2 ms (...)", "from 0 B: BRAID_SHM_CMA_THRESHOLD", "never:
  /// BRAID_SHM_CMA_DISABLE", "never: local rank 1 could not read ..." (docs/env.md). "" without a
  /// shared-memory transport.
  std::string singleCopy() const;

  /// The pipelining unit of this rank's direct shared-memory collectives, and why: "1048576 B:
  /// measured at creation in 4.1 ms (...)", "262144 B: cached in FILE (...)", "65536 B:
  /// BRAID_CHUNK_SIZE", "262144 B: crowded host: ..." (docs/env.md, BRAID_SHM_CHUNK_SIZE). ""
  /// without a shared-memory transport.
  std::string sharedMemoryChunk() const;

  /// From what size of their outputs (all this host's ranks' together) this rank's direct
  /// shared-memory collectives write them with non-temporal stores, and why: "67108864 B:
  /// measured at creation in 31.0 ms (...)", "16777216 B: BRAID_LLC_SIZE", "16777216 B: crowded
  /// host: ...", "never: cached in FILE (...)" (docs/env.md, BRAID_LLC_SIZE). "" without a
  /// shared-memory group.
  std::string sharedMemoryStreaming() const;

  /// How this rank's transport names `peer` in its errors, with what bootstrap learned about it:
  /// "rank P (HOST:PORT)" for a TCP peer (the address and port its listener published),
  /// "rank P (pid N on HOSTNAME)" for a peer reached through shared memory, "rank P" for this
  /// rank. For diagnostics (braid-check prints it); throws Error(InvalidArgument) for a peer
  /// outside [0, size()).
  std::string describePeer(int peer) const;

  /// Sockets this rank's transport holds to its peers, opened or accepted, every TCP stream
  /// counted (0 for peers reached through shared memory). With BRAID_CONNECT=lazy it grows as
  /// peers are first used. For diagnostics (braid-perf reports it as "connections").
  std::size_t connectionCount() const;

  /// Name of the algorithm the communicator would pick for this collective and byte size (the
  /// nccl-tests size; alltoallv selects as 0 bytes): the one that runs, under that name. With
  /// Options::algoForce, Error(InvalidArgument) when a matching rule's algorithm cannot run it.
  std::string selectedAlgorithm(Collective c, std::size_t bytes) const;

  /// Straggler report (docs/troubleshooting.md, "Who is slow"): every rank publishes the start
  /// and end stamps of the collectives in its flight recorder through the store and reads the
  /// others'; the text names the rank that arrived last how often and by how much, over every
  /// collective analyzed so far (also by earlier calls). Every rank must call it (in the same
  /// order relative to other calls of it); it sends nothing over the communicator. Needs
  /// Options::straggler (BRAID_STRAGGLER=1, metrics, or BRAID_DEBUG=INFO), else
  /// Error(InvalidArgument); Error(Timeout) when a rank does not publish within the execution
  /// timeout.
  std::string stragglerReport();

  struct Impl;

 private:
  explicit Comm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Sets a communicator's operation timeout for a scope and restores the previous one when the
/// scope ends (Comm::setOpTimeout):
///   { braid::ScopedOpTimeout bound(*comm, std::chrono::seconds(5)); comm->allreduce(...); }
class ScopedOpTimeout {
 public:
  ScopedOpTimeout(Comm& comm, std::chrono::milliseconds timeout);
  ~ScopedOpTimeout();
  ScopedOpTimeout(const ScopedOpTimeout&) = delete;
  ScopedOpTimeout& operator=(const ScopedOpTimeout&) = delete;

 private:
  Comm& comm_;
  std::optional<std::chrono::milliseconds> previous_;
};

/// Library version, "MAJOR.MINOR.PATCH".
const char* version() noexcept;

}  // namespace braid
