// Communicator creation: the bootstrap (options checked, store namespace, transports, topology,
// cost model) behind Comm::create / Comm::fromEnv and Comm::Impl::makeSub, which runs it for a
// subset of ranks over the parent's connections (the sub-communicators that use it are in
// comm_split.cpp). Execution is in comm.cpp.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <braid/comm.hpp>
#include <braid/launch.hpp>
#include <cstdio>
#include <future>

#include "bootstrap/pmix.hpp"
#include "core/calibrate.hpp"
#include "core/comm_impl.hpp"
#include "core/machine_profile.hpp"
#include "core/process_settings.hpp"
#include "core/tag.hpp"
#include "core/topology_setup.hpp"
#include "kernels/reduce.hpp"
#include "store/all_gather.hpp"
#include "store/memory_store.hpp"
#include "transport/factory.hpp"
#include "transport/tcp/interfaces.hpp"

namespace braid {

// ---------------------------------------------------------------- bootstrap

namespace {

/// Creation's phases, wall time and the creating thread's CPU time (user + system; the
/// transport's and the liveness hub's own threads not counted), for the BRAID_DEBUG=INFO line
/// "created in ...": which phase a slow creation waited in (join: for every rank to start;
/// transport: connections; topology: the host gather). Off (nothing read, nothing built) unless
/// that line is logged.
class PhaseClock {
 public:
  explicit PhaseClock(bool on) : on_(on) {
    if (!on_) return;
    start_ = last_ = std::chrono::steady_clock::now();
    cpuStart_ = cpuLast_ = threadCpu();
  }
  void mark(const char* phase) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const double cpu = threadCpu();
    phases_ += std::string(phases_.empty() ? "" : ", ") + phase + " " + ms(now - last_) + " (" +
               ms(cpu - cpuLast_) + ")";
    last_ = now;
    cpuLast_ = cpu;
  }
  /// "created in W ms (this thread's CPU C ms): phase W (C), ..., in ms".
  std::string text() const {
    return "created in " + ms(last_ - start_) + " ms (this thread's CPU " +
           ms(cpuLast_ - cpuStart_) + " ms): " + phases_ + ", in ms";
  }

 private:
  static double threadCpu() {
    rusage u{};
    if (::getrusage(RUSAGE_THREAD, &u) != 0) return 0;
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
  }
  static std::string ms(double seconds) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", seconds * 1e3);
    return b;
  }
  static std::string ms(std::chrono::steady_clock::duration d) {
    return ms(std::chrono::duration<double>(d).count());
  }
  bool on_;
  std::chrono::steady_clock::time_point start_{}, last_{};
  double cpuStart_ = 0, cpuLast_ = 0;
  std::string phases_;
};

// Every rank of a world communicator publishes the world size it was started with. Rank 0
// reads every other rank's, in rank order, then publishes its verdict ("ok", or what it found);
// every other rank compares its size with rank 0's, then waits for the verdict. Ranks started
// with different sizes thus fail at once, every one of them, with Mismatch naming both sizes,
// instead of waiting out the connect timeout for ranks that do not exist. Reading in rank order
// never waits for a missing rank before reaching one that disagrees: if rank 0's size is larger
// than the number of ranks started, some started rank has another size, and ranks below that
// number all exist.
void checkWorldSize(Store& store, int rank, int size, std::chrono::milliseconds timeout) {
  using SteadyClock = std::chrono::steady_clock;
  const auto key = [](int r) { return "join/size/" + std::to_string(r); };
  const std::string verdictKey = "join/verdict";
  const std::string self =
      "rank " + std::to_string(rank) + " (world size " + std::to_string(size) + ")";
  store.setString(key(rank), std::to_string(size));
  const auto deadline = SteadyClock::now() + timeout;
  const auto getBefore = [&](const std::string& k, const std::string& what) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        std::max(deadline - SteadyClock::now(), SteadyClock::duration::zero()));
    try {
      return store.getString(k, left);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout, self + " timed out after " + std::to_string(timeout.count()) +
                                          " ms waiting for " + what + " (" + e.detail() + ")");
    }
  };
  const auto mismatch = [&](int peer, const std::string& theirs) {
    return "rank " + std::to_string(rank) + " was started with a world size of " +
           std::to_string(size) + ", rank " + std::to_string(peer) + " with " + theirs +
           " (every rank must be started with the same world size: BRAID_WORLD_SIZE or the "
           "launcher's)";
  };
  if (rank != 0) {
    const std::string theirs = getBefore(key(0), "rank 0 to join");
    if (theirs != std::to_string(size)) throw Error(ErrorCode::Mismatch, mismatch(0, theirs));
    const std::string verdict = getBefore(verdictKey, "rank 0 to see every rank join");
    if (verdict == "ok") return;
    // "M:" or "T:" and what rank 0 found.
    throw Error(verdict.rfind("M:", 0) == 0 ? ErrorCode::Mismatch : ErrorCode::Timeout,
                self + " cannot join: " + verdict.substr(std::min<std::size_t>(2, verdict.size())));
  }
  for (int peer = 1; peer < size; ++peer) {
    try {
      const std::string theirs = getBefore(key(peer), "rank " + std::to_string(peer) + " to join");
      if (theirs != std::to_string(size)) throw Error(ErrorCode::Mismatch, mismatch(peer, theirs));
    } catch (const Error& e) {
      // Tell the ranks that agreed with rank 0, so that they fail now as well.
      try {
        store.setString(verdictKey,
                        std::string(e.code() == ErrorCode::Mismatch ? "M:" : "T:") + e.detail());
      } catch (const Error&) {
      }
      throw;
    }
  }
  store.setString(verdictKey, "ok");
}

std::unique_ptr<Comm::Impl> makeImpl(std::shared_ptr<Store> store,
                                     std::shared_ptr<TcpStoreServer> server, int rank, int size,
                                     std::string id, const Options& opts,
                                     const topology::Topology* parentTopology = nullptr,
                                     std::span<const int> members = {},
                                     const tuning::CostParams* parentParams = nullptr,
                                     const transport::Transport* parentTransport = nullptr) {
  PhaseClock clock(opts.logLevel >= 2);
  auto impl = std::make_unique<Comm::Impl>();
  impl->driverLink = std::make_shared<Comm::Impl::DriverLink>();
  impl->driverLink->impl = impl.get();
  impl->rank = rank;
  impl->size = size;
  impl->id = std::move(id);
  impl->opts = opts;
  impl->commHash = core::commIdHash(impl->id);
  impl->origin = core::Clock::now();
  impl->rules = tuning::parseRules(opts.algo, "BRAID_ALGO");
  if (opts.deterministic) tuning::checkDeterministicRules(impl->rules, "BRAID_ALGO");
  // The tuning file: parameters, and rules applied after BRAID_ALGO's.
  tuning::CostParams costParams;
  if (!opts.tuneFile.empty()) {
    std::vector<tuning::Rule> fileRules;
    costParams = tuning::loadCostParams(opts.tuneFile, "BRAID_TUNE_FILE", &fileRules);
    if (opts.deterministic)
      tuning::checkDeterministicRules(fileRules, "BRAID_TUNE_FILE=" + opts.tuneFile);
    impl->rules.insert(impl->rules.end(), fileRules.begin(), fileRules.end());
  }
  if (opts.chunkBytes == 0)
    throw Error(ErrorCode::InvalidArgument, "Options::chunkBytes must be positive");
  if (opts.bufferBytes < 64)
    throw Error(ErrorCode::InvalidArgument, "Options::bufferBytes must be at least 64 bytes");
  core::applyProcessSettings(opts);
  {
    // The machine profile, once per process (docs/architecture.md, "Decisions from measurement").
    const core::MachineProfile& profile = core::applyMachineProfile(opts);
    static std::atomic<bool> reported{false};
    if (!reported.exchange(true)) {
      for (const std::string& w : profile.warnings) impl->log(1, w);
      for (const core::TuneDecision& d : profile.decisions)
        impl->log(2, "machine profile: " + d.name + " " + d.value + " (" + d.source + ")");
    }
  }
  clock.mark("options and machine profile");
  impl->storeServer = std::move(server);
  impl->store = std::move(store);
  impl->commStore = std::make_shared<PrefixStore>(impl->store, "braid/" + impl->id + "/");
  transport::TcpOptions tcp;
  {
    // BRAID_LISTEN_ADDR, else BRAID_SOCKET_IFNAME, else the address reaching the store
    // (restricted to BRAID_SOCKET_FAMILY); see transport/tcp/interfaces.hpp.
    std::string storeLocal;
    if (auto* ts = dynamic_cast<TcpStore*>(impl->store.get())) storeLocal = ts->localAddress();
    const transport::tcp::ListenChoice choice = transport::tcp::chooseListenAddress(
        {opts.listenAddress, opts.socketIfname, opts.socketFamily},
        opts.socketIfname.empty() && opts.socketFamily == 0
            ? std::vector<transport::tcp::InterfaceAddress>{}
            : transport::tcp::localInterfaceAddresses(),
        storeLocal, rank);
    tcp.listenAddress = choice.address;
    tcp.portLow = opts.portRangeLow;
    tcp.portHigh = opts.portRangeHigh;
    impl->log(2, "rank " + std::to_string(rank) + ": tcp data listener address " + choice.address +
                     " (" + choice.reason + ")" +
                     (opts.portRangeLow != 0 ? ", ports " + std::to_string(opts.portRangeLow) +
                                                   "-" + std::to_string(opts.portRangeHigh)
                                             : std::string()));
  }
  tcp.connectTimeout = opts.connectTimeout;
  tcp.spin = opts.spin;
  tcp.security = opts.security;
  tcp.socketThreads = opts.socketThreads;
  tcp.socketsPerThread = opts.socketsPerThread;
  tcp.stripeMinBytes = opts.socketStripeMinBytes;
  tcp.lazyConnect = opts.lazyConnect;
  transport::TransportOptions transportOptions;
  transportOptions.tcp = tcp;
  transportOptions.shmDisable = opts.shmDisable;
  transportOptions.interHost = opts.interHostTransport;
  transportOptions.chunkBytes = opts.chunkBytes;
  transportOptions.shm.slots = opts.shmSlots;
  transportOptions.shm.slotBytes = opts.shmSlotBytes;
  transportOptions.shm.maxSegmentBytes = opts.shmMaxSegmentBytes;
  transportOptions.shm.cmaThresholdBytes = opts.shmCmaThresholdBytes;
  transportOptions.shm.cmaDisable = opts.shmCmaDisable;
  transportOptions.shm.hostCpus = opts.shmHostCpus;
  transportOptions.shm.lightWake = opts.shmLightWake;
  transportOptions.shm.forceNamedSegment = opts.shmNamedSegment;
  transportOptions.shm.stagingBytes = opts.shmStagingBytes;
  transportOptions.shm.chunkBytes = opts.shmChunkBytes != 0 ? opts.shmChunkBytes : opts.chunkBytes;
  transportOptions.shm.chunkFrom = opts.shmChunkBytes != 0 ? "BRAID_SHM_CHUNK_SIZE"
                                   : opts.chunkBytes != Options{}.chunkBytes ? "BRAID_CHUNK_SIZE"
                                                                             : "";
  transportOptions.shm.measureStreaming = true;
  transportOptions.shm.tuneCachePath = core::tuneCachePath(opts);
  transportOptions.shm.tuneMaxOffCpuPermille =
      static_cast<std::uint64_t>(std::clamp(opts.tuneMaxBusyPercent, 0, 100)) * 10;
  transportOptions.shm.tuneKey = core::machineKey();
  // Shared connections: this communicator's lane is its id's hash (the same on every rank; 0
  // means "no lane"); sub-communicators view the parent's TCP connections on their own.
  transportOptions.shareConnections = opts.shareConnections;
  transportOptions.lane = impl->commHash != 0 ? impl->commHash : 1;
  transportOptions.describeTag = [](std::uint64_t t) { return core::describeTag(t); };
  // World communicators only: a sub-communicator's size comes from its parent's gathered data.
  if (parentTopology == nullptr) {
    static std::atomic<bool> checkedEnvironment{false};
    if (!checkedEnvironment.exchange(true))
      for (const std::string& w : environmentWarnings(environ)) impl->log(1, w);
  }
  if (parentTopology == nullptr && size > 1) {
    if (opts.security.authKey.empty()) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        impl->log(1,
                  "no BRAID_AUTH_KEY: this job's store and ranks accept any peer that can reach "
                  "their ports (docs/security.md); set BRAID_AUTH_KEY (at least 128 random "
                  "bits, the same on every rank) or BRAID_AUTH_KEY_FILE=FILE (mode 0600), or "
                  "start the job with braid-run, which generates one");
    }
    checkWorldSize(*impl->commStore, rank, size, opts.connectTimeout);
  }
  clock.mark("join");
  std::vector<std::string> hosts;
  impl->transport = transport::createTransport(
      *impl->commStore, rank, size, transportOptions,
      dynamic_cast<const transport::RoutedTransport*>(parentTransport), members, &hosts);
  impl->transport->setTagDescriber([](std::uint64_t t) { return core::describeTag(t); });
  clock.mark("transport");
  impl->startDiagnosis();
  impl->startElastic();
  impl->scratchMemory = std::make_unique_for_overwrite<std::uint8_t[]>(opts.bufferBytes);
  impl->scratch = {impl->scratchMemory.get(), opts.bufferBytes};
  clock.mark("diagnosis and liveness");
  // Gathered by node: the hosts as the transport grouped them (with shared memory off every rank
  // is a host of its own).
  const std::vector<int> nodeOf = nodeIndices(hosts);
  impl->topo =
      core::setupTopology(*impl->commStore, rank, size, opts, parentTopology, members, nodeOf);
  // A topology a hierarchy can run on: the object that builds its sub-communicators on first
  // use (nothing is built here; core/comm_groups.cpp).
  if (impl->topo.size() == size && impl->topo.numNodes() >= 2 && impl->topo.maxLocalSize() >= 2)
    impl->groups = core::makeCommGroups(*impl);
  clock.mark("topology");
  if (parentParams != nullptr) {
    costParams = *parentParams;  // measured or loaded once, for the world communicator
  } else if (opts.tune && size > 1) {
    costParams = core::calibrate(
        *impl->transport, *impl->commStore, impl->topo, rank, size, costParams,
        core::collectiveTag(Collective::Barrier, DataType::Uint8, ReduceOp::Sum, 0,
                            core::kTagSeqMask, 0x74756e65 /* "tune" */, impl->commHash),
        opts.connectTimeout);
    clock.mark("calibration");
  }
  impl->model = std::make_unique<tuning::CostModel>(std::move(costParams), impl->topo, size,
                                                    std::min(opts.chunkBytes, opts.bufferBytes / 2),
                                                    opts.hierPieceBytes, opts.bufferBytes);
  if (opts.logLevel >= 2) {
    std::string paths;
    const std::string wake = transport::shmWakeMode(*impl->transport);
    for (int p = 0; p < size; ++p)
      paths += (p ? " " : "") + std::to_string(p) + ":" + transport::pathTo(*impl->transport, p);
    impl->log(2, "joined: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                     ", paths to peers [" + paths + "], tcp listen " +
                     (tcp.listenAddress.empty() ? std::string("127.0.0.1") : tcp.listenAddress) +
                     ", kernels " + kernels::selectedIsa() +
                     (wake.empty() ? std::string() : ", shm wake-ups " + wake));
    const std::string single = transport::shmSingleCopy(*impl->transport);
    if (!single.empty()) impl->log(2, "shm single copy: " + single);
    const std::string chunk = transport::shmDirectChunk(*impl->transport);
    if (!chunk.empty()) impl->log(2, "shm chunk: " + chunk);
    const std::string streaming = transport::shmDirectStreaming(*impl->transport);
    if (!streaming.empty()) impl->log(2, "shm streaming stores: " + streaming);
    impl->log(2, core::describeTopology(impl->topo, rank));
    if (opts.tune && size > 1 && parentParams == nullptr && rank == 0) {
      // The measurement in BRAID_TUNE_FILE syntax, to keep (docs/plan.md).
      std::string lines = impl->model->params().format();
      lines = lines.substr(lines.find('\n') + 1);
      for (auto nl = lines.find('\n'); nl != std::string::npos; nl = lines.find('\n', nl))
        lines.replace(nl, 1, nl + 1 == lines.size() ? "" : "; ");
      impl->log(2, "BRAID_TUNE measured: " + lines);
    }
    impl->log(2, "cost model: " + impl->model->params().summary() +
                     (impl->model->decides() ? ", selects algorithms"
                                             : ", predictions only (one host, fixed policy)"));
  }
  impl->finishBootstrap();
  clock.mark("bootstrap done");
  if (opts.logLevel >= 2) impl->log(2, clock.text());
  return impl;
}

}  // namespace

// The bootstrap's keys, by the prefix of the step that writes them: the world size check
// (join/), host identities with the transports' entries (host/: the shared-memory offers, the
// TCP listeners' addresses or the UCX worker addresses), topology (topo/), the calibration
// (tune/).
// Each is read only while the communicator is created (a lazy TCP transport dials from the
// gathered table it keeps).
void Comm::Impl::finishBootstrap() {
  formed = true;
  if (!opts.storeCleanup || !commStore->supportsDelete()) return;
  try {
    if (commStore->add("boot/done", 1) != size) return;
    std::int64_t removed = 0;
    for (const char* p : {"join/", "host/", "topo/", "tune/", "boot/"})
      removed += commStore->deletePrefix(p);
    log(2, "bootstrap done on every rank: deleted its " + std::to_string(removed) + " store keys");
  } catch (const Error& e) {
    log(2, "bootstrap keys not deleted: " + std::string(e.what()));
  }
}

void Comm::Impl::releaseNamespace() {
  if (!formed || !opts.storeCleanup || !commStore || !commStore->supportsDelete()) return;
  try {
    // Best effort, and quick: the rank that served the store may have exited already (its
    // process finished first); a refused connection gives up at once.
    const auto bound =
        std::min<std::chrono::milliseconds>(opts.connectTimeout, std::chrono::seconds(10));
    if (commStore->addIfReachable("left", 1, bound) != size) return;
    const std::int64_t removed = commStore->deletePrefix("");
    log(2,
        "every rank left: deleted the communicator's " + std::to_string(removed) + " store keys");
  } catch (const Error& e) {
    log(2, "communicator keys not deleted: " + std::string(e.what()));
  }
}

std::unique_ptr<Comm::Impl> Comm::Impl::make(std::shared_ptr<Store> store,
                                             std::shared_ptr<TcpStoreServer> server, int rank,
                                             int size, std::string id, const Options& opts,
                                             const topology::Topology* parentTopology,
                                             std::span<const int> members,
                                             const tuning::CostParams* parentParams) {
  // Not a split: never shares the connections of another communicator (shrink and grow run
  // after failures, whose connections are not to be trusted).
  return makeImpl(std::move(store), std::move(server), rank, size, std::move(id), opts,
                  parentTopology, members, parentParams, nullptr);
}

std::unique_ptr<Comm::Impl> Comm::Impl::makeChild(std::span<const int> members,
                                                  std::string childId) {
  Options o = opts;
  // The parent's rules apply, but never forced: a rule naming a row that cannot run here (the
  // hierarchical row itself) is skipped, so "hierarchical;reducescatterv:ring" steers a phase.
  o.algoForce = false;
  o.tune = false;
  o.timeline.clear();
  o.metricsFile.clear();
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  if (newRank == static_cast<int>(members.size()))
    throw Error(ErrorCode::Internal, "rank " + std::to_string(rank) + " of communicator " + id +
                                         " is not a member of its sub-communicator " + childId);
  return makeSub(newRank, members, std::move(childId), o);
}

std::unique_ptr<Comm::Impl> Comm::Impl::makeSub(int newRank, std::span<const int> members,
                                                std::string childId, const Options& o) {
  return makeImpl(store, storeServer, newRank, static_cast<int>(members.size()), std::move(childId),
                  o, &topo, members, &model->params(), transport.get());
}

std::unique_ptr<Comm> Comm::fromEnv(const Options& options) {
  return create(LaunchInfo::fromEnv(), options);
}

namespace {

// The address rank 0 publishes through PMIx for a job on several hosts: BRAID_LISTEN_ADDR or
// BRAID_SOCKET_IFNAME's choice when set, else the first address of an interface that is up and
// not loopback (IPv4 first, link-local IPv6 never; of BRAID_SOCKET_FAMILY when set), as NCCL's
// bootstrap picks its interface; loopback when there is none.
std::string addressForPeers(const Options& o, int rank) {
  const auto interfaces = transport::tcp::localInterfaceAddresses();
  if (!o.listenAddress.empty() || !o.socketIfname.empty())
    return transport::tcp::chooseListenAddress({o.listenAddress, o.socketIfname, o.socketFamily},
                                               interfaces, "", rank)
        .address;
  for (int family : {4, 6}) {
    if (o.socketFamily != 0 && o.socketFamily != family) continue;
    for (const auto& a : interfaces)
      if (a.family == family && !a.loopback && !a.linkLocal) return a.address;
  }
  return o.socketFamily == 6 ? "::1" : "127.0.0.1";
}

// "host:port" or "[v6]:port" as rank 0 published it.
void parseExchanged(const std::string& s, LaunchInfo& li) {
  const auto colon = s.rfind(':');
  std::string host = colon == std::string::npos ? "" : s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned long port = 0;
  try {
    port = colon == std::string::npos ? 0 : std::stoul(s.substr(colon + 1));
  } catch (const std::exception&) {
    port = 0;
  }
  if (host.empty() || port == 0 || port > 65535)
    throw Error(ErrorCode::Internal, "rank " + std::to_string(li.rank) + ": rank 0 published '" +
                                         s + "' through PMIx, which is not HOST:PORT");
  li.storeHost = host;
  li.storePort = static_cast<std::uint16_t>(port);
}

}  // namespace

std::shared_ptr<TcpStoreServer> serveLaunchStore(LaunchInfo& launch, const Options& options) {
  std::shared_ptr<TcpStoreServer> server;
  if (launch.storeSource == "pmix") {
    // Rank 0 binds first (a free port: nothing to collide with), then the address goes through
    // the launcher's PMIx server to every rank.
    std::string mine;
    if (launch.rank == 0) {
      const bool oneHost = !launch.storeHost.empty();
      const std::string host = oneHost ? launch.storeHost : addressForPeers(options, 0);
      server = std::make_shared<TcpStoreServer>(oneHost ? host : "", 0, options.security);
      mine = host.find(':') != std::string::npos
                 ? "[" + host + "]:" + std::to_string(server->port())
                 : host + ":" + std::to_string(server->port());
    }
    parseExchanged(bootstrap::pmixExchange(mine, launch.rank, options.connectTimeout), launch);
  } else if (launch.rank == 0 && !launch.storeExternal) {
    try {
      server = std::make_shared<TcpStoreServer>(launch.storeBindAny ? "" : launch.storeHost,
                                                launch.storePort, options.security);
    } catch (const Error& e) {
      if (launch.storeSource != "slurm") throw;
      throw Error(e.code(), "rank 0 (" + launch.jobId + "): cannot serve the store on port " +
                                std::to_string(launch.storePort) +
                                ", derived from Slurm's "
                                "variables (" +
                                launch.storeDetail + "): " + e.detail() +
                                "; another program or job holds it: set BRAID_STORE=HOST:PORT");
    }
  }
  return server;
}

// Rank 0 of a launcher-derived store records the job's identity; the others check it, so a
// derived port held by another job's store is an error naming both jobs.
void checkLaunchStoreJob(Store& store, const LaunchInfo& li, const Options& o) {
  if (li.jobId.empty()) return;
  const std::string key = "braid/launch/job";
  const std::string where = "rank " + std::to_string(li.rank) + ": the store at " + li.storeHost +
                            ":" + std::to_string(li.storePort) + " (" + li.storeDetail + ")";
  if (li.rank == 0) {
    store.set(key, std::vector<std::uint8_t>(li.jobId.begin(), li.jobId.end()));
    return;
  }
  std::vector<std::uint8_t> got;
  try {
    got = store.get(key, o.connectTimeout);
  } catch (const Error& e) {
    throw Error(e.code(), where + " did not say which job it serves within " +
                              std::to_string(o.connectTimeout.count()) +
                              " ms (another program holds the port?): " + e.detail());
  }
  const std::string theirs(got.begin(), got.end());
  if (theirs != li.jobId)
    throw Error(ErrorCode::InvalidArgument, where + " serves " + theirs + ", not " + li.jobId +
                                                ": the port is taken by another job; set "
                                                "BRAID_STORE=HOST:PORT");
}

namespace {

void checkRank(const char* op, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::InvalidArgument, std::string(op) + ": rank " + std::to_string(rank) +
                                                " is outside world size " + std::to_string(size));
}

void checkStore(const char* op, const std::shared_ptr<Store>& store) {
  if (store == nullptr)
    throw Error(ErrorCode::InvalidArgument, std::string(op) + ": store is null");
}

// Each rank counts the communicators it created through this store, so the k-th world
// communicator of every rank gets the same id (and its own key namespace).
std::string nextWorldId(Store& store, int rank) {
  return std::to_string(store.add("braid/generation/" + std::to_string(rank), 1) - 1);
}

}  // namespace

std::unique_ptr<Comm> Comm::create(const LaunchInfo& launchIn, const Options& options) {
  checkRank("Comm::create", launchIn.rank, launchIn.size);
  if (launchIn.size == 1 && launchIn.storePort == 0 && launchIn.storeSource != "pmix")
    return create(std::make_shared<MemoryStore>(), 0, 1, options);
  LaunchInfo launch = launchIn;
  std::shared_ptr<TcpStoreServer> server = serveLaunchStore(launch, options);
  auto store =
      std::make_shared<TcpStore>(launch.storeHost, launch.storePort, options.connectTimeout,
                                 TcpStore::kDefaultOpTimeout, options.security);
  checkLaunchStoreJob(*store, launch, options);
  std::string id = nextWorldId(*store, launch.rank);
  return std::unique_ptr<Comm>(new Comm(makeImpl(std::move(store), std::move(server), launch.rank,
                                                 launch.size, std::move(id), options)));
}

std::unique_ptr<Comm> Comm::create(std::shared_ptr<Store> store, int rank, int size,
                                   const Options& options) {
  checkStore("Comm::create", store);
  checkRank("Comm::create", rank, size);
  std::string id = nextWorldId(*store, rank);
  return std::unique_ptr<Comm>(
      new Comm(makeImpl(std::move(store), nullptr, rank, size, std::move(id), options)));
}

std::future<std::unique_ptr<Comm>> Comm::createAsync(const LaunchInfo& launch,
                                                     const Options& options) {
  checkRank("Comm::createAsync", launch.rank, launch.size);
  return std::async(std::launch::async, [launch, options] { return create(launch, options); });
}

std::future<std::unique_ptr<Comm>> Comm::createAsync(std::shared_ptr<Store> store, int rank,
                                                     int size, const Options& options) {
  checkStore("Comm::createAsync", store);
  checkRank("Comm::createAsync", rank, size);
  std::string id = nextWorldId(*store, rank);  // here: numbered in the order of the calls
  return std::async(std::launch::async,
                    [store = std::move(store), rank, size, id = std::move(id), options]() mutable {
                      return std::unique_ptr<Comm>(new Comm(
                          makeImpl(std::move(store), nullptr, rank, size, std::move(id), options)));
                    });
}

}  // namespace braid
