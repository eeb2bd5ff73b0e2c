// An in-process Store for tests and for ranks-as-threads. Thread-safe.
#pragma once

#include <braid/store.hpp>
#include <condition_variable>
#include <map>
#include <mutex>

namespace braid {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t deleteKeys(const std::vector<std::string>& keys) override;
  std::int64_t deletePrefix(const std::string& prefix) override;
  std::int64_t numKeys() override;
  bool supportsDelete() const override { return true; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::uint8_t>> data_;
};

}  // namespace braid
