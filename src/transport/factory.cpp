#include "transport/factory.hpp"

#include <algorithm>
#include <braid/error.hpp>
#include <vector>

#include "common/machine.hpp"
#include "store/all_gather.hpp"
#include "transport/host_identity.hpp"
#include "transport/lane_transport.hpp"
#include "transport/routed_transport.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport {

namespace {

// A kind's prepared state (TcpListening, UcxListening) behind the registry's interface.
template <class T>
struct Prepared final : PreparedKind {
  explicit Prepared(std::unique_ptr<T> p) : held(std::move(p)) {}
  std::string entry() const override { return held->entry(); }
  std::unique_ptr<T> held;
};

template <class T>
std::unique_ptr<PreparedKind> hold(std::unique_ptr<T> p) {
  return std::make_unique<Prepared<T>>(std::move(p));
}

// What prepare() returned on this rank, back from createTransport.
template <class T>
std::unique_ptr<T> takePrepared(std::unique_ptr<PreparedKind>& p, int rank, const char* kind) {
  auto* mine = dynamic_cast<Prepared<T>*>(p.get());
  if (mine == nullptr)
    throw Error(ErrorCode::Internal, "createTransport: rank " + std::to_string(rank) + ": " + kind +
                                         " was not prepared");
  return std::move(mine->held);
}

UcxOptions ucxOptionsOf(const TransportOptions& options) {
  UcxOptions ucxOptions;
  ucxOptions.connectTimeout = options.tcp.connectTimeout;
  ucxOptions.spin = options.tcp.spin;
  ucxOptions.busyPoll = options.tcp.busyPoll;
  ucxOptions.security = options.tcp.security;
  ucxOptions.lazyConnect = options.tcp.lazyConnect;
  ucxOptions.chunkBytes = options.chunkBytes;
  return ucxOptions;
}

std::vector<TransportKind> makeKinds() {
  std::vector<TransportKind> kinds;

  TransportKind shm;
  shm.name = "shm";
  shm.priority = 0;
  shm.sameHostOnly = true;
  shm.cannotRun = [](const TransportOptions&) { return std::string(); };
  shm.autoPick = [](const TransportOptions&) { return false; };
  // A memfd offered before the host's ranks are known; its entry travels with the host entries.
  shm.prepare = [](int, int, const TransportOptions& options) {
    return hold(prepareShm(options.shm));
  };
  shm.create = [](int rank, int size, std::span<const int> peers, const TransportOptions& options,
                  std::vector<std::string>& paths, std::unique_ptr<PreparedKind> prepared,
                  std::vector<std::string> entries) {
    ShmOptions shmOptions = options.shm;
    shmOptions.setupTimeout = options.tcp.connectTimeout;
    shmOptions.spin = options.tcp.spin;
    std::vector<std::string> localEntries;
    for (int p : peers) localEntries.push_back(entries[static_cast<std::size_t>(p)]);
    auto t = createShmTransport(takePrepared<ShmPrepared>(prepared, rank, "shm"), localEntries,
                                rank, size, peers, shmOptions);
    for (int p : peers)
      if (p != rank) paths[static_cast<std::size_t>(p)] = t->pathTo(p);
    return std::unique_ptr<Transport>(std::move(t));
  };
  kinds.push_back(std::move(shm));

  // UCX (src/transport/ucx/, docs/ucx.md): runs where the build has it; `auto` takes it where
  // the kernel lists an RDMA device (InfiniBand or RoCE), since over plain Ethernet braid's own
  // TCP transport is the faster path.
  TransportKind ucx;
  ucx.name = "ucx";
  ucx.priority = 1;
  ucx.cannotRun = [](const TransportOptions&) { return ucxUnavailableReason(); };
  ucx.autoPick = [](const TransportOptions&) {
    return ucxAvailable() && !machine::rdmaDevices().empty();
  };
  // The worker is opened before the hosts are known; its address travels with the host entries.
  ucx.prepare = [](int rank, int size, const TransportOptions& options) {
    return hold(openUcx(rank, size, ucxOptionsOf(options)));
  };
  ucx.create = [](int rank, int size, std::span<const int> peers, const TransportOptions& options,
                  std::vector<std::string>& paths, std::unique_ptr<PreparedKind> prepared,
                  std::vector<std::string> entries) {
    // Like TCP, UCX connects the whole world; the routing uses it for the other hosts.
    (void)peers;
    auto opened = takePrepared<UcxListening>(prepared, rank, "ucx");
    for (int p = 0; p < size; ++p)
      if (p != rank) paths[static_cast<std::size_t>(p)] = "ucx";
    return createUcxTransport(std::move(opened), std::move(entries), rank, size,
                              ucxOptionsOf(options));
  };
  kinds.push_back(std::move(ucx));

  TransportKind tcp;
  tcp.name = "tcp";
  tcp.priority = 2;
  tcp.cannotRun = [](const TransportOptions&) { return std::string(); };
  tcp.autoPick = [](const TransportOptions&) { return true; };
  // Listening needs no peer: the listeners' addresses travel with the host entries.
  tcp.prepare = [](int rank, int size, const TransportOptions& options) {
    return hold(listenTcp(rank, size, options.tcp));
  };
  tcp.create = [](int rank, int size, std::span<const int> peers, const TransportOptions& options,
                  std::vector<std::string>& paths, std::unique_ptr<PreparedKind> prepared,
                  std::vector<std::string> entries) {
    // TCP connects every rank (peers is the whole world); the routing uses it for the others.
    (void)peers;
    auto listening = takePrepared<TcpListening>(prepared, rank, "tcp");
    for (int p = 0; p < size; ++p)
      if (p != rank) paths[static_cast<std::size_t>(p)] = "tcp";
    return createTcpTransport(std::move(listening), std::move(entries), rank, size, options.tcp);
  };
  kinds.push_back(std::move(tcp));

  std::sort(kinds.begin(), kinds.end(),
            [](const TransportKind& a, const TransportKind& b) { return a.priority < b.priority; });
  return kinds;
}

}  // namespace

const std::vector<TransportKind>& transportKinds() {
  static const std::vector<TransportKind> kinds = makeKinds();
  return kinds;
}

const TransportKind& interHostKind(const TransportOptions& options) {
  const auto& kinds = transportKinds();
  if (options.interHost == "auto") {
    for (const TransportKind& k : kinds)
      if (!k.sameHostOnly && k.cannotRun(options).empty() && k.autoPick(options)) return k;
    throw Error(ErrorCode::Internal, "no transport between hosts can run in this build");
  }
  for (const TransportKind& k : kinds) {
    if (k.name != options.interHost || k.sameHostOnly) continue;
    if (const std::string why = k.cannotRun(options); !why.empty())
      throw Error(ErrorCode::InvalidArgument,
                  "BRAID_TRANSPORT=" + options.interHost + " cannot run: " + why);
    return k;
  }
  std::string known;
  for (const TransportKind& k : kinds)
    if (!k.sameHostOnly) known += (known.empty() ? "" : ", ") + k.name;
  throw Error(ErrorCode::InvalidArgument, "BRAID_TRANSPORT=" + options.interHost +
                                              ": no such transport between hosts (auto, " + known +
                                              ")");
}

namespace {

// A sub-communicator's view of its parent's shared-memory segment (docs/architecture.md,
// "Shared connections") for the ranks `local` (this host's, ascending), on options.lane; with
// the segment's lane group as its shared-memory group when `local` is every rank. nullptr when
// the parent has no segment reaching them all, or when no lane group is free for a
// sub-communicator that needs one (every member learns the same from the first: openGroup):
// the caller then makes a segment of its own.
std::unique_ptr<Transport> shareParentSegment(const RoutedTransport& parent,
                                              std::span<const int> toParent,
                                              std::span<const int> local, int rank, int size,
                                              const TransportOptions& options,
                                              std::vector<std::string>& paths) {
  const LaneTransport* view = parent.sharedMemoryView();
  if (view == nullptr || local.size() < 2 || toParent.size() != static_cast<std::size_t>(size))
    return nullptr;
  std::vector<int> toBase(static_cast<std::size_t>(size), -1);
  for (int r : local) {
    const int p = toParent[static_cast<std::size_t>(r)];
    const int b = p >= 0 && p < view->size() ? view->baseRank(p) : -1;
    if (b < 0) return nullptr;  // the parent reaches it some other way
    toBase[static_cast<std::size_t>(r)] = b;
  }
  std::vector<std::string> mine(static_cast<std::size_t>(size));
  for (int r : local)
    if (r != rank)
      mine[static_cast<std::size_t>(r)] = parent.pathTo(toParent[static_cast<std::size_t>(r)]);
  auto child = std::make_unique<LaneTransport>(view->base(), options.lane, rank, std::move(toBase));
  if (local.size() == static_cast<std::size_t>(size) &&
      !child->openGroup(Clock::now() + options.shm.setupTimeout))
    return nullptr;
  paths = std::move(mine);
  return child;
}

}  // namespace

std::unique_ptr<RoutedTransport> createTransport(Store& store, int rank, int size,
                                                 const TransportOptions& options,
                                                 const RoutedTransport* parent,
                                                 std::span<const int> toParent,
                                                 std::vector<std::string>* hostsOut) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::InvalidArgument, "createTransport: rank " + std::to_string(rank) +
                                                " is outside world size " + std::to_string(size));
  // Checked first, on every rank alike, so that a kind that cannot run fails every world size.
  const TransportKind& between = interHostKind(options);
  if (size == 1) {
    if (hostsOut != nullptr) *hostsOut = {"self"};
    return std::make_unique<RoutedTransport>(rank, size, std::vector<RoutedTransport::Leg>{});
  }
  // The inter-host kind's setup that needs no peer (TCP: listening) runs first, so its entry
  // travels with the host entries; a sub-communicator on its parent's shared connections has
  // none (the condition mirrors the one below).
  const bool sharesParent =
      parent != nullptr && options.shareConnections && parent->laneLeg() != nullptr;
  // A sub-communicator whose members the parent reaches over shared memory (a hierarchy's node
  // group) needs no inter-host kind either: nothing to open.
  bool allLocal = parent != nullptr && toParent.size() == static_cast<std::size_t>(size);
  for (int r = 0; allLocal && r < size; ++r)
    if (r != rank && !parent->pathTo(toParent[static_cast<std::size_t>(r)]).starts_with("shm"))
      allLocal = false;
  // Each kind's setup that needs no peer: shared memory's offer (unless disabled) and the
  // inter-host kind's listeners or worker (unless not needed, see above).
  const std::vector<TransportKind>& kinds = transportKinds();
  std::vector<std::unique_ptr<PreparedKind>> prepared(kinds.size());
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const TransportKind& kind = kinds[k];
    const bool needed = kind.sameHostOnly ? !options.shmDisable && kind.cannotRun(options).empty()
                                          : &kind == &between && !sharesParent && !allLocal;
    if (kind.prepare && needed) prepared[k] = kind.prepare(rank, size, options);
  }
  // Each rank publishes its host, the shm grouping (every rank apart with BRAID_SHM_DISABLE=1),
  // what it may run on and every kind's prepared entry: "host\ngroup\ncpus\nentry\n...", one
  // entry per kind in registry order ("" when not prepared).
  const std::string host = options.hostIdentity.empty() ? hostIdentity() : options.hostIdentity;
  const std::string group = options.shmDisable ? "rank-" + std::to_string(rank) : "";
  std::string mine = host + "\n" + group + "\n" + machine::cpusText();
  for (const auto& p : prepared) mine += "\n" + (p ? p->entry() : std::string());
  const std::vector<std::string> published =
      allGatherStrings(store, "host", rank, size, mine, options.tcp.connectTimeout, "their host");
  std::vector<int> local;  // the ranks this rank shares memory with
  std::vector<std::string> hostCpus, localCpus;
  std::vector<std::vector<std::string>> entries(kinds.size());  // [kind][rank]
  if (hostsOut != nullptr) hostsOut->clear();
  for (int r = 0; r < size; ++r) {
    std::vector<std::string> fields;
    const std::string& p = published[static_cast<std::size_t>(r)];
    for (std::size_t at = 0;;) {
      const std::size_t nl = p.find('\n', at);
      fields.push_back(p.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
    if (fields.size() != 3 + kinds.size())
      throw Error(ErrorCode::Internal, "createTransport on rank " + std::to_string(rank) +
                                           ": rank " + std::to_string(r) +
                                           " published a malformed host entry");
    if (hostsOut != nullptr) hostsOut->push_back(fields[0] + "\n" + fields[1]);
    for (std::size_t k = 0; k < kinds.size(); ++k) entries[k].push_back(fields[3 + k]);
    if (fields[0] != host) continue;
    hostCpus.push_back(fields[2]);
    if (fields[1] == group) {
      local.push_back(r);
      localCpus.push_back(fields[2]);
    }
  }
  // The network transports poll without yielding when this host's ranks (shm or not) have a CPU
  // each: a yield hands the CPU to other work on the host for up to a scheduler slice, while a
  // peer on its own CPU answers in microseconds (docs/benchmarks.md, "Waiting under external
  // load"). A crowded host yields, since a local peer may need this very CPU.
  TransportOptions opts = options;
  const auto hostCpusTogether = static_cast<std::size_t>(machine::cpusTogether(hostCpus));
  opts.tcp.busyPoll = hostCpus.size() <= hostCpusTogether;
  // A progress thread moves the algorithms' own requests only where it has a CPU of its own, or
  // where this rank reaches its peers over two transports (shared memory and the network): a
  // wait on one does not drive the other, so a large send on one could otherwise stall while
  // the rank waits on the other, and peers that wait on each other across the two would hang.
  const bool twoLegs = local.size() > 1 && local.size() < static_cast<std::size_t>(size);
  opts.tcp.backgroundAttended = twoLegs || 2 * hostCpus.size() <= hostCpusTogether;
  opts.shm.backgroundAttended = opts.tcp.backgroundAttended;
  // Shared memory's view of the same: the CPUs its group's ranks can use at once.
  if (opts.shm.hostCpus == 0)
    opts.shm.hostCpus = static_cast<std::size_t>(machine::cpusTogether(localCpus));
  std::vector<int> world(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) world[static_cast<std::size_t>(r)] = r;

  // Kinds in priority order; each takes the pairs it reaches that no earlier kind took. Every
  // rank sees the same grouping, so all ranks build the same kinds in the same order.
  std::vector<RoutedTransport::Leg> legs;
  std::vector<bool> covered(static_cast<std::size_t>(size), false);
  covered[static_cast<std::size_t>(rank)] = true;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const TransportKind& kind = kinds[k];
    if (kind.sameHostOnly) {
      if (local.size() < 2 || !kind.cannotRun(opts).empty()) continue;
    } else if (&kind != &between || local.size() == static_cast<std::size_t>(size)) {
      continue;
    }
    const std::span<const int> peers = kind.sameHostOnly ? std::span<const int>(local) : world;
    RoutedTransport::Leg leg;
    leg.paths.assign(static_cast<std::size_t>(size), "");
    const LaneTransport* shared =
        parent != nullptr && options.shareConnections && !kind.sameHostOnly ? parent->laneLeg()
                                                                            : nullptr;
    if (kind.sameHostOnly && parent != nullptr && options.shareConnections && options.lane != 0)
      leg.transport = shareParentSegment(*parent, toParent, local, rank, size, options, leg.paths);
    if (leg.transport != nullptr) {
      // The parent's segment, on this communicator's lane: no segment made here.
    } else if (shared != nullptr) {
      // The parent's connections, on this communicator's lane: no socket opened here.
      if (toParent.size() != static_cast<std::size_t>(size))
        throw Error(ErrorCode::InvalidArgument, "createTransport: rank " + std::to_string(rank) +
                                                    ": " + std::to_string(toParent.size()) +
                                                    " parent ranks for " + std::to_string(size) +
                                                    " ranks");
      std::vector<int> toBase(static_cast<std::size_t>(size));
      for (int r = 0; r < size; ++r) {
        toBase[static_cast<std::size_t>(r)] =
            shared->baseRank(toParent[static_cast<std::size_t>(r)]);
        if (r != rank) leg.paths[static_cast<std::size_t>(r)] = kind.name;
      }
      leg.transport =
          std::make_unique<LaneTransport>(shared->base(), options.lane, rank, std::move(toBase));
    } else if (options.shareConnections && options.lane != 0) {
      // Connections (a segment) that sub-communicators will share: built once, viewed on this
      // lane; a segment's owner posts without a lane (lane 0), so its messages carry no lane.
      std::shared_ptr<Transport> base =
          kind.create(rank, size, peers, opts, leg.paths, std::move(prepared[k]), entries[k]);
      if (options.describeTag) base->setTagDescriber(options.describeTag);
      std::vector<int> identity(static_cast<std::size_t>(size));
      for (int r = 0; r < size; ++r) identity[static_cast<std::size_t>(r)] = r;
      leg.transport = std::make_unique<LaneTransport>(
          std::move(base), kind.sameHostOnly ? 0 : options.lane, rank, std::move(identity));
    } else {
      leg.transport =
          kind.create(rank, size, peers, opts, leg.paths, std::move(prepared[k]), entries[k]);
    }
    // A pair an earlier kind reaches keeps that one (RoutedTransport routes by the first leg).
    for (int p = 0; p < size; ++p)
      if (covered[static_cast<std::size_t>(p)]) leg.paths[static_cast<std::size_t>(p)].clear();
    for (int p : peers) covered[static_cast<std::size_t>(p)] = true;
    legs.push_back(std::move(leg));
  }
  return std::make_unique<RoutedTransport>(rank, size, std::move(legs));
}

namespace {

// The shared-memory transport of `t`: `t` itself, or a routed transport's shared-memory leg.
const ShmTransport* sharedMemoryOf(const Transport& t) {
  const auto* routed = dynamic_cast<const RoutedTransport*>(&t);
  return routed != nullptr ? routed->sharedMemoryLeg() : dynamic_cast<const ShmTransport*>(&t);
}

}  // namespace

std::string shmWakeMode(const Transport& t) {
  const ShmTransport* shm = sharedMemoryOf(t);
  if (shm == nullptr) return "";
  return shm->lightWake() ? "light (membarrier)" : "fenced";
}

std::string shmSingleCopy(const Transport& t) {
  const ShmTransport* shm = sharedMemoryOf(t);
  return shm == nullptr ? "" : shm->singleCopy();
}

std::string shmDirectChunk(const Transport& t) {
  const ShmTransport* shm = sharedMemoryOf(t);
  return shm == nullptr ? "" : shm->directChunk();
}

std::string shmDirectStreaming(const Transport& t) {
  const ShmTransport* shm = sharedMemoryOf(t);
  return shm == nullptr ? "" : shm->directStreaming();
}

std::string pathTo(const Transport& t, int peer) {
  const auto* routed = dynamic_cast<const RoutedTransport*>(&t);
  return routed != nullptr ? routed->pathTo(peer) : "";
}

}  // namespace braid::transport
