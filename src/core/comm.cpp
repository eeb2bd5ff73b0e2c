// Communicator: validate arguments -> select algorithm -> run it -> the Work completes or fails.
//
// Progress model (docs/architecture.md, "Ordering and progress"). Operations of a communicator
// START one at a time in issue order; `running` marks the one starting or executing, `queue`
// holds those issued behind it.
//   - With nothing running or queued, an operation starts on the caller's thread: a blocking
//     collective executes inline; a send/recv is posted inline (postInflight) and returns (a
//     blocking one then waits on its Work like an async one).
//   - Otherwise it is queued and the worker thread starts it in order: an async collective
//     executes there; a queued send/recv is only posted there.
//   - A posted send/recv sits in `inflight` (an Inflight: its request, its Op, its deadline) until
//     it completes. It never holds up later send/recv (an irecv followed by a send cannot
//     deadlock); a collective first waits for every listed one (drainInflight).
//   - Nobody polls in the background: whoever needs a send/recv done drives it on its own
//     thread, through the transport's wait/test (which spin, then sleep until the data moved):
//     Work::wait / Work::test (the Work holds its Inflight weakly as a detail::WorkDriver), a
//     collective draining the list, abort (sweepInflight), destruction. The transports' own
//     background threads move data nobody waits for meanwhile.
//   - One thread at a time touches a request: the one that claimed its Inflight. Whoever
//     completes it (completeInflight: flight recorder, list, Work) never lets go; a bounded
//     Work::wait that gives up lets go and wakes the others, who sleep on the WorkState
//     meanwhile. A send/recv nobody waits for is failed at its deadline only when someone looks.
//   - The Work reaches the communicator through DriverLink; ~Impl cuts the link, aborts the
//     transport if a thread is still driving through it, waits for it, and fails what is left.
#include <algorithm>
#include <braid/comm.hpp>
#include <cstdio>
#include <numeric>

#include "core/comm_impl.hpp"
#include "core/tag.hpp"
#include "core/validate.hpp"
#include "kernels/reduce.hpp"
#include "transport/factory.hpp"

namespace braid {

const char* version() noexcept {
  return BRAID_VERSION;
}

// ---------------------------------------------------------------- execution

Comm::Impl::~Impl() {
  stopElastic();  // the revoke watcher may fail operations: stopped before anything else
  stopDiagnosis();
  {
    std::lock_guard<std::mutex> lk(queueMu);
    stopping = true;
  }
  queueCv.notify_all();
  if (worker.joinable()) worker.join();  // it starts what was queued first
  // Work handles can no longer reach this communicator; threads driving a send/recv through one
  // right now are made to leave (their operation fails with Error(Aborted)) and waited for.
  if (driverLink) {
    std::unique_lock<std::mutex> lk(driverLink->mu);
    driverLink->impl = nullptr;
    if (driverLink->users > 0) {
      lk.unlock();
      transport->abort("communicator " + id + " on rank " + std::to_string(rank) +
                       " was destroyed while a thread waited on its send/recv");
      lk.lock();
      driverLink->cv.wait(lk, [&] { return driverLink->users == 0; });
    }
  }
  // What nobody waited for fails; the transport goes before the requests it may reference.
  for (;;) {
    std::shared_ptr<Inflight> e;
    {
      std::lock_guard<std::mutex> lk(queueMu);
      if (inflight.empty()) break;
      e = inflight.front();
    }
    e->claimed.store(true, std::memory_order_relaxed);  // no other thread is left to hold it
    completeInflight(*e, std::make_exception_ptr(Error(
                             ErrorCode::Aborted, where(e->op.args.coll) +
                                                     ": the communicator was destroyed before "
                                                     "the operation completed")));
  }
  stopObservability();  // the last straggler exchange and metrics file
  monitor.reset();      // no operation can fail any more
  groups.reset();       // the sub-communicators view the transport's connections
  transport.reset();
  timeline.reset();  // closes the JSON after the last operation finished
  releaseNamespace();
}

std::string Comm::Impl::where(Collective c) const {
  return core::whereText(c, rank, id, size);
}

void Comm::Impl::log(int level, const std::string& msg) const {
  if (level > opts.logLevel) return;
  static constexpr const char* kNames[] = {"", "WARN", "INFO", "TRACE"};
  std::fprintf(stderr, "[braid %s rank %d comm %s] %s\n", kNames[level], rank, id.c_str(),
               msg.c_str());
}

tuning::SelectionInputs Comm::Impl::selectionInputs(Collective c, std::size_t bytes) const {
  // Every rank must select the same row: alltoallv's sizes differ by rank, so it selects
  // with 0 bytes (no row of alltoallv has a size constraint).
  return {c,
          c == Collective::Alltoallv ? 0 : bytes,
          size,
          opts.smallMessageBytes,
          transport->sharedGroup() != nullptr,
          opts.deterministic,
          model.get(),
          &topo,
          opts.algoForce};
}

void Comm::Impl::execute(Op& op) {
  try {
    run(op);
  } catch (...) {
    std::rethrow_exception(opFailed(op, std::current_exception()));
  }
  opDone(op);
}

// PremulSum: the algorithms sum this rank's input multiplied by its factor, which the kernels
// compute here into a buffer of the op (one pass over the input; the op's only allocation).
void Comm::Impl::premultiply(Op& op) const {
  std::size_t elems = op.args.count;
  if (op.args.coll == Collective::ReduceScatter)
    elems = op.args.count * static_cast<std::size_t>(size);
  else if (op.args.coll == Collective::ReduceScatterv)
    elems = std::accumulate(op.counts.begin(), op.counts.end(), std::size_t{0});
  op.premulInput.resize(elems * dataTypeSize(op.args.dtype));
  kernels::scaleBy(op.args.dtype, op.premulInput.data(), op.args.send, elems, op.factor);
  op.args.send = op.premulInput.data();
  op.args.op = ReduceOp::Sum;
}

void Comm::Impl::run(Op& op) {
  if (aborted.load(std::memory_order_acquire))
    throw Error(ErrorCode::Aborted, where(op.args.coll) + ": the communicator was aborted");
  // Spans point into the op's own vectors (the op may have moved through the queue).
  op.args.counts = op.counts;
  op.args.displs = op.displs;
  op.args.recvCounts = op.recvCounts;
  op.args.recvDispls = op.recvDispls;
  const Collective c = op.args.coll;

  // Selection is a pure function of (collective, bytes) for this communicator: the last
  // choice per collective is reused when the size repeats (a training loop's common case),
  // which keeps the rule scan, the cost model and the name lookup off the small-message path.
  SelectionMemo& memo = selectionMemo[static_cast<std::size_t>(c)];
  const algo::AlgoInfo* algorithm = memo.algorithm;
  if (algorithm == nullptr || memo.bytes != op.bytes) {
    // The selector runs only rows whose constraints hold (algo::cannotRun), and no algorithm
    // runs another under its name: the row chosen here is the one the flight recorder, the
    // metrics and the timeline name.
    const tuning::SelectionInputs in = selectionInputs(c, op.bytes);
    tuning::Selection sel;
    try {
      sel = tuning::select(rules, in);
    } catch (const Error& e) {  // a forced row that cannot run, a deterministic-mode refusal
      throw Error(e.code(), where(c) + ": " + e.detail());
    }
    algorithm = sel.algorithm;
    if (algorithm == nullptr)
      throw Error(ErrorCode::Internal, where(c) + ": no algorithm can run it");
    if (opts.logLevel >= 2 && model != nullptr && model->firstUse(c, in.bytes))
      for (const auto& line : tuning::explainSelection(rules, in, algorithm->name)) log(2, line);
    // The hierarchical allreduce's piece: BRAID_HIER_PIECE_SIZE, else the model's pick.
    const std::size_t piece = opts.hierPieceBytes > 0 ? opts.hierPieceBytes
                              : c == Collective::Allreduce && model != nullptr
                                  ? model->hierPieceBytes(op.bytes)
                                  : std::size_t{512} << 10;
    memo = {op.bytes, algorithm, piece, transport->sharedGroup()};
  }
  opStarted(op, algorithm->name);
  const auto deadline = this->deadline(op);
  algo::Context ctx{*transport,         rank, size, opts.chunkBytes, scratch, deadline, op.tag,
                    opts.deterministic, &topo};
  ctx.pieceBytes = memo.pieceBytes;
  ctx.sharedGroup = memo.shared;
  // The sub-communicators are built by the first collective that uses them (every rank selects
  // the same row, so they all get there together); docs/architecture.md, "Hierarchies".
  if (algorithm->needs.subCommunicators) ctx.groups = groups.get();
  const bool avg = op.args.op == ReduceOp::Avg;
  if (avg) op.args.op = ReduceOp::Sum;
  if (op.args.op == ReduceOp::PremulSum) premultiply(op);
  algorithm->run(ctx, op.args);
  if (ctx.groups != nullptr) {
    // The flight recorder names what the phases ran; BRAID_DEBUG=INFO logs each new combination.
    const std::size_t known = phaseNames.size();
    if (const char* named = groups->takePhases(phaseNames)) {
      recorder->rename(op.serial, named);
      if (phaseNames.size() > known) log(2, std::string("phases: ") + toString(c) + " " + named);
    }
  }
  if (avg) {
    if (c == Collective::Allreduce || (c == Collective::Reduce && rank == op.args.root))
      kernels::divideBy(op.args.dtype, op.args.recv, op.args.count, size);
    else if (c == Collective::ReduceScatter)
      kernels::divideBy(op.args.dtype, op.args.recv, op.args.count, size);
    else if (c == Collective::ReduceScatterv)
      kernels::divideBy(op.args.dtype, op.args.recv, op.counts[rank], size);
  }
}

namespace {

bool isP2P(const Op& op) {
  return op.args.coll == Collective::Send || op.args.coll == Collective::Recv;
}

// Clears `running` when an inline start or execution ends, and lets the worker start what was
// queued meanwhile. The worker checks `running` under queueMu before it sleeps: taking the lock
// after the store makes sure it either saw the store or already sleeps when notified.
struct RunningScope {
  Comm::Impl* self;
  ~RunningScope() {
    self->running.store(false, std::memory_order_seq_cst);
    if (self->queued.load(std::memory_order_seq_cst) == 0) return;
    { std::lock_guard<std::mutex> g(self->queueMu); }
    self->queueCv.notify_all();
  }
};

// A thread driving a send/recv through its Work: counted in the link, so that destruction of
// the communicator waits for it.
struct LinkUse {
  Comm::Impl::DriverLink& link;
  ~LinkUse() {
    {
      std::lock_guard<std::mutex> lk(link.mu);
      --link.users;
    }
    link.cv.notify_all();
  }
};

}  // namespace

void Comm::Impl::runBlocking(Op op) {
  // A blocking send/recv is an async one waited for at once: it holds up nothing behind it
  // (another thread's send/recv on this communicator, say) once it is posted.
  if (isP2P(op)) {
    runAsync(std::move(op)).wait();
    return;
  }
  // Nothing queued and nothing running: start here, claiming `running` without queueMu. An op
  // this thread issued earlier is queued or running until it started, so it is never overtaken;
  // one another thread queues meanwhile waits behind this one, as it would after the claim.
  if (queued.load(std::memory_order_seq_cst) == 0 &&
      !running.exchange(true, std::memory_order_seq_cst)) {
    RunningScope scope{this};
    // Nothing can be listed while this thread runs (posting needs `running`), so an empty list
    // stays empty: skip the drain and its lock on the small-message path.
    if (listed.load(std::memory_order_acquire) != 0)
      drainInflight();  // a collective waits for the send/recv issued before it
    execute(op);
    return;
  }
  runAsync(std::move(op)).wait();
}

Work Comm::Impl::runAsync(Op op) {
  opQueued(op);
  auto state = std::make_shared<detail::WorkState>();
  op.work = state;
  std::unique_lock<std::mutex> lk(queueMu);
  if (aborted.load(std::memory_order_acquire)) {
    lk.unlock();
    state->finish(opFailed(
        op, std::make_exception_ptr(Error(
                ErrorCode::Aborted, where(op.args.coll) + ": the communicator was aborted"))));
    return Work(state);
  }
  if (isP2P(op) && queue.empty() && !running.exchange(true, std::memory_order_seq_cst)) {
    // Nothing issued earlier is still to start: post it now, on this thread.
    Finished finished = finishedInflight();
    lk.unlock();
    RunningScope scope{this};
    reap(finished);
    postInflight(op);
    return Work(state);
  }
  queue.push_back(std::move(op));
  queued.store(queue.size(), std::memory_order_seq_cst);
  if (!worker.joinable()) worker = std::thread([this] { workerLoop(); });
  lk.unlock();
  queueCv.notify_all();
  return Work(state);
}

void Comm::Impl::workerLoop() {
  std::unique_lock<std::mutex> lk(queueMu);
  while (true) {
    if (!queue.empty() && !running.exchange(true, std::memory_order_seq_cst)) {
      Op op = std::move(queue.front());
      queue.pop_front();
      queued.store(queue.size(), std::memory_order_seq_cst);
      lk.unlock();
      if (isP2P(op)) {
        postInflight(op);  // its Work completes when its waiter (or a later collective) drives it
      } else {
        std::exception_ptr error;
        try {
          drainInflight();
          execute(op);
        } catch (...) {
          error = std::current_exception();
        }
        op.work->finish(error);
      }
      lk.lock();
      running.store(false, std::memory_order_seq_cst);
      continue;
    }
    if (stopping && queue.empty()) return;
    queueCv.wait(lk, [&] {
      return stopping || (!running.load(std::memory_order_seq_cst) && !queue.empty());
    });
  }
}

void Comm::Impl::postInflight(Op& op) {
  std::shared_ptr<Inflight> e;
  try {
    e = std::make_shared<Inflight>();
    if (aborted.load(std::memory_order_acquire))
      throw Error(ErrorCode::Aborted, where(op.args.coll) + ": the communicator was aborted");
    opStarted(op, nullptr);
    const std::size_t bytes = op.args.count * dataTypeSize(op.args.dtype);
    if (op.args.coll == Collective::Send)
      transport->postSend(op.peer, op.args.send, bytes, op.tag, e->req);
    else
      transport->postRecv(op.peer, op.args.recv, bytes, op.tag, e->req);
  } catch (...) {
    op.work->finish(opFailed(op, std::current_exception()));
    return;
  }
  e->deadline = deadline(op);
  e->op = std::move(op);
  e->link = driverLink;
  {
    std::lock_guard<std::mutex> lk(queueMu);
    e->pos = inflight.insert(inflight.end(), e);
    listed.store(inflight.size(), std::memory_order_release);
  }
  e->op.work->setDriver(e);  // a thread already waiting on the Work drives it from now on
}

detail::WorkDriver::Result Comm::Impl::driveInflight(
    Inflight& e, std::optional<detail::WorkClock::time_point> until) {
  using Result = detail::WorkDriver::Result;
  if (!until || e.deadline <= *until) {
    // The transport's own wait: it spins, then sleeps until the data moved, and fails the
    // request at the operation's deadline.
    std::exception_ptr error;
    try {
      transport->wait(e.req, e.deadline);
    } catch (...) {
      error = std::current_exception();
    }
    completeInflight(e, error);
    return Result::Finished;
  }
  // A bound of the caller's before the operation's deadline, which the transport's wait cannot
  // stop at without failing the request: poll, yielding at first, then sleeping up to 1 ms.
  const auto start = detail::WorkClock::now();
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    if (testInflight(e)) return Result::Finished;
    const auto now = detail::WorkClock::now();
    if (now >= *until) {
      e.release();
      return Result::TimedOut;
    }
    if (now - start < std::chrono::microseconds(100)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min<detail::WorkClock::duration>(pause, *until - now));
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

bool Comm::Impl::testInflight(Inflight& e) {
  std::exception_ptr error;
  try {
    if (!transport->test(e.req)) {
      if (transport::Clock::now() < e.deadline) return false;
      transport->wait(e.req, e.deadline);  // throws the transport's Timeout
    }
  } catch (...) {
    error = std::current_exception();
  }
  completeInflight(e, error);
  return true;
}

void Comm::Impl::completeInflight(Inflight& e, std::exception_ptr error) {
  if (error)
    error = opFailed(e.op, error);
  else
    opDone(e.op);
  std::shared_ptr<Inflight> keep;  // the caller's reference may be the list's
  {
    std::lock_guard<std::mutex> lk(queueMu);
    keep = std::move(*e.pos);
    inflight.erase(e.pos);
    listed.store(inflight.size(), std::memory_order_release);
  }
  e.op.work->finish(error);
}

void Comm::Impl::drainInflight() {
  for (;;) {
    std::shared_ptr<Inflight> e;
    {
      std::lock_guard<std::mutex> lk(queueMu);
      if (inflight.empty()) return;
      e = inflight.front();
    }
    if (e->claim()) {
      driveInflight(*e, std::nullopt);
    } else {
      // Another thread drives it: sleep until it completed or was let go.
      detail::WorkState& w = *e->op.work;
      std::unique_lock<std::mutex> lk(w.mu);
      const std::uint64_t seen = w.changes;
      if (!e->claimed.load(std::memory_order_acquire)) continue;
      w.cv.wait(lk, [&] { return w.done.load(std::memory_order_acquire) || w.changes != seen; });
    }
  }
}

Comm::Impl::Finished Comm::Impl::finishedInflight() {
  Finished out;
  std::size_t found = 0, looked = 0;
  for (auto it = inflight.begin(); it != inflight.end() && found < out.size() && looked < 16;
       ++it, ++looked)
    if ((*it)->req.state.load(std::memory_order_acquire) != transport::Request::State::Pending &&
        !(*it)->claimed.load(std::memory_order_relaxed))
      out[found++] = *it;
  return out;
}

void Comm::Impl::reap(Finished& finished) {
  for (auto& e : finished)
    if (e && e->claim() && !testInflight(*e)) e->release();
}

void Comm::Impl::sweepInflight() {
  std::vector<std::shared_ptr<Inflight>> all;
  {
    std::lock_guard<std::mutex> lk(queueMu);
    all.assign(inflight.begin(), inflight.end());
  }
  for (auto& e : all)
    if (e->claim() && !testInflight(*e)) e->release();
}

detail::WorkDriver::Result Comm::Impl::Inflight::drive(
    std::optional<detail::WorkClock::time_point> until) {
  Impl* impl;
  {
    std::lock_guard<std::mutex> lk(link->mu);
    impl = link->impl;
    if (impl == nullptr || !claim()) return Result::Busy;
    ++link->users;
  }
  LinkUse use{*link};
  return impl->driveInflight(*this, until);
}

void Comm::Impl::Inflight::poll() {
  Impl* impl;
  {
    std::lock_guard<std::mutex> lk(link->mu);
    impl = link->impl;
    if (impl == nullptr || !claim()) return;
    ++link->users;
  }
  LinkUse use{*link};
  if (!impl->testInflight(*this)) release();
}

Comm::Comm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Comm::~Comm() = default;

int Comm::rank() const noexcept {
  return impl_->rank;
}
int Comm::size() const noexcept {
  return impl_->size;
}
const std::string& Comm::id() const noexcept {
  return impl_->id;
}
const Options& Comm::options() const noexcept {
  return impl_->opts;
}

void Comm::abort() {
  impl_->aborted.store(true, std::memory_order_release);
  const std::string why =
      "communicator " + impl_->id + " was aborted on rank " + std::to_string(impl_->rank);
  impl_->transport->abort(why);
  if (impl_->groups) impl_->groups->abort(why);
  std::deque<Op> dropped;
  {
    std::lock_guard<std::mutex> lk(impl_->queueMu);
    dropped.swap(impl_->queue);
  }
  for (auto& op : dropped)
    op.work->finish(impl_->opFailed(op, std::make_exception_ptr(Error(ErrorCode::Aborted, why))));
  impl_->sweepInflight();  // posted send/recv nobody drives fail now, not when next waited on
}

std::optional<std::chrono::milliseconds> Comm::setOpTimeout(
    std::optional<std::chrono::milliseconds> timeout) {
  if (timeout && timeout->count() <= 0)
    throw Error(ErrorCode::InvalidArgument,
                "setOpTimeout on rank " + std::to_string(impl_->rank) + " of communicator " +
                    impl_->id + ": argument 'timeout' = " + std::to_string(timeout->count()) +
                    " ms must be positive");
  const std::int64_t previous = impl_->opTimeoutMs.exchange(timeout ? timeout->count() : -1);
  if (previous < 0) return std::nullopt;
  return std::chrono::milliseconds(previous);
}

ScopedOpTimeout::ScopedOpTimeout(Comm& comm, std::chrono::milliseconds timeout)
    : comm_(comm), previous_(comm.setOpTimeout(timeout)) {}

ScopedOpTimeout::~ScopedOpTimeout() {
  comm_.setOpTimeout(previous_);
}

std::string Comm::pathTo(int peer) const {
  if (peer < 0 || peer >= impl_->size)
    throw Error(ErrorCode::InvalidArgument,
                "pathTo on rank " + std::to_string(impl_->rank) + ": argument 'peer' = " +
                    std::to_string(peer) + " is outside [0, " + std::to_string(impl_->size) + ")");
  return transport::pathTo(*impl_->transport, peer);
}

std::size_t Comm::connectionCount() const {
  return impl_->transport->connectionCount();
}

std::string Comm::singleCopy() const {
  return transport::shmSingleCopy(*impl_->transport);
}

std::string Comm::sharedMemoryChunk() const {
  return transport::shmDirectChunk(*impl_->transport);
}

std::string Comm::sharedMemoryStreaming() const {
  return transport::shmDirectStreaming(*impl_->transport);
}

std::string Comm::describePeer(int peer) const {
  if (peer < 0 || peer >= impl_->size)
    throw Error(ErrorCode::InvalidArgument,
                "describePeer on rank " + std::to_string(impl_->rank) + ": argument 'peer' = " +
                    std::to_string(peer) + " is outside [0, " + std::to_string(impl_->size) + ")");
  return impl_->transport->describePeer(peer);
}

std::string Comm::stragglerReport() {
  return impl_->stragglerReport();
}

std::string Comm::selectedAlgorithm(Collective c, std::size_t bytes) const {
  try {
    return tuning::selectAlgorithm(impl_->rules, impl_->selectionInputs(c, bytes));
  } catch (const Error& e) {
    throw Error(e.code(), impl_->where(c) + ": " + e.detail());
  }
}

}  // namespace braid
