// The transport a communicator uses, chosen per pair of ranks by the transport registry: each
// kind says which peers it can reach, at what priority, and whether this build and machine can
// run it. Shared memory between ranks of one host, then UCX (where built and an RDMA-capable
// device is present, or asked for), then TCP, behind one RoutedTransport.
#pragma once

#include <braid/store.hpp>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/routed_transport.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace braid::transport {

struct TransportOptions {
  /// The TCP transport; its connectTimeout bounds every transport's setup and its spin is every
  /// transport's spin (shm.setupTimeout and shm.spin are overwritten with them).
  TcpOptions tcp;
  /// Use TCP even between ranks of one host (BRAID_SHM_DISABLE=1).
  bool shmDisable = false;
  /// The shared-memory transport (BRAID_SHM_*).
  ShmOptions shm;
  /// The algorithms' pipeline chunk (Options::chunkBytes): what UCX's tcp receive segment is
  /// sized for (UcxOptions::chunkBytes).
  std::size_t chunkBytes = 0;
  /// Between hosts (BRAID_TRANSPORT): "auto", or the name of an inter-host kind ("tcp", "ucx").
  std::string interHost = "auto";
  /// Tests: this rank's host identity instead of hostIdentity(), to emulate several hosts.
  std::string hostIdentity;
  /// Shared connections (docs/architecture.md, "Shared connections"): the TCP leg becomes a
  /// transport with lanes that sub-communicators share (createTransport's `parent`), and this
  /// communicator posts on it through a LaneTransport on `lane` (!= 0: its id's hash).
  bool shareConnections = false;
  std::uint64_t lane = 0;
  /// Names tags in the errors of a shared TCP transport (it outlives the communicator that
  /// built it, so this must not refer to that communicator).
  std::function<std::string(std::uint64_t)> describeTag;
};

/// What a kind set up before the world's hosts were known (the shared-memory offer, the TCP
/// listeners, the UCX worker): its entry()
/// travels to every rank with the host entries, and create() gets it back with everyone's.
class PreparedKind {
 public:
  virtual ~PreparedKind() = default;
  /// One line (no '\n'): what the peers need to reach this rank.
  virtual std::string entry() const = 0;
};

/// One kind of transport in the registry.
struct TransportKind {
  /// "shm", "ucx", "tcp": what BRAID_TRANSPORT names and braid-info --paths shows.
  std::string name;
  /// Lower first: among the kinds that can reach a pair and can run, the first is used.
  int priority = 0;
  /// True: reaches only ranks of this rank's host (shares memory); false: any rank.
  bool sameHostOnly = false;
  /// Why this build or machine cannot run it ("" when it can): e.g. "this build has no UCX
  /// transport". The same answer on every rank of a job.
  std::function<std::string(const TransportOptions&)> cannotRun;
  /// Whether BRAID_TRANSPORT=auto picks it between hosts (when it can run).
  std::function<bool(const TransportOptions&)> autoPick;
  /// Optional: this rank's part of the kind's setup that needs no peer (a memfd offered,
  /// listening). Its entry is gathered with the host entries, so the kind reads no address of
  /// its own from the store.
  std::function<std::unique_ptr<PreparedKind>(int rank, int size, const TransportOptions&)> prepare;
  /// Collective over `peers` (ascending global ranks including `rank`): the transport that
  /// reaches exactly them; `paths[p]` is set to the path to each peer p (braid-info --paths).
  /// `prepared` is what prepare() returned on this rank (null for a kind without one) and
  /// `entries[r]` its entry() on rank r.
  /// No kind reads or writes the store: what it needs from its peers is in `entries`.
  std::function<std::unique_ptr<Transport>(
      int rank, int size, std::span<const int> peers, const TransportOptions& options,
      std::vector<std::string>& paths, std::unique_ptr<PreparedKind> prepared,
      std::vector<std::string> entries)>
      create;
};

/// Every kind this build knows, by priority: shm, ucx, tcp.
const std::vector<TransportKind>& transportKinds();

/// The kind BRAID_TRANSPORT (options.interHost) selects between hosts: the named one, or for
/// "auto" the first by priority that is not sameHostOnly, can run, and autoPick()s. Throws
/// Error(InvalidArgument) for an unknown name or a kind that cannot run here, saying why.
const TransportKind& interHostKind(const TransportOptions& options);

/// Collective over all `size` ranks. Publishes this rank's host identity under "host/<rank>"
/// (a rank with shmDisable publishes one of its own, so it shares memory with nobody), with the
/// entries of shared memory's prepare() (a memfd offered) and the inter-host kind's (the TCP
/// listeners' addresses), reads everyone's,
/// builds the shm transport among the ranks of this rank's host and, unless that is the whole
/// world, the inter-host kind (interHostKind) among all ranks (used for the other hosts only).
/// Always returns a RoutedTransport, so pathTo() answers for every communicator. A rank that never
/// publishes is named in an Error(Timeout) after tcp.connectTimeout. The host identities are
/// gathered through rank 0 (allGatherStrings: 3N - 1 store requests in all); `hosts`, when given,
/// receives each rank's host and shared-memory grouping in rank order (equal strings: ranks that
/// share memory; later gathers group ranks by them). A sub-communicator's transport (`parent`
/// non-null, options.shareConnections): rank r of the `size` ranks is rank toParent[r] of
/// `parent`'s communicator. Pairs that the parent reaches through shared TCP connections
/// (parent->laneLeg()) go through a new LaneTransport of them on options.lane: no socket is opened
/// (with BRAID_CONNECT=lazy, a pair the parent never used is dialed once, on first use, and shared
/// from then on). Shared memory is set up anew for the sub-communicator's ranks of this host (a
/// segment of its own); a parent without shared TCP connections (sharing off, UCX between hosts)
/// gives a transport of its own as above.
std::unique_ptr<RoutedTransport> createTransport(Store& store, int rank, int size,
                                                 const TransportOptions& options,
                                                 const RoutedTransport* parent = nullptr,
                                                 std::span<const int> toParent = {},
                                                 std::vector<std::string>* hosts = nullptr);

/// The path to `peer` when `t` is a RoutedTransport (see RoutedTransport::pathTo), else "".
std::string pathTo(const Transport& t, int peer);
/// How this rank's shared-memory group wakes sleepers: "light (membarrier)", "fenced", or ""
/// when `t` has no shared-memory leg (docs/env.md, BRAID_SHM_LIGHT_WAKE).
std::string shmWakeMode(const Transport& t);
/// From which size this rank's direct shared-memory collectives go single copy, and why
/// (ShmTransport::singleCopy), or "" when `t` has no shared-memory leg.
std::string shmSingleCopy(const Transport& t);
/// The direct shared-memory collectives' pipelining unit, and why (ShmTransport::directChunk),
/// or "" when `t` has no shared-memory leg.
std::string shmDirectChunk(const Transport& t);

/// The direct shared-memory collectives' streaming threshold, and why
/// (ShmTransport::directStreaming), or "" when `t` has no shared-memory leg.
std::string shmDirectStreaming(const Transport& t);

}  // namespace braid::transport
