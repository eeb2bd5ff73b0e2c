// One rank's presence in one communicator's store namespace, for the elastic protocols
// (core/comm_elastic.cpp, docs/reliability.md). Over a TCP store every communicator rank of a
// process shares the process's presence at that server (LivenessHub, core/liveness.cpp): one
// liveness connection and one revoke watcher (a connection and a thread), whatever the number
// of communicators.
#pragma once

#include <atomic>
#include <braid/store.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace braid::core {

class LivenessHub;

class Liveness {
 public:
  /// Over a TCP store (under any PrefixStores): enrolls with the process's hub for that server.
  /// The hub's liveness connection carries ONCLOSE registrations of "dead/<rank>" and (unless
  /// the destructor ran) "revoked" in this communicator's namespace, so the server sets them
  /// when the process goes (exits, is killed); the hub's watcher calls onRevoke with the value
  /// of "revoked" once it is set. The destructor (leaving on purpose) sets "dead/<rank>" itself
  /// and cancels the registrations, so that the key is in place before anything this rank writes
  /// afterwards (the communicator's end, Comm::Impl::releaseNamespace). Over other stores: the
  /// destructor sets "dead/<rank>" if the store is reachable (addIfReachable), and nothing watches
  /// (a revoke reaches the ranks through the transport).
  Liveness(std::shared_ptr<Store> commStore, int rank,
           std::function<void(const std::string&)> onRevoke);
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  /// Where this rank's protocol writes go: ordered before its dead key (the liveness
  /// connection, under this communicator's namespace).
  Store& writes() { return *writes_; }
  /// Sets "revoked" once, unless it is set already (the first cause stays): on a thread of its own
  /// (`wait` false: a failing operation must not wait for a store that may be gone), or before
  /// returning.
  void publishRevoke(const std::string& why, bool wait);

 private:
  std::shared_ptr<Store> commStore_;
  const int rank_;
  std::shared_ptr<LivenessHub> hub_;  // over a TCP store
  std::uint64_t enrolled_ = 0;        // this rank's entry in the hub
  std::shared_ptr<Store> writes_;
  std::thread publisher_;
  std::atomic<bool> published_{false};
};

}  // namespace braid::core
