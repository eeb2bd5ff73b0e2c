// Which local address a rank's TCP data listener binds and publishes (BRAID_LISTEN_ADDR,
// BRAID_SOCKET_IFNAME, BRAID_SOCKET_FAMILY; docs/env.md).
//
// Interface lists use NCCL's NCCL_SOCKET_IFNAME syntax: a comma-separated list of interface-name
// prefixes ("eth,ib" matches eth0, eth1, ib0); a leading '^' excludes the listed prefixes and
// accepts every other interface ("^docker,lo"); a leading '=' makes the entries exact names
// ("=eth0" matches eth0 but not eth01); "^=" combines both. An empty list matches every
// interface.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace braid::transport::tcp {

/// A parsed BRAID_SOCKET_IFNAME value.
struct IfnameFilter {
  bool exclude = false;            ///< leading '^': the names are excluded
  bool exact = false;              ///< leading '=' (after any '^'): whole names, not prefixes
  std::vector<std::string> names;  ///< non-empty entries of the comma list
};

/// Parses NCCL's syntax (never fails: every string is a list; empty entries are dropped).
IfnameFilter parseIfnameFilter(std::string_view spec);
/// Whether interface `name` is selected by `filter`.
bool ifnameMatches(const IfnameFilter& filter, std::string_view name);
/// Shorthand: parseIfnameFilter(spec) then ifnameMatches.
bool ifnameMatches(std::string_view spec, std::string_view name);

/// One address of one local interface that is up.
struct InterfaceAddress {
  std::string name;     ///< interface name (eth0, lo, ...)
  int family = 0;       ///< 4 or 6
  std::string address;  ///< numeric, without prefix length or scope
  bool loopback = false;
  bool linkLocal = false;  ///< IPv6 fe80::/10 (needs a scope id: never chosen)
};

/// The addresses of every interface that is up (getifaddrs order: IPv4 first on Linux).
std::vector<InterfaceAddress> localInterfaceAddresses();

/// What decides the listener's address.
struct ListenSelection {
  std::string explicitAddress;  ///< BRAID_LISTEN_ADDR: used as is when set
  std::string ifname;           ///< BRAID_SOCKET_IFNAME: pick the first matching interface
  int family = 0;               ///< BRAID_SOCKET_FAMILY: 0 any, 4 or 6
};

struct ListenChoice {
  std::string address;  ///< numeric address to bind and publish
  std::string reason;   ///< why, for the INFO log ("interface eth0 matches ...")
};

/// Chooses the address (pure: `interfaces` and `storeLocalAddress` are given). Order:
/// explicitAddress; else the first usable address of an interface matching `ifname` (of
/// `family` when set; link-local IPv6 never); else `storeLocalAddress` (the address this host
/// uses to reach the store) when its family fits; else, with `family` set, that family's
/// loopback when the store is reached over loopback (or there is no store socket), otherwise the
/// first non-loopback address of that family. Throws Error(InvalidArgument) naming the variable,
/// its value, `rank` and the interfaces that exist when nothing fits.
ListenChoice chooseListenAddress(const ListenSelection& selection,
                                 const std::vector<InterfaceAddress>& interfaces,
                                 const std::string& storeLocalAddress, int rank);

/// Family of a numeric address: 4, 6, or 0 when it is not a numeric address.
int addressFamily(const std::string& address);

}  // namespace braid::transport::tcp
