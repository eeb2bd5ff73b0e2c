// braid::Store over torch's c10d::Store, so a braid communicator bootstraps through whatever
// rendezvous torch used (env://, tcp://, file://, or a user's store). Only bootstrap traffic
// (listen addresses, generation counters) goes through it; data never does.
#pragma once

#include <atomic>
#include <braid/options.hpp>
#include <braid/store.hpp>
#include <memory>

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
  /// add, unless torch's store is a TCPStore whose server refuses connections: the rank that
  /// served it has exited (the usual order at a job's end), and torch's client would print a
  /// warning with a C++ stack trace for the request before failing. Then Error(PeerLost),
  /// quietly (a communicator's end, Comm::Impl::releaseNamespace, ignores it).
  std::int64_t addIfReachable(const std::string& key, std::int64_t delta,
                              std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  /// torch's deleteKey per key and getNumKeys. Some torch stores have neither (FileStore): their
  /// failure becomes braid::Error(InvalidArgument), and supportsDelete() is false from then on.
  std::int64_t deleteKeys(const std::vector<std::string>& keys) override;
  std::int64_t numKeys() override;
  bool supportsDelete() const override { return !deleteFailed_.load(); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::atomic<bool> deleteFailed_{false};
};

/// The store a group's braid communicators bootstrap (and shrink) through. Where a launcher
/// serves braid's own store outside the ranks (BRAID_STORE with BRAID_STORE_EXTERNAL=1, as
/// braid-run --max-failures does): that store, in a namespace of the group that its rank 0 draws
/// there and hands to the others through torch's store; so braid's liveness works as without
/// torch (a killed rank is known gone at once, docs/reliability.md) and the store outlives any
/// rank. Otherwise torch's store (a killed rank is then only left out of a shrink after the
/// group's timeout).
std::shared_ptr<braid::Store> bootstrapStore(const c10::intrusive_ptr<c10d::Store>& torchStore,
                                             int rank, const braid::Options& options);

}  // namespace braid_torch
