#include "common/address_filter.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <braid/error.hpp>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/trim.hpp"

namespace braid::security {

namespace {

constexpr std::array<std::uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

using text::trim;

bool prefixMatches(const std::uint8_t* a, const std::uint8_t* b, int bits) {
  const int whole = bits / 8;
  if (std::memcmp(a, b, static_cast<std::size_t>(whole)) != 0) return false;
  const int rest = bits % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

}  // namespace

std::optional<Network> parseNetwork(std::string_view text) {
  text = trim(text);
  std::string_view address = text;
  std::optional<int> prefix;
  if (const auto slash = text.find('/'); slash != std::string_view::npos) {
    address = text.substr(0, slash);
    const std::string_view bits = text.substr(slash + 1);
    int value = -1;
    const auto [end, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), value);
    if (bits.empty() || ec != std::errc() || end != bits.data() + bits.size() || value < 0)
      return std::nullopt;
    prefix = value;
  }
  if (address.empty() || address.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  const std::string addr(address);
  Network n;
  if (::inet_pton(AF_INET, addr.c_str(), n.bytes.data()) == 1) {
    n.v6 = false;
    n.prefixBits = prefix.value_or(32);
    if (n.prefixBits > 32) return std::nullopt;
  } else if (::inet_pton(AF_INET6, addr.c_str(), n.bytes.data()) == 1) {
    n.v6 = true;
    n.prefixBits = prefix.value_or(128);
    if (n.prefixBits > 128) return std::nullopt;
    // An IPv4-mapped entry means the IPv4 address.
    if (n.prefixBits >= 96 &&
        std::memcmp(n.bytes.data(), kV4MappedPrefix.data(), kV4MappedPrefix.size()) == 0) {
      std::memmove(n.bytes.data(), n.bytes.data() + 12, 4);
      std::memset(n.bytes.data() + 4, 0, 12);
      n.v6 = false;
      n.prefixBits -= 96;
    }
  } else {
    return std::nullopt;
  }
  return n;
}

std::vector<std::string> parseWhitelist(std::string_view text, const std::string& origin) {
  std::vector<std::string> entries;
  std::size_t lineNumber = 0;
  while (!text.empty()) {
    ++lineNumber;
    const std::size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (const auto hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    if (!parseNetwork(line))
      throw Error(ErrorCode::InvalidArgument,
                  "BRAID_WHITELIST " + origin + ":" + std::to_string(lineNumber) + ": '" +
                      std::string(line.substr(0, 128)) +
                      "' is not an IP address or network (e.g. 10.0.0.7, 10.0.0.0/24, fd00::/8)");
    entries.emplace_back(line);
  }
  if (entries.empty())
    throw Error(ErrorCode::InvalidArgument,
                "BRAID_WHITELIST " + origin +
                    " lists no address: every connection would be refused (list the hosts' "
                    "addresses, and 127.0.0.1 if ranks connect over loopback)");
  return entries;
}

std::vector<std::string> readWhitelistFile(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw Error(ErrorCode::InvalidArgument,
                "BRAID_WHITELIST=" + path + ": cannot read the file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parseWhitelist(text.str(), path);
}

AddressFilter::AddressFilter(const std::vector<std::string>& entries) {
  for (const std::string& e : entries) {
    auto n = parseNetwork(e);
    if (!n)
      throw Error(ErrorCode::InvalidArgument,
                  "whitelist entry '" + e.substr(0, 128) + "' is not an IP address or network");
    networks_.push_back(*n);
  }
}

bool AddressFilter::matches(bool v6, const std::uint8_t* bytes) const noexcept {
  for (const Network& n : networks_)
    if (n.v6 == v6 && prefixMatches(n.bytes.data(), bytes, n.prefixBits)) return true;
  return false;
}

bool AddressFilter::allows(const sockaddr* address, socklen_t length) const noexcept {
  if (networks_.empty()) return true;
  if (address == nullptr) return false;
  if (address->sa_family == AF_INET && length >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    return matches(false, reinterpret_cast<const std::uint8_t*>(&in->sin_addr));
  }
  if (address->sa_family == AF_INET6 && length >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&in6->sin6_addr);
    if (std::memcmp(bytes, kV4MappedPrefix.data(), kV4MappedPrefix.size()) == 0)
      return matches(false, bytes + 12);
    return matches(true, bytes);
  }
  return false;  // AF_UNIX and anything else: not an address a whitelist can name
}

bool AddressFilter::allows(std::string_view numericAddress) const noexcept {
  if (networks_.empty()) return true;
  if (numericAddress.find('/') != std::string_view::npos) return false;
  const auto n = parseNetwork(numericAddress);
  return n && matches(n->v6, n->bytes.data());
}

}  // namespace braid::security
