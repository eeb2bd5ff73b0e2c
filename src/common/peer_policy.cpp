#include "common/peer_policy.hpp"

#include <cstdio>
#include <string>

namespace braid::security {

PeerPolicy::PeerPolicy() : dropped_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

PeerPolicy::PeerPolicy(const SecurityOptions& options)
    : key_(options.authKey),
      filter_(options.allowedPeers),
      handshakeTimeout_(options.handshakeTimeout.count() > 0 ? options.handshakeTimeout
                                                             : std::chrono::milliseconds(1)),
      log_(options.logRejections),
      dropped_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

void PeerPolicy::reportDropped(std::string_view endpoint, std::string_view peer,
                               std::string_view why) const {
  const std::uint64_t n = dropped_->fetch_add(1, std::memory_order_relaxed) + 1;
  if (!log_) return;
  if (n > kLoggedInFull && n % kLogEvery != 0) return;
  std::string line = "[braid WARN] ";
  line.append(endpoint).append(": dropped connection from ").append(peer).append(": ").append(why);
  if (n > kLoggedInFull) line += " (" + std::to_string(n) + " connections dropped so far)";
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

}  // namespace braid::security
