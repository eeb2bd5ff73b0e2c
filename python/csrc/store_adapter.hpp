// braid::Store over torch's c10d::Store, so a braid communicator bootstraps through whatever
// rendezvous torch used (env://, tcp://, file://, or a user's store). Only bootstrap traffic
// (listen addresses, generation counters) goes through it; data never does.
#pragma once

#include <braid/store.hpp>

#include "torch_compat.hpp"

namespace braid_torch {

class TorchStoreAdapter : public braid::Store {
 public:
  explicit TorchStoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  /// Waits for the key with torch's wait(keys, timeout), then reads it. Any failure of the
  /// underlying store becomes braid::Error(Timeout) naming the key.
  std::vector<std::uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace braid_torch
