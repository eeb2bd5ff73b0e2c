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

#include "common/address_filter.hpp"

namespace braid::security {

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
};

}  // namespace braid::security
