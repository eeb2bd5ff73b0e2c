// braid public API: communicator configuration. Every environment variable braid reads is read
// in one place (Options::fromEnv / LaunchInfo::fromEnv) and listed by `braid-info --env`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace braid {

/// Who may connect to this process's store server and transport listeners, and how connections
/// prove they belong to the job (docs/security.md). Shared by the store and the transports.
struct SecurityOptions {
  /// Per-job secret (BRAID_AUTH_KEY). Non-empty: every store and peer connection runs a mutual
  /// HMAC-SHA256 challenge-response over it, and a peer without the same key is dropped (the
  /// side that connected fails with Error(Auth)). Empty: connections are not authenticated.
  /// braid-run generates one per job when the variable is not set.
  std::string authKey;
  /// Peer addresses allowed to connect (BRAID_WHITELIST=FILE): IPv4/IPv6 addresses or CIDR
  /// networks. Empty: any address. Loopback is not implied: list 127.0.0.1 when ranks or the
  /// store are reached over loopback.
  std::vector<std::string> allowedPeers;
  /// Bound on one incoming connection's handshake: a peer that stays silent or slow longer is
  /// dropped. Other connections are served meanwhile.
  std::chrono::milliseconds handshakeTimeout{10000};
  /// Bound on the memory a store server holds for its clients (BRAID_STORE_MAX_BYTES): keys and
  /// values stored (64 bytes of overhead each), request frames being read, replies not yet sent.
  /// A request beyond it is refused with an error the client throws (InvalidArgument naming the
  /// bound) and a logged WARN; the connection stays usable.
  std::size_t storeMaxBytes = std::size_t{1} << 30;
  /// The same for the clients of one host while the store has no authKey (every client is then
  /// unauthenticated; BRAID_STORE_MAX_PEER_BYTES). Not applied with a key.
  std::size_t storeMaxPeerBytes = std::size_t{256} << 20;
  /// Log every dropped connection (rate-limited) on stderr as a WARN naming the remote address.
  /// BRAID_DEBUG=NONE turns it off.
  bool logRejections = true;
};

struct Options {
  /// Pipelining unit: large messages are cut into chunks of this many bytes (BRAID_CHUNK_SIZE).
  std::size_t chunkBytes = 256 * 1024;
  /// Upper bound of the scratch memory one communicator allocates, once (BRAID_BUFFSIZE).
  std::size_t bufferBytes = 4 * 1024 * 1024;
  /// Hierarchical allreduce: pieces of this many bytes are pipelined through its in-node and
  /// network phases (BRAID_HIER_PIECE_SIZE); 0 (the default, "auto"): the cost model picks the
  /// piece per size (docs/plan.md).
  std::size_t hierPieceBytes = 0;
  /// Messages up to this size use latency-optimised algorithms (BRAID_SMALL_MSG_SIZE).
  std::size_t smallMessageBytes = 64 * 1024;
  /// Algorithm rules, e.g. "ring" or "allreduce:ring;allgather:ring" (BRAID_ALGO). A rule
  /// whose algorithm cannot run for an operation (its constraints, docs/algorithms.md) is
  /// skipped for it, and BRAID_DEBUG=INFO says why.
  std::string algo;
  /// The rules are requirements (BRAID_ALGO_FORCE=1; braid-perf --algo): an operation a
  /// matching rule's algorithm cannot run fails with Error(InvalidArgument) naming the
  /// algorithm, the constraint, the operation and the rank; nothing else runs in its place.
  bool algoForce = false;
  /// Bound on connection setup, store included (BRAID_CONNECT_TIMEOUT, milliseconds).
  std::chrono::milliseconds connectTimeout{60000};
  /// Default bound on one operation (BRAID_EXEC_TIMEOUT, milliseconds).
  std::chrono::milliseconds execTimeout{300000};
  /// Spin this long before sleeping while waiting (BRAID_SPIN_US, microseconds).
  std::chrono::microseconds spin{50};
  /// Address to listen on for peers; empty: the address this host uses to reach the store
  /// (BRAID_LISTEN_ADDR).
  std::string listenAddress;
  /// Log level: 0 none, 1 WARN, 2 INFO, 3 TRACE (BRAID_DEBUG=WARN|INFO|TRACE).
  int logLevel = 1;
  /// Ranks of one host talk through shared memory unless this is set (BRAID_SHM_DISABLE=1).
  bool shmDisable = false;
  /// The transport between hosts (BRAID_TRANSPORT): "auto" (UCX where this build has the UCX
  /// transport and it reports an RDMA-capable device, else TCP), "tcp" or "ucx" (an
  /// Error(InvalidArgument) at creation, saying why, where this build or machine cannot run it).
  std::string interHostTransport = "auto";
  /// Shared-memory rings: slots per ordered pair of ranks and bytes per slot
  /// (BRAID_SHM_SLOTS, BRAID_SHM_SLOT_SIZE); the segment of one host is bounded by
  /// shmMaxSegmentBytes (BRAID_SHM_MAX_SEGMENT): slots shrink until it fits.
  std::size_t shmSlots = 8;
  std::size_t shmSlotBytes = 64 * 1024;
  std::size_t shmMaxSegmentBytes = std::size_t{256} << 20;
  /// Same-host send/recv messages of at least this size go single-copy with process_vm_readv
  /// where the kernel allows it (BRAID_SHM_CMA_THRESHOLD); BRAID_SHM_CMA_DISABLE=1 never uses
  /// it. Unset (BRAID_SHM_CMA_THRESHOLD=auto, the default): 64 KiB where the host's ranks
  /// outnumber the CPUs they may run on together, else never (the rings, copying on both sides
  /// at once, are faster there: docs/benchmarks.md, "Point-to-point").
  std::optional<std::size_t> shmCmaThresholdBytes;
  bool shmCmaDisable = false;
  /// The CPUs this host's ranks can use at once, as the shared-memory transport assumes it
  /// (BRAID_SHM_HOST_CPUS): where the ranks outnumber them the host is crowded (waiters yield at
  /// once, single copy by default). 0 ("auto"): the union of the local ranks' affinity masks,
  /// capped by the tightest cgroup CPU limit among them. Must agree on every rank of a host.
  std::size_t shmHostCpus = 0;
  /// Wakers skip their memory fence and sleepers pay for it with membarrier(2) where every rank
  /// of the host could register for it (BRAID_SHM_LIGHT_WAKE=0: always the fence).
  bool shmLightWake = true;
  /// BRAID_SHM_NAMED: the host's segment is a named POSIX shm object (unlinked once every local
  /// rank mapped it) instead of a memfd that peers open through /proc.
  bool shmNamedSegment = false;
  /// Staging memory per rank in the host's segment for the direct shared-memory collectives
  /// (two halves; the pipelining unit of shm_direct is at most one half, or half / N where
  /// each rank stages one slot per peer). Rounded up to 4 KiB, at least 16 KiB, halved while
  /// the segment would exceed shmMaxSegmentBytes; 0: no staging, so no shm_direct / shm_ll
  /// (their classic algorithms run) (BRAID_SHM_STAGING).
  std::size_t shmStagingBytes = std::size_t{2} << 20;
  /// The pipelining unit of the direct shared-memory allreduce, reduce, broadcast and allgather
  /// (BRAID_SHM_CHUNK_SIZE; at most a staging half; reduce-scatter and alltoall, one slot per
  /// peer, keep chunkBytes). 0 ("auto"): chunkBytes when that is not the default; else, with a
  /// CPU per rank, measured on the machine for the host's rank count and kept in the machine
  /// profile (tuneCache); on a crowded host, chunkBytes.
  std::size_t shmChunkBytes = 0;
  /// Authentication and peer address filtering (BRAID_AUTH_KEY, BRAID_WHITELIST).
  SecurityOptions security;
  /// Deterministic reductions (BRAID_DETERMINISTIC=1): allreduce, reduce and reduce_scatter(v)
  /// reduce every element in rank order, ((x0 op x1) op x2) ..., each step rounded to the
  /// dtype, so results are bitwise identical across runs, ranks, algorithms and transports.
  /// Selection then picks only rank-ordered algorithms; a BRAID_ALGO rule forcing another one
  /// for a reduction is an Error(InvalidArgument) (docs/algorithms.md, "Deterministic mode").
  bool deterministic = false;
  /// Reduction kernel instruction set (BRAID_KERNEL_ISA): "" or "auto" = the best verified level
  /// (avx2 if present); "scalar", "avx2", "avx512", "avx512bf16" force a level (process-wide,
  /// applied when a communicator is created; results are identical at every level, only speed
  /// differs).
  std::string kernelIsa;
  /// The last-level cache size braid derives decisions from (BRAID_LLC_SIZE): outputs of at
  /// least half of it are written with non-temporal stores. 0 ("auto"): what the OS reports,
  /// bounded to 4-64 MiB (src/common/machine.hpp); `braid-info` prints both. Process-wide,
  /// applied when a communicator is created, like kernelIsa.
  std::size_t llcBytes = 0;
  /// The machine profile's file (BRAID_TUNE_CACHE): what braid measured on this machine (the
  /// streaming threshold and effective cache, the shared-memory single-copy threshold), read by
  /// the next process instead of measuring again; a file of another CPU is measured over. "" =
  /// $XDG_CACHE_HOME/braid/machine.tune, else ~/.cache/braid/machine.tune; "off" = measure in
  /// every process, keep nothing. `braid-info --tune` prints what was chosen and why.
  std::string tuneCache;
  /// A measurement of the machine profile during which a rank was off its CPU for more than
  /// this percentage of the time (other processes held the CPUs) is used by the process that
  /// took it and not kept in tuneCache's file (BRAID_TUNE_MAX_BUSY; 100: keep every one).
  int tuneMaxBusyPercent = 20;
  /// A topology JSON file used instead of the one gathered at creation (BRAID_TOPO_FILE): a
  /// fabricated layout for planning and tests. Its rank count must equal the communicator's.
  std::string topoFile;
  /// Rank 0 of every communicator not created by split/subgroup writes the topology to this
  /// file as JSON (BRAID_TOPO_DUMP).
  std::string topoDump;
  /// Training layer (include/braid/fusion.hpp): a fusion buffer sends its queued tensors once
  /// this many bytes are queued (BRAID_FUSION_THRESHOLD), or once the oldest has waited the
  /// cycle time (BRAID_CYCLE_TIME, milliseconds, fractions allowed).
  std::size_t fusionThresholdBytes = std::size_t{64} << 20;
  std::chrono::microseconds cycleTime{1000};

  // ---- diagnosis (docs/troubleshooting.md) ----
  /// Operations each communicator keeps in its flight recorder (BRAID_FLIGHT_RECORDER); 0 keeps
  /// none. Dumped when an operation fails the communicator and on SIGUSR1.
  std::size_t flightRecorderOps = 128;
  /// Directory for flight recorder dumps (BRAID_FLIGHT_DIR); empty: dumps go to stderr.
  std::string flightDir;
  /// Install the SIGUSR1 handler that dumps every communicator's flight recorder, unless the
  /// application has its own (BRAID_FLIGHT_SIGNAL=0: never).
  bool flightSignal = true;
  /// Chrome-trace timeline of every operation (BRAID_TIMELINE=FILE, per rank; "%r" -> rank).
  std::string timeline;
  /// An operation running this long gets its rank's position published to the store, so that
  /// other ranks' timeout errors can say where it is (BRAID_DIAG_STALL, ms; 0: never).
  std::chrono::milliseconds diagStall{1000};
  /// How long a rank whose operation failed the communicator waits for the other ranks' reports
  /// before composing its error (BRAID_DIAG_GRACE, ms; 0: no exchange).
  std::chrono::milliseconds diagGrace{2000};
  /// Measurement switch only (BRAID_FINGERPRINT=0): collective tags carry no fingerprint of
  /// count and communicator, so such mismatches go undetected. Keep it on.
  bool opFingerprint = true;
  /// Straggler attribution (BRAID_STRAGGLER=N): precise start and end stamps on every N-th
  /// collective (by sequence number; 1: every one), so that an exchange of the ranks' stamps
  /// names the rank that arrived last at each of them (docs/troubleshooting.md, "Who is slow").
  /// 0: off, except with metrics or BRAID_DEBUG=INFO, which sample every
  /// kDefaultStragglerSample-th.
  unsigned stragglerSample = 0;
  static constexpr unsigned kDefaultStragglerSample = 64;
  /// OpenMetrics text file per rank (BRAID_METRICS_FILE; "%r" -> rank, "%c" -> communicator),
  /// written every metricsInterval and at destruction. Empty: no file.
  std::string metricsFile;
  /// BRAID_METRICS_INTERVAL (a unit: 10s, 500ms, 1m; a bare number is milliseconds).
  std::chrono::milliseconds metricsInterval{10000};
  /// Serve GET /metrics on this port (BRAID_METRICS_PORT; 0 picks a free one, logged at INFO);
  /// -1: no server. One server per process, for all its communicators.
  int metricsPort = -1;
  /// The address the metrics server binds (BRAID_METRICS_ADDR; loopback by default).
  std::string metricsAddress = "127.0.0.1";

  // ---- network interfaces (docs/env.md) ----
  /// Interfaces the TCP data listener may use, NCCL_SOCKET_IFNAME's syntax: comma list of name
  /// prefixes, '^' excludes, '=' exact names (BRAID_SOCKET_IFNAME). Empty: the address that
  /// reaches the store. BRAID_LISTEN_ADDR (listenAddress) takes precedence.
  std::string socketIfname;
  /// Address family of the data listener: 0 any, 4 IPv4, 6 IPv6 (BRAID_SOCKET_FAMILY).
  int socketFamily = 0;
  /// Data listeners bind a port in [portRangeLow, portRangeHigh]; 0: an ephemeral port
  /// (BRAID_PORT_RANGE=LO-HI).
  std::uint16_t portRangeLow = 0;
  std::uint16_t portRangeHigh = 0;
  // ---- algorithm selection (docs/plan.md) ----
  /// Measure the cost model's parameters when a communicator is created (BRAID_TUNE=1): a
  /// ping-pong per link class between a couple of rank pairs and the active reduction kernel's
  /// speed, bounded to well under a second; rank 0's measurement is shared through the store so
  /// every rank selects alike. Sub-communicators inherit their parent's parameters.
  bool tune = false;
  /// A tuning file (BRAID_TUNE_FILE): cost-model parameters and BRAID_ALGO-grammar rules
  /// (`algo = ...` lines, applied after BRAID_ALGO's). With tune also set, the measurement wins
  /// for the parameters, the file's rules still apply.
  std::string tuneFile;
  // ---- multi-stream TCP (docs/env.md, docs/architecture.md) ----
  /// TCP sockets per peer: socketThreads x socketsPerThread (BRAID_SOCKET_NTHREADS x
  /// BRAID_NSOCKS_PERTHREAD), each >= 1, the product at most 16; 1 x 1: one socket per peer.
  /// Each socket is a stream driven by its own progress engine; messages of at least
  /// socketStripeMinBytes (BRAID_SOCKET_STRIPE_MIN) are cut into one piece per stream.
  int socketThreads = 1;
  int socketsPerThread = 1;
  std::size_t socketStripeMinBytes = 256 * 1024;
  /// When TCP and UCX pairs connect (BRAID_CONNECT): true ("lazy", the default) a pair when a
  /// request to the peer is first posted on either side, so a rank holds sockets only to the peers
  /// its algorithms use; false ("eager") every pair at creation, so setup errors surface there
  /// (docs/architecture.md, "When connections are made"). braid-check always connects eagerly.
  bool lazyConnect = true;
  /// Sub-communicators (split, subgroup) post over their parent's TCP connections, each on a
  /// lane of its own, instead of opening sockets (BRAID_SHARE_CONNECTIONS, default on; false:
  /// every communicator its own sockets, as isolation). docs/architecture.md, "Shared
  /// connections".
  bool shareConnections = true;
  /// Whether a communicator deletes its store keys (BRAID_STORE_CLEANUP): the bootstrap's once
  /// every rank finished it, the rest once every rank destroyed it (docs/architecture.md,
  /// "Bootstrap"). false keeps them, to inspect a bootstrap in the store.
  bool storeCleanup = true;

  /// Defaults overridden by the BRAID_* environment variables. Throws Error(InvalidArgument)
  /// naming the variable when a value does not parse.
  static Options fromEnv();
};

/// Who this process is in the job, from a launcher's environment. Precedence (first set wins):
/// BRAID_RANK/BRAID_WORLD_SIZE/BRAID_LOCAL_RANK, then torchrun's RANK/WORLD_SIZE/LOCAL_RANK,
/// then Open MPI's OMPI_COMM_WORLD_*, then Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID.
/// Store address: BRAID_STORE (host:port), else MASTER_ADDR:MASTER_PORT, else what the launcher
/// of the rank convention gives: under Slurm derived from the step's node list, job and step id;
/// under Open MPI exchanged through its PMIx server when the communicator is created
/// (docs/env.md, "Store address").
struct LaunchInfo {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  std::string storeHost = "127.0.0.1";
  std::uint16_t storePort = 0;
  /// When false, rank 0 serves the store at storeHost:storePort (BRAID_STORE_EXTERNAL=1 sets true).
  bool storeExternal = false;
  /// Which convention supplied rank and size: "braid", "torchrun", "openmpi", "slurm", "default".
  std::string source = "default";
  /// Where storeHost/storePort came from: "BRAID_STORE", "MASTER_ADDR/MASTER_PORT", "slurm"
  /// (derived), "pmix" (exchanged at creation: storePort is 0 until then), "none".
  std::string storeSource = "none";
  /// How the address was derived (braid-info prints it; errors about the store quote it).
  std::string storeDetail;
  /// Non-empty: the job this launch belongs to ("slurm job 42 step 0"). Rank 0 records it in the
  /// store and the other ranks check it, so a derived port that another job's store holds is an
  /// Error naming both jobs, never a join of the wrong job.
  std::string jobId;
  /// Rank 0 binds its store on every local address (storeHost is how the others reach it).
  bool storeBindAny = false;

  static LaunchInfo fromEnv();
};

/// One documented environment variable.
struct EnvVarDoc {
  const char* name;
  const char* defaultValue;
  const char* meaning;
};
/// Every environment variable braid reads, with its default and meaning.
const std::vector<EnvVarDoc>& environmentVariables();
/// What looks wrong in an environment (`env`, as `environ`): a BRAID_* variable braid does not
/// know, naming the closest one it does (a typo such as BRAID_EXEC_TIMOUT, or a variable of a
/// newer release), and a timeout given as a bare number under a second (milliseconds, almost
/// surely meant as seconds). The world communicator's creation logs these once per process.
std::vector<std::string> environmentWarnings(char** env);

}  // namespace braid
