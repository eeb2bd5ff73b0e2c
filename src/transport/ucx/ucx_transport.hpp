// The UCX transport's entry points (docs/ucx.md). This header does not include UCX, so the
// rest of braid compiles the same with or without it: a build without UCX (pkg-config found no
// `ucx`, or -DBRAID_WITH_UCX=OFF) still has these functions, and createUcxTransport then throws
// an Error saying the build has no UCX.
//
// The transport (ucx_transport_impl.hpp) is one ucp context and worker per transport and one
// endpoint per peer. Worker addresses travel with the host entries the transport factory gathers
// (or, standalone, through the store under "<keyPrefix>/addr/<rank>"); the peers then run braid's
// handshake (common/handshake.hpp) over UCX, so a key mismatch is the same Error(Auth) as over TCP.
// Messages go out as ucp tagged sends: UCX picks eager sends for small messages and zero-copy
// rendezvous for large ones by itself (its registration cache keeps reused buffers registered). UCX
// reads its own variables (UCX_TLS, UCX_NET_DEVICES, ...); UcxOptions::config sets them for one
// transport.
#pragma once

#include <braid/options.hpp>
#include <braid/store.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/transport.hpp"

namespace braid::transport {

struct UcxOptions {
  /// Bound on the whole setup: store lookups, endpoint creation and every peer's handshake.
  std::chrono::milliseconds connectTimeout{60000};
  /// A waiter polls the worker this long before it arms it and sleeps on its event fd.
  std::chrono::microseconds spin{50};
  /// Poll without yielding for the whole spin (TcpOptions::busyPoll: set by the factory when
  /// this host's ranks have a CPU each).
  bool busyPoll = false;
  /// The job key (authKey) and the bound on one peer's handshake (handshakeTimeout). The
  /// address whitelist does not apply: UCX endpoints are not sockets braid accepts.
  SecurityOptions security;
  /// When pairs connect (BRAID_CONNECT, as TcpOptions::lazyConnect): false, every pair's
  /// endpoint and handshake at creation (setup errors surface there); true, a pair when a send
  /// or receive to the peer is first posted on either side (creation only opens the worker and
  /// learns the addresses).
  bool lazyConnect = false;
  /// Store namespace of the addresses (several UCX transports on one store need their own).
  std::string keyPrefix = "ucx";
  /// UCX settings of this transport's context, over UCX's own variables (ucp_config_modify):
  /// {"TLS", "tcp"} does what UCX_TLS=tcp does, for this transport only (the "UCX_" prefix is
  /// optional). A name or value UCX rejects: Error(InvalidArgument) naming it.
  std::vector<std::pair<std::string, std::string>> config;
  /// The algorithms' pipeline chunk (Options::chunkBytes; 0: none). UCX's tcp transport moves a
  /// rendezvous payload (with peer error handling, as braid's endpoints have it) in active
  /// messages no longer than its receive segment (UCX_TCP_RX_SEG_SIZE, 64 KiB by default); the
  /// transport sizes that segment to carry one chunk and its headers (at most kMaxRxSegment)
  /// unless UCX_TCP_RX_SEG_SIZE is set in the environment or in `config` (docs/ucx.md).
  std::size_t chunkBytes = 0;
};

/// The receive segment UcxOptions::chunkBytes asks for: one chunk and kRxSegmentHeaders of
/// headers, no less than UCX's default and no more than kMaxRxSegment (memory: UCX's tcp grows
/// its receive pool 8 segments at a time). "" where the transport leaves UCX's setting alone:
/// no chunk; the user set UCX_TCP_RX_SEG_SIZE (`fromEnvironment`: its value in the
/// environment, nullptr when unset; or an RX_SEG_SIZE entry in options.config, with or without
/// the UCX_ / TCP_ prefixes); or the transports UCX may use leave tcp out (a TLS entry of
/// options.config, else `tlsFromEnvironment`, UCX_TLS's value or nullptr): UCX warns about a
/// setting of a transport it does not load.
inline constexpr std::size_t kRxSegmentHeaders = 8 * 1024;
inline constexpr std::size_t kUcxDefaultRxSegment = 64 * 1024;
inline constexpr std::size_t kMaxRxSegment = 1024 * 1024 + kRxSegmentHeaders;
/// Its name for ucp_config_modify (UCX_TCP_RX_SEG_SIZE in the environment: a transport's
/// settings go without the transport's prefix there).
inline constexpr const char* kRxSegmentSetting = "RX_SEG_SIZE";
std::string tcpRxSegmentFor(const UcxOptions& options, const char* fromEnvironment,
                            const char* tlsFromEnvironment);
/// Whether a UCX_TLS value lets UCX use its tcp transport: unset or empty, "all", a list naming
/// tcp, or an exclusion list ("^sm,cma") that does not.
bool ucxTlsMayUseTcp(std::string_view tls);

/// True when this build has the UCX transport.
bool ucxAvailable() noexcept;
/// Why the build has no UCX transport ("" when it has one).
std::string ucxUnavailableReason();
/// "1.13.1" (the UCX library this process runs with), or "" without UCX.
std::string ucxVersion();
/// Endpoints this process's UCX transports have made so far (all of them together; 0 without
/// UCX): how tests see that a sub-communicator on shared endpoints made none.
std::size_t ucxEndpointsMade() noexcept;

/// Collective over all `size` ranks: creates this rank's UCX worker, publishes its address,
/// creates an endpoint to every peer and authenticates every pair (the higher rank initiates);
/// with options.lazyConnect, it reads every peer's address and leaves the endpoints and
/// handshakes to each pair's first use, whose request then fails with these errors.
/// Errors: Error(InvalidArgument) for rank/size; Error(Auth) "rank R failed to authenticate with
/// rank P at ..." on the rank whose key differs while the others time out naming it (as TCP);
/// Error(Timeout) naming the ranks that never published or never completed the handshake;
/// Error(Internal) naming the UCX call that failed; without UCX, Error(InvalidArgument) saying
/// the build has no UCX transport.
/// This standalone form publishes and reads the worker addresses itself (under
/// "<keyPrefix>/addr/<rank>"); communicators use the two steps below through the factory.
std::unique_ptr<Transport> createUcxTransport(Store& store, int rank, int size,
                                              const UcxOptions& options);

/// The first of the factory's two steps: this rank's context and worker, before anyone knows
/// where the others are; entry() (the worker address as hex text) is what the factory gathers
/// with the host entries, so the transport reads no key of its own from the store.
class UcxListening {
 public:
  virtual ~UcxListening() = default;
  virtual std::string entry() const = 0;
};
/// Opens the worker (the errors of createUcxTransport's own setup, before any peer).
std::unique_ptr<UcxListening> openUcx(int rank, int size, const UcxOptions& options);
/// The second step: endpoints and handshakes with `entries[r]` = rank r's entry(); otherwise
/// as createUcxTransport(Store&, ...). A malformed entry: Error(InvalidArgument) naming the rank.
std::unique_ptr<Transport> createUcxTransport(std::unique_ptr<UcxListening> opened,
                                              std::vector<std::string> entries, int rank, int size,
                                              const UcxOptions& options);

}  // namespace braid::transport
