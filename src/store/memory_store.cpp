#include "store/memory_store.hpp"

#include <braid/error.hpp>
#include <cstring>

namespace braid {

void MemoryStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::vector<std::uint8_t> MemoryStore::get(const std::string& key,
                                           std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  std::lock_guard<std::mutex> lk(mu_);
  return data_.at(key);
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t v = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto& cell = data_[key];
    if (cell.size() == sizeof v) std::memcpy(&v, cell.data(), sizeof v);
    v += delta;
    cell.resize(sizeof v);
    std::memcpy(cell.data(), &v, sizeof v);
  }
  cv_.notify_all();
  return v;
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  auto present = [&] {
    for (const auto& k : keys)
      if (data_.find(k) == data_.end()) return false;
    return true;
  };
  if (!cv_.wait_for(lk, timeout, present)) {
    std::string missing;
    for (const auto& k : keys)
      if (data_.find(k) == data_.end()) missing += (missing.empty() ? "" : ", ") + k;
    throw Error(ErrorCode::Timeout, "store wait: keys [" + missing + "] not set within " +
                                        std::to_string(timeout.count()) + " ms");
  }
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& k : keys)
    if (data_.find(k) == data_.end()) return false;
  return true;
}

std::int64_t MemoryStore::deleteKeys(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lk(mu_);
  std::int64_t n = 0;
  for (const auto& k : keys) n += static_cast<std::int64_t>(data_.erase(k));
  return n;
}

std::int64_t MemoryStore::deletePrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lk(mu_);
  std::int64_t n = 0;
  for (auto it = data_.lower_bound(prefix);
       it != data_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = data_.erase(it);
    ++n;
  }
  return n;
}

std::int64_t MemoryStore::numKeys() {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<std::int64_t>(data_.size());
}

}  // namespace braid
