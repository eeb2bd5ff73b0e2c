// What a listening endpoint (the store server, a transport's acceptor) enforces on an incoming
// connection, built once from SecurityOptions: the address filter, the auth key and the
// handshake bound, plus the rate-limited log of dropped connections.
#pragma once

#include <atomic>
#include <braid/options.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/address_filter.hpp"

namespace braid::security {

/// The key in BRAID_AUTH_KEY_FILE: the file's bytes less trailing whitespace (a newline). The file
/// must be a regular file owned by this process's user and readable by nobody else (no group or
/// other permission bits), non-empty, at most 4 KiB; otherwise Error(InvalidArgument) naming the
/// variable, the path and what to change.
std::string readAuthKeyFile(const std::string& path);

class PeerPolicy {
 public:
  /// No key, no filter: every connection is admitted unauthenticated.
  PeerPolicy();
  /// Throws Error(InvalidArgument) for a malformed allowedPeers entry.
  explicit PeerPolicy(const SecurityOptions& options);

  const std::string& key() const noexcept { return key_; }
  bool authenticated() const noexcept { return !key_.empty(); }
  const AddressFilter& filter() const noexcept { return filter_; }
  std::chrono::milliseconds handshakeTimeout() const noexcept { return handshakeTimeout_; }

  /// Logs "[braid WARN] <endpoint>: dropped connection from <peer>: <why>" on stderr. After the
  /// first kLoggedInFull drops only every kLogEvery-th is logged (with the running count), so a
  /// flood of strangers cannot flood the job's output.
  void reportDropped(std::string_view endpoint, std::string_view peer, std::string_view why) const;
  /// Logs "[braid WARN] <endpoint>: refused a request from <peer>: <why>" (a request over a
  /// memory bound; the connection stays), rate-limited the same way.
  void reportRefused(std::string_view endpoint, std::string_view peer, std::string_view why) const;
  /// Connections dropped so far.
  std::uint64_t dropped() const noexcept { return dropped_->load(std::memory_order_relaxed); }

  static constexpr std::uint64_t kLoggedInFull = 20;
  static constexpr std::uint64_t kLogEvery = 100;

 private:
  std::string key_;
  AddressFilter filter_;
  std::chrono::milliseconds handshakeTimeout_{10000};
  bool log_ = true;
  // Shared by copies, so that a policy copied into several places counts once.
  std::shared_ptr<std::atomic<std::uint64_t>> dropped_;
  std::shared_ptr<std::atomic<std::uint64_t>> refused_;
};

/// A transport's setup timing out on peers that never connected: "<self> timed out after <T> ms
/// waiting for rank(s) <waitingFor> to connect", and, when the policy dropped any,
/// "; <dropped> <droppedWhat>(s) was/were dropped meanwhile (last: <lastDrop>)".
std::string connectTimeoutText(std::string_view self, std::chrono::milliseconds timeout,
                               const std::vector<int>& waitingFor, std::uint64_t dropped,
                               std::string_view droppedWhat, std::string_view lastDrop);

}  // namespace braid::security
