// PrefixStore: keys become "<prefix>/<key>". The separator keeps prefixes that extend one another
// ("comm1", "comm10") from sharing keys.

#include <braid/error.hpp>
#include <braid/store.hpp>
#include <utility>

namespace braid {
namespace {

std::vector<std::string> prefixed(const std::string& prefix, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefix + "/" + k);
  return out;
}

}  // namespace

PrefixStore::PrefixStore(std::shared_ptr<Store> base, std::string prefix)
    : base_(std::move(base)), prefix_(std::move(prefix)) {
  if (!base_)
    throw Error(ErrorCode::InvalidArgument, "PrefixStore '" + prefix_ + "': base is null");
}

void PrefixStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  base_->set(prefix_ + "/" + key, value);
}

std::vector<std::uint8_t> PrefixStore::get(const std::string& key,
                                           std::chrono::milliseconds timeout) {
  return base_->get(prefix_ + "/" + key, timeout);
}

std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) {
  return base_->add(prefix_ + "/" + key, delta);
}

std::int64_t PrefixStore::addIfReachable(const std::string& key, std::int64_t delta,
                                         std::chrono::milliseconds timeout) {
  return base_->addIfReachable(prefix_ + "/" + key, delta, timeout);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base_->wait(prefixed(prefix_, keys), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_->check(prefixed(prefix_, keys));
}

std::int64_t PrefixStore::deleteKeys(const std::vector<std::string>& keys) {
  return base_->deleteKeys(prefixed(prefix_, keys));
}

std::int64_t PrefixStore::deletePrefix(const std::string& prefix) {
  return base_->deletePrefix(prefix_ + "/" + prefix);
}

std::int64_t PrefixStore::numKeys() {
  return base_->numKeys();
}

}  // namespace braid
