#include <braid/store.hpp>

namespace braid {

void Store::setString(const std::string& key, const std::string& value) {
  set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

std::string Store::getString(const std::string& key, std::chrono::milliseconds timeout) {
  const std::vector<std::uint8_t> v = get(key, timeout);
  return std::string(v.begin(), v.end());
}

}  // namespace braid
