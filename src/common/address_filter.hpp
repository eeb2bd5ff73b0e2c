// BRAID_WHITELIST: which peer addresses may connect to this process's store server and
// transport listeners. Entries are IPv4 or IPv6 addresses, optionally with a CIDR prefix
// ("10.0.0.0/24", "fd00::/8"). IPv4-mapped IPv6 peers (::ffff:a.b.c.d, what a dual-stack
// listener sees) are matched as IPv4. Nothing is implied: loopback is allowed only if listed.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace braid::security {

/// One allowed network: `prefixBits` leading bits of `bytes` must match.
struct Network {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};  // IPv4 uses the first 4
  int prefixBits = 0;
};

/// Parses "1.2.3.4", "1.2.3.0/24", "::1", "fd00::/8"; nullopt when malformed (a prefix longer
/// than the address, a scope id, a host name).
std::optional<Network> parseNetwork(std::string_view text);

/// The entries of a whitelist file: one per line, '#' starts a comment, blank lines and
/// surrounding spaces are ignored. Throws Error(InvalidArgument) naming `origin` and the line of
/// the first malformed entry, or when there is no entry at all (a whitelist that admits nobody
/// would only make the job time out).
std::vector<std::string> parseWhitelist(std::string_view text, const std::string& origin);

/// Reads and parses a whitelist file; Error(InvalidArgument) naming the file when it cannot.
std::vector<std::string> readWhitelistFile(const std::string& path);

class AddressFilter {
 public:
  /// Admits everyone.
  AddressFilter() = default;
  /// Admits exactly these networks; empty admits everyone. Throws Error(InvalidArgument) naming a
  /// malformed entry.
  explicit AddressFilter(const std::vector<std::string>& entries);

  /// False when every address is allowed.
  bool active() const noexcept { return !networks_.empty(); }
  bool allows(const sockaddr* address, socklen_t length) const noexcept;
  /// A numeric address ("10.0.0.1", "::1"); false when it does not parse.
  bool allows(std::string_view numericAddress) const noexcept;

 private:
  bool matches(bool v6, const std::uint8_t* bytes) const noexcept;

  std::vector<Network> networks_;
};

}  // namespace braid::security
