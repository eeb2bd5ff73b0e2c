#include "sim/engine.hpp"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <braid/error.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>

// Sanitizers must be told about stack switches (ASan: which stack is live, so that unwinding
// and fake stacks stay right; TSan: one fiber per rank). No effect in normal builds.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BRAID_SIM_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define BRAID_SIM_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(BRAID_SIM_ASAN)
#define BRAID_SIM_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(BRAID_SIM_TSAN)
#define BRAID_SIM_TSAN 1
#endif
#ifdef BRAID_SIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef BRAID_SIM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// Switching stacks. On x86-64 a few instructions (callee-saved registers, the stack pointer,
// MXCSR and the x87 control word), 20x cheaper than swapcontext, which also makes a
// sigprocmask system call per switch; elsewhere, and under the sanitizers (which know
// swapcontext), ucontext.
#if defined(__x86_64__) && !defined(BRAID_SIM_ASAN) && !defined(BRAID_SIM_TSAN)
#define BRAID_SIM_ASM_SWITCH 1
extern "C" void braid_sim_switch(void** saveSp, void* newSp);
extern "C" void braid_sim_trampoline();
extern "C" void braid_sim_fiber_main(void* engine, long rank) {
  braid::sim::Engine::fiberMain(static_cast<braid::sim::Engine*>(engine), static_cast<int>(rank));
}
// braid_sim_switch(&save, sp): pushes the callee-saved state, stores the stack pointer into
// *save, loads sp and pops the state saved there. A new fiber's stack holds the initial state
// and braid_sim_trampoline as the return address; the trampoline calls
// braid_sim_fiber_main(r12, r13), which never returns.
asm(R"(
  .text
  .globl braid_sim_switch
  .type braid_sim_switch,@function
braid_sim_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size braid_sim_switch,.-braid_sim_switch

  .globl braid_sim_trampoline
  .type braid_sim_trampoline,@function
braid_sim_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  movq %r13, %rsi
  call braid_sim_fiber_main
  ud2
  .cfi_endproc
  .size braid_sim_trampoline,.-braid_sim_trampoline
)");
#endif

namespace braid::sim {

/// A suspended stack.
struct FiberContext {
#ifdef BRAID_SIM_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc{};
#endif
};

namespace {

void switchFiber(FiberContext& from, FiberContext& to) {
#ifdef BRAID_SIM_ASM_SWITCH
  braid_sim_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

#ifndef BRAID_SIM_ASM_SWITCH
void ucontextEntry(unsigned hi, unsigned lo, int rank) {
  auto* e = reinterpret_cast<Engine*>((static_cast<std::uintptr_t>(hi) << 32) |
                                      static_cast<std::uintptr_t>(lo));
  Engine::fiberMain(e, rank);
}
#endif

/// Prepares `f` to start fiberMain(engine, rank) on the stack [base, base + bytes).
void makeFiber(FiberContext& f, std::uint8_t* base, std::size_t bytes, Engine* engine, int rank) {
#ifdef BRAID_SIM_ASM_SWITCH
  auto top = reinterpret_cast<std::uintptr_t>(base + bytes) & ~std::uintptr_t{15};
  auto* slot = reinterpret_cast<std::uint64_t*>(top);
  slot[-1] = reinterpret_cast<std::uint64_t>(&braid_sim_trampoline);  // return address
  slot[-2] = 0;                                                       // rbp
  slot[-3] = 0;                                                       // rbx
  slot[-4] = reinterpret_cast<std::uint64_t>(engine);                 // r12
  slot[-5] = static_cast<std::uint64_t>(rank);                        // r13
  slot[-6] = 0;                                                       // r14
  slot[-7] = 0;                                                       // r15
  const std::uint32_t mxcsr = 0x1f80;  // the defaults: all exceptions masked, round to nearest
  const std::uint16_t fpcw = 0x037f;
  auto* state = reinterpret_cast<std::uint8_t*>(&slot[-8]);
  std::memcpy(state, &mxcsr, 4);
  std::memcpy(state + 4, &fpcw, 2);
  f.sp = &slot[-8];
#else
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = base;
  f.uc.uc_stack.ss_size = bytes;
  f.uc.uc_link = nullptr;
  const auto self = reinterpret_cast<std::uintptr_t>(engine);
  makecontext(&f.uc, reinterpret_cast<void (*)()>(&ucontextEntry), 3,
              static_cast<unsigned>(self >> 32), static_cast<unsigned>(self & 0xffffffffu), rank);
#endif
}

}  // namespace

using topology::LinkClass;
using transport::Request;

std::uint64_t RankTraffic::totalSent() const noexcept {
  std::uint64_t t = 0;
  for (auto b : bytesSent) t += b;
  return t;
}

std::uint64_t RankTraffic::totalMessages() const noexcept {
  std::uint64_t t = 0;
  for (auto m : messagesSent) t += m;
  return t;
}

/// One rank's view: forwards to the engine on the rank's fiber.
class Engine::RankTransport final : public transport::Transport {
 public:
  RankTransport(Engine& e, int rank) : e_(e), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return e_.size(); }
  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                Request& req) override {
    e_.postSend(rank_, peer, data, bytes, tag, req);
  }
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag, Request& req) override {
    e_.postRecv(rank_, peer, data, bytes, tag, req);
  }
  bool test(Request& req) override { return e_.test(rank_, req); }
  void wait(Request& req, transport::Deadline) override { e_.wait(rank_, req); }
  std::string describePeer(int peer) const override {
    return "rank " + std::to_string(peer) + " (simulated, host " +
           std::to_string(e_.topo_.nodeOf(peer)) + ")";
  }
  void abort(const std::string& why) override { e_.abortAll(why); }

 private:
  Engine& e_;
  int rank_;
};

struct Engine::SchedulerContext {
  FiberContext ctx;
  const void* stackBottom = nullptr;  // ASan: the scheduler's (the caller's) stack
  std::size_t stackSize = 0;
  void* fakeStack = nullptr;
  void* tsanFiber = nullptr;
};

struct Engine::Rank {
  FiberContext ctx;
  std::uint8_t* map = nullptr;  // guard page + stack
  std::size_t mapBytes = 0;
  void* fakeStack = nullptr;
  void* tsanFiber = nullptr;
  std::unique_ptr<RankTransport> tr;
  RankTraffic stats;
  double clock = 0;
  std::uint32_t depth = 0;
  double shmOut = 0, shmIn = 0;  // when this rank's shared-memory links are free
  Request* waitingOn = nullptr;  // parked in wait()
  bool waitAny = false;          // parked in test(): any completion wakes it
  bool parked = false;
  bool started = false;
  std::uint64_t ticket = ~std::uint64_t{0};  // seq of this rank's valid entry in ready_
  bool finished = false;
  std::vector<Pair> in;    // by sender, in no order (a rank talks to few peers at once)
  std::vector<int> index;  // sender -> position in `in` (-1: none), once `in` grew past a few
};

namespace {

double timeOf(const Request& r) {
  return std::bit_cast<double>(static_cast<std::uint64_t>(r.progress));
}
void setTime(Request& r, double t) {
  r.progress = static_cast<std::size_t>(std::bit_cast<std::uint64_t>(t));
}

}  // namespace

Engine::Engine(const topology::Topology& topo, EngineOptions opts)
    : topo_(topo),
      n_(topo.size()),
      opts_(std::move(opts)),
      ranks_(static_cast<std::size_t>(topo.size())),
      netOut_(static_cast<std::size_t>(topo.numNodes()), 0.0),
      netIn_(static_cast<std::size_t>(topo.numNodes()), 0.0),
      sched_(std::make_unique<SchedulerContext>()) {
  if (topo.size() < 1)
    throw Error(ErrorCode::InvalidArgument, "simulator: the topology has no ranks");
#ifdef BRAID_SIM_ASAN
  opts_.stackBytes = std::max<std::size_t>(opts_.stackBytes, std::size_t{1} << 20);
#endif
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  opts_.stackBytes = (std::max<std::size_t>(opts_.stackBytes, 64 * 1024) + page - 1) / page * page;
  for (int r = 0; r < size(); ++r)
    ranks_[static_cast<std::size_t>(r)].tr = std::make_unique<RankTransport>(*this, r);
}

Engine::~Engine() {
  for (Rank& r : ranks_) {
    if (r.map != nullptr) munmap(r.map, r.mapBytes);
#ifdef BRAID_SIM_TSAN
    if (r.tsanFiber != nullptr) __tsan_destroy_fiber(r.tsanFiber);
#endif
  }
}

const RankTraffic& Engine::traffic(int rank) const {
  return ranks_.at(static_cast<std::size_t>(rank)).stats;
}

double Engine::seconds() const noexcept {
  double t = 0;
  for (const Rank& r : ranks_) t = std::max(t, r.stats.clock);
  return t;
}

std::uint32_t Engine::steps() const noexcept {
  std::uint32_t d = 0;
  for (const Rank& r : ranks_) d = std::max(d, r.stats.depth);
  return d;
}

void Engine::fiberMain(Engine* e, int rank) {
  Rank& me = e->ranks_[static_cast<std::size_t>(rank)];
#ifdef BRAID_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &e->sched_->stackBottom, &e->sched_->stackSize);
#endif
  try {
    (*e->body_)(rank, *me.tr);
  } catch (...) {
    if (!e->firstError_) e->firstError_ = std::current_exception();
    if (!e->aborting_) e->abortAll("rank " + std::to_string(rank) + " failed");
  }
  me.stats.clock = me.clock;
  me.stats.depth = std::max(me.stats.depth, me.depth);
  me.finished = true;
  // Back to the scheduler for good (this stack is not resumed).
#ifdef BRAID_SIM_ASAN
  __sanitizer_start_switch_fiber(nullptr, e->sched_->stackBottom, e->sched_->stackSize);
#endif
#ifdef BRAID_SIM_TSAN
  __tsan_switch_to_fiber(e->sched_->tsanFiber, 0);
#endif
  FiberContext dead;
  switchFiber(dead, e->sched_->ctx);
  std::abort();  // never resumed
}

void Engine::run(const std::function<void(int, transport::Transport&)>& body) {
  if (body_ != nullptr) throw Error(ErrorCode::InvalidArgument, "simulator: Engine::run twice");
  body_ = &body;
#ifdef BRAID_SIM_TSAN
  sched_->tsanFiber = __tsan_get_current_fiber();
#endif
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  for (int r = 0; r < size(); ++r) schedule(r, 0.0);
  for (;;) {
    while (!ready_.empty()) {
      const Ready next = ready_.top();
      ready_.pop();
      Rank& me = ranks_[static_cast<std::size_t>(next.rank)];
      if (me.finished || next.seq != me.ticket) continue;  // done, or superseded by a later entry
      me.ticket = ~std::uint64_t{0};
      if (!me.started && aborting_) {
        me.finished = true;  // aborted before it ran: nothing to unwind
        continue;
      }
      if (!me.started) {
        // Stacks are made when a rank first runs, so a failed start leaves no half-made fibers.
        me.mapBytes = opts_.stackBytes + page;
        void* m = mmap(nullptr, me.mapBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED)
          throw Error(ErrorCode::Internal, "simulator: mmap of a fiber stack for rank " +
                                               std::to_string(next.rank) + ": " +
                                               std::strerror(errno));
        me.map = static_cast<std::uint8_t*>(m);
        mprotect(me.map, page, PROT_NONE);  // guard page: an overflow faults instead of corrupting
        makeFiber(me.ctx, me.map + page, opts_.stackBytes, this, next.rank);
#ifdef BRAID_SIM_TSAN
        me.tsanFiber = __tsan_create_fiber(0);
#endif
        me.started = true;
      }
      me.parked = false;
      ++switches_;
#ifdef BRAID_SIM_ASAN
      __sanitizer_start_switch_fiber(&sched_->fakeStack, me.map + page, opts_.stackBytes);
#endif
#ifdef BRAID_SIM_TSAN
      __tsan_switch_to_fiber(me.tsanFiber, 0);
#endif
      switchFiber(sched_->ctx, me.ctx);
#ifdef BRAID_SIM_ASAN
      __sanitizer_finish_switch_fiber(sched_->fakeStack, nullptr, nullptr);
#endif
      if (me.finished) {
        munmap(me.map, me.mapBytes);  // its memory back at once: 4,096 stacks never all touched
        me.map = nullptr;
#ifdef BRAID_SIM_TSAN
        __tsan_destroy_fiber(me.tsanFiber);
        me.tsanFiber = nullptr;
#endif
      }
    }
    bool stuck = false;
    for (const Rank& r : ranks_) stuck = stuck || !r.finished;
    if (!stuck || aborting_) break;
    // Nobody can run and somebody waits: the schedule deadlocks. Unwind every fiber (their
    // waits throw Aborted), then report who waited for what.
    const std::string report = stuckReport();
    if (!firstError_) firstError_ = std::make_exception_ptr(Error(ErrorCode::Internal, report));
    abortAll(report);
  }
  if (firstError_) std::rethrow_exception(firstError_);
}

std::string Engine::stuckReport() const {
  std::string s = "simulator: the schedule deadlocks (no rank can run):";
  int shown = 0, stuck = 0;
  for (int r = 0; r < size(); ++r) {
    const Rank& me = ranks_[static_cast<std::size_t>(r)];
    if (me.finished) continue;
    ++stuck;
    if (shown == 8) continue;
    ++shown;
    s += " rank " + std::to_string(r);
    if (me.waitingOn != nullptr)
      s += std::string(" waits for a ") + (me.waitingOn->isSend ? "send to" : "receive from") +
           " rank " + std::to_string(me.waitingOn->peer) + " of " +
           std::to_string(me.waitingOn->bytes) + " bytes;";
    else
      s += " tests its requests;";
  }
  if (stuck > shown) s += " and " + std::to_string(stuck - shown) + " more ranks";
  return s;
}

void Engine::schedule(int rank, double at) {
  ranks_[static_cast<std::size_t>(rank)].ticket = seq_;
  ready_.push(Ready{at, seq_++, rank});
}

void Engine::park(int rank) {
  Rank& me = ranks_[static_cast<std::size_t>(rank)];
  me.parked = true;
  ++switches_;
#ifdef BRAID_SIM_ASAN
  __sanitizer_start_switch_fiber(&me.fakeStack, sched_->stackBottom, sched_->stackSize);
#endif
#ifdef BRAID_SIM_TSAN
  __tsan_switch_to_fiber(sched_->tsanFiber, 0);
#endif
  switchFiber(me.ctx, sched_->ctx);
#ifdef BRAID_SIM_ASAN
  __sanitizer_finish_switch_fiber(me.fakeStack, &sched_->stackBottom, &sched_->stackSize);
#endif
}

void Engine::yieldIfAhead(int rank) {
  // Keep fibers in virtual-time order: one whose clock passed another runnable fiber's lets
  // that one run first (what it posts may take a shared link before this rank's next send).
  Rank& me = ranks_[static_cast<std::size_t>(rank)];
  if (!ready_.empty() && ready_.top().at < me.clock) {
    schedule(rank, me.clock);
    park(rank);
    throwIfAborted(rank);
  }
}

void Engine::throwIfAborted(int rank) const {
  if (aborting_)
    throw Error(ErrorCode::Aborted,
                "simulator: rank " + std::to_string(rank) + " aborted: " + abortWhy_);
}

void Engine::abortAll(const std::string& why) {
  if (aborting_) return;
  aborting_ = true;
  abortWhy_ = why;
  // Wake every parked rank: its wait throws Aborted and its stack unwinds.
  for (int r = 0; r < size(); ++r) {
    Rank& me = ranks_[static_cast<std::size_t>(r)];
    if (!me.finished) schedule(r, me.clock);
  }
}

void Engine::checkPeer(int rank, int peer, const char* what) const {
  if (peer < 0 || peer >= size() || peer == rank)
    throw Error(ErrorCode::InvalidArgument,
                std::string("simulator: ") + what + " on rank " + std::to_string(rank) + ": peer " +
                    std::to_string(peer) + " is not another rank of " + std::to_string(size()));
}

void Engine::postSend(int rank, int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                      Request& req) {
  throwIfAborted(rank);
  checkPeer(rank, peer, "postSend");
  Rank& me = ranks_[static_cast<std::size_t>(rank)];
  Rank& to = ranks_[static_cast<std::size_t>(peer)];
  req.isSend = true;
  req.peer = peer;
  req.tag = tag;
  req.data = static_cast<std::uint8_t*>(const_cast<void*>(data));
  req.bytes = bytes;
  const LinkClass c = topo_.link(rank, peer);
  const bool net = c == LinkClass::Network;
  const tuning::LinkCost cost = net ? opts_.cost.net : opts_.cost.shm;
  const double wire = static_cast<double>(bytes) * cost.beta;
  // Egress: the sender's link (the host's for the network) serializes the bytes in post order.
  double& out = net ? netOut_[static_cast<std::size_t>(topo_.nodeOf(rank))] : me.shmOut;
  const double start = std::max(me.clock, out);
  out = start + wire;
  // Ingress: the receiver's link takes the bytes in after the latency, in arrival order.
  double& inFree = net ? netIn_[static_cast<std::size_t>(topo_.nodeOf(peer))] : to.shmIn;
  const double inStart = std::max(start + cost.alpha, inFree);
  inFree = inStart + wire;
  Message msg{tag, bytes, static_cast<const std::uint8_t*>(data), {}, inStart + wire, me.depth + 1};
  me.stats.bytesSent[static_cast<std::size_t>(c)] += bytes;
  ++me.stats.messagesSent[static_cast<std::size_t>(c)];
  // Eager: the send is complete once its last byte left.
  setTime(req, start + wire);
  req.aux = 0;
  req.state.store(Request::State::Done, std::memory_order_release);

  Pair& p = pairOf(to, rank);
  if (p.recvHead < p.recvs.size()) {
    Request* r = p.recvs[p.recvHead++];
    release(to, p);
    deliver(peer, rank, msg, *r);
    return;
  }
  if (opts_.copyPayloads && bytes > 0) msg.copy.assign(msg.data, msg.data + bytes);
  msg.data = nullptr;
  p.sends.push_back(std::move(msg));
}

// A rank usually has one or two FIFOs in use (rings, trees); linear search is fastest there.
// Algorithms with a message from every peer in flight (rank_ordered, linear) would make that
// quadratic per rank, so past kLinear FIFOs a rank gets an index by sender.
constexpr std::size_t kLinear = 8;

Engine::Pair& Engine::pairOf(Rank& me, int from) {
  if (!me.index.empty()) {
    int& i = me.index[static_cast<std::size_t>(from)];
    if (i < 0) {
      i = static_cast<int>(me.in.size());
      me.in.emplace_back().from = from;
    }
    return me.in[static_cast<std::size_t>(i)];
  }
  for (Pair& p : me.in)
    if (p.from == from) return p;
  Pair& p = me.in.emplace_back();
  p.from = from;
  if (me.in.size() > kLinear) {
    me.index.assign(static_cast<std::size_t>(me.tr->size()), -1);
    for (std::size_t i = 0; i < me.in.size(); ++i)
      me.index[static_cast<std::size_t>(me.in[i].from)] = static_cast<int>(i);
    return me.in.back();
  }
  return p;
}

void Engine::release(Rank& me, Pair& p) {
  // An emptied FIFO starts over; beyond a few peers it goes (pairwise alltoall meets every
  // peer once: N^2 idle FIFOs otherwise).
  if (!p.empty()) return;
  p.sends.clear();
  p.sendHead = 0;
  p.recvs.clear();
  p.recvHead = 0;
  constexpr std::size_t kKeep = 4;
  if (me.in.size() > kKeep) {
    const std::size_t i = static_cast<std::size_t>(&p - me.in.data());
    if (!me.index.empty()) me.index[static_cast<std::size_t>(p.from)] = -1;
    if (i + 1 != me.in.size()) {
      me.in[i] = std::move(me.in.back());
      if (!me.index.empty())
        me.index[static_cast<std::size_t>(me.in[i].from)] = static_cast<int>(i);
    }
    me.in.pop_back();
  }
}

void Engine::postRecv(int rank, int peer, void* data, std::size_t bytes, std::uint64_t tag,
                      Request& req) {
  throwIfAborted(rank);
  checkPeer(rank, peer, "postRecv");
  Rank& me = ranks_[static_cast<std::size_t>(rank)];
  req.isSend = false;
  req.peer = peer;
  req.tag = tag;
  req.data = static_cast<std::uint8_t*>(data);
  req.bytes = bytes;
  req.state.store(Request::State::Pending, std::memory_order_release);
  Pair& p = pairOf(me, peer);
  if (p.sendHead < p.sends.size()) {
    Message msg = std::move(p.sends[p.sendHead++]);
    release(me, p);
    deliver(rank, peer, msg, req);
    return;
  }
  p.recvs.push_back(&req);
}

void Engine::deliver(int rank, int peer, Message& msg, Request& req) {
  // `rank` receives `msg` from `peer` into `req`.
  if (msg.bytes != req.bytes || msg.tag != req.tag) {
    std::string why = "simulator: rank " + std::to_string(rank) + " expected " +
                      std::to_string(req.bytes) + " bytes with " + std::to_string(req.tag) +
                      " from rank " + std::to_string(peer) + ", which sent " +
                      std::to_string(msg.bytes) + " bytes with " + std::to_string(msg.tag);
    req.state.store(Request::State::Failed, std::memory_order_release);
    throw Error(ErrorCode::Mismatch, why);
  }
  if (opts_.copyPayloads && msg.bytes > 0) {
    const std::uint8_t* src = msg.data != nullptr ? msg.data : msg.copy.data();
    std::memmove(req.data, src, msg.bytes);
  }
  Rank& me = ranks_[static_cast<std::size_t>(rank)];
  setTime(req, msg.arrival);
  req.aux = msg.depth;
  me.stats.bytesReceived += msg.bytes;
  ++me.stats.messagesReceived;
  req.state.store(Request::State::Done, std::memory_order_release);
  if (me.parked && (me.waitingOn == &req || me.waitAny)) {
    me.waitingOn = nullptr;
    me.waitAny = false;
    schedule(rank, std::max(me.clock, msg.arrival));
  }
}

void Engine::complete(Rank& me, Request& req) {
  me.clock = std::max(me.clock, timeOf(req));
  if (!req.isSend)
    me.depth = std::max<std::uint32_t>(me.depth, static_cast<std::uint32_t>(req.aux));
  me.stats.depth = std::max(me.stats.depth, me.depth);
}

void Engine::wait(int rank, Request& req) {
  Rank& me = ranks_[static_cast<std::size_t>(rank)];
  throwIfAborted(rank);
  if (req.state.load(std::memory_order_acquire) == Request::State::Idle)
    throw Error(ErrorCode::InvalidArgument,
                "simulator: wait on rank " + std::to_string(rank) + " for a request never posted");
  while (req.state.load(std::memory_order_acquire) == Request::State::Pending) {
    me.waitingOn = &req;
    park(rank);
    throwIfAborted(rank);
  }
  me.waitingOn = nullptr;
  complete(me, req);
  yieldIfAhead(rank);
}

bool Engine::test(int rank, Request& req) {
  Rank& me = ranks_[static_cast<std::size_t>(rank)];
  throwIfAborted(rank);
  if (req.state.load(std::memory_order_acquire) == Request::State::Done) {
    complete(me, req);
    yieldIfAhead(rank);
    return true;
  }
  // Not yet: a polling rank sleeps until one of its receives completes (in virtual time a
  // poll loop costs nothing), then tests again.
  me.waitAny = true;
  park(rank);
  me.waitAny = false;
  throwIfAborted(rank);
  if (req.state.load(std::memory_order_acquire) != Request::State::Done) return false;
  complete(me, req);
  yieldIfAhead(rank);
  return true;
}

}  // namespace braid::sim
