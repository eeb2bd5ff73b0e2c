#include "transport/tcp/interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <array>
#include <braid/error.hpp>
#include <utility>

namespace braid::transport::tcp {

IfnameFilter parseIfnameFilter(std::string_view spec) {
  IfnameFilter f;
  if (!spec.empty() && spec.front() == '^') {
    f.exclude = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    f.exact = true;
    spec.remove_prefix(1);
  }
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    if (!item.empty()) f.names.emplace_back(item);
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return f;
}

bool ifnameMatches(const IfnameFilter& filter, std::string_view name) {
  if (filter.names.empty()) return true;
  bool listed = false;
  for (const std::string& n : filter.names)
    if (filter.exact ? name == n : name.substr(0, n.size()) == n) listed = true;
  return filter.exclude ? !listed : listed;
}

bool ifnameMatches(std::string_view spec, std::string_view name) {
  return ifnameMatches(parseIfnameFilter(spec), name);
}

int addressFamily(const std::string& address) {
  std::array<unsigned char, 16> buf{};
  if (::inet_pton(AF_INET, address.c_str(), buf.data()) == 1) return 4;
  if (::inet_pton(AF_INET6, address.c_str(), buf.data()) == 1) return 6;
  return 0;
}

std::vector<InterfaceAddress> localInterfaceAddresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_UP) == 0) continue;
    const int fam = a->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    std::array<char, INET6_ADDRSTRLEN> text{};
    InterfaceAddress ia;
    ia.name = a->ifa_name;
    ia.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (fam == AF_INET) {
      ia.family = 4;
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (::inet_ntop(AF_INET, &sin->sin_addr, text.data(), text.size()) == nullptr) continue;
    } else {
      ia.family = 6;
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (::inet_ntop(AF_INET6, &sin6->sin6_addr, text.data(), text.size()) == nullptr) continue;
      ia.linkLocal = IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr);
    }
    ia.address = text.data();
    out.push_back(std::move(ia));
  }
  ::freeifaddrs(list);
  return out;
}

namespace {

std::string familyName(int family) {
  return family == 4 ? "IPv4" : family == 6 ? "IPv6" : "any";
}

std::string listInterfaces(const std::vector<InterfaceAddress>& interfaces) {
  // One entry per interface, in order of first appearance, with all its addresses.
  std::vector<std::pair<std::string, std::string>> byName;
  for (const InterfaceAddress& ia : interfaces) {
    auto it = byName.begin();
    while (it != byName.end() && it->first != ia.name) ++it;
    if (it == byName.end())
      byName.emplace_back(ia.name, ia.address);
    else
      it->second += ", " + ia.address;
  }
  std::string out;
  for (const auto& [name, addresses] : byName)
    out += (out.empty() ? "" : ", ") + name + " (" + addresses + ")";
  return out.empty() ? "none with an address" : out;
}

bool isLoopbackAddress(const std::string& address) {
  return address == "::1" || address.rfind("127.", 0) == 0;
}

}  // namespace

ListenChoice chooseListenAddress(const ListenSelection& selection,
                                 const std::vector<InterfaceAddress>& interfaces,
                                 const std::string& storeLocalAddress, int rank) {
  const std::string who = "rank " + std::to_string(rank);
  if (!selection.explicitAddress.empty()) {
    const int fam = addressFamily(selection.explicitAddress);
    if (selection.family != 0 && fam != 0 && fam != selection.family)
      throw Error(ErrorCode::InvalidArgument,
                  "BRAID_LISTEN_ADDR='" + selection.explicitAddress + "' (" + who + ") is not an " +
                      familyName(selection.family) + " address, as BRAID_SOCKET_FAMILY requires");
    return {selection.explicitAddress, "BRAID_LISTEN_ADDR"};
  }
  const auto usable = [&](const InterfaceAddress& ia) {
    return !ia.linkLocal && (selection.family == 0 || ia.family == selection.family);
  };
  if (!selection.ifname.empty()) {
    const IfnameFilter filter = parseIfnameFilter(selection.ifname);
    // Non-loopback interfaces first, so that an exclusion list such as "^docker" does not pick lo.
    for (const bool loopback : {false, true})
      for (const InterfaceAddress& ia : interfaces)
        if (ia.loopback == loopback && usable(ia) && ifnameMatches(filter, ia.name))
          return {ia.address,
                  "interface " + ia.name + " matches BRAID_SOCKET_IFNAME=" + selection.ifname};
    throw Error(ErrorCode::InvalidArgument,
                "BRAID_SOCKET_IFNAME='" + selection.ifname + "' (" + who +
                    "): no interface that is up matches it" +
                    (selection.family != 0 ? " with an " + familyName(selection.family) + " address"
                                           : std::string()) +
                    " (link-local IPv6 addresses are not used); interfaces here: " +
                    listInterfaces(interfaces));
  }
  const int storeFamily = addressFamily(storeLocalAddress);
  if (storeFamily != 0 && (selection.family == 0 || storeFamily == selection.family))
    return {storeLocalAddress, "the address that reaches the store"};
  if (selection.family == 0) return {"127.0.0.1", "no store socket: loopback"};
  if (storeLocalAddress.empty() || isLoopbackAddress(storeLocalAddress))
    return {selection.family == 6 ? "::1" : "127.0.0.1",
            "the store is on loopback: " + familyName(selection.family) + " loopback"};
  for (const InterfaceAddress& ia : interfaces)
    if (!ia.loopback && usable(ia))
      return {ia.address, "first " + familyName(selection.family) + " address (interface " +
                              ia.name + "); the store is reached over " + storeLocalAddress};
  throw Error(ErrorCode::InvalidArgument,
              "BRAID_SOCKET_FAMILY=" + familyName(selection.family) + " (" + who +
                  "): no interface has a non-link-local " + familyName(selection.family) +
                  " address (the store is reached over " + storeLocalAddress +
                  "); interfaces here: " + listInterfaces(interfaces));
}

}  // namespace braid::transport::tcp
