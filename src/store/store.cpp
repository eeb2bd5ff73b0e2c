#include <braid/error.hpp>
#include <braid/store.hpp>
#include <typeinfo>

namespace braid {

void Store::setString(const std::string& key, const std::string& value) {
  set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

std::int64_t Store::deleteKeys(const std::vector<std::string>& keys) {
  (void)keys;
  throw Error(ErrorCode::InvalidArgument, std::string("Store::deleteKeys: this store (") +
                                              typeid(*this).name() +
                                              ") cannot delete keys (supportsDelete() is false)");
}

std::int64_t Store::deletePrefix(const std::string& prefix) {
  (void)prefix;
  throw Error(ErrorCode::InvalidArgument, std::string("Store::deletePrefix: this store (") +
                                              typeid(*this).name() +
                                              ") cannot delete keys (supportsDelete() is false)");
}

std::int64_t Store::numKeys() {
  throw Error(ErrorCode::InvalidArgument,
              std::string("Store::numKeys: this store (") + typeid(*this).name() +
                  ") cannot count its keys (supportsDelete() is false)");
}

std::int64_t Store::addIfReachable(const std::string& key, std::int64_t delta,
                                   std::chrono::milliseconds timeout) {
  (void)timeout;
  return add(key, delta);
}

std::string Store::getString(const std::string& key, std::chrono::milliseconds timeout) {
  const std::vector<std::uint8_t> v = get(key, timeout);
  return std::string(v.begin(), v.end());
}

}  // namespace braid
