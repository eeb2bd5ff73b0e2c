// One rank's presence in one communicator's store namespace, for the elastic protocols
// (core/comm_elastic.cpp, docs/reliability.md): its liveness connection and revoke watcher.
#pragma once

#include <atomic>
#include <braid/store.hpp>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace braid::core {

class Liveness {
 public:
  /// Over a TCP store (under any PrefixStores): opens a connection of its own whose close sets
  /// "dead/<rank>" (server side: also when the process is killed) and, unless the destructor
  /// ran, "revoked"; and a second one with a thread parked on "revoked" that calls onRevoke with
  /// its value. The destructor (leaving on purpose) sets "dead/<rank>" itself before it
  /// closes, so that the key is in place before anything this rank writes afterwards (the
  /// communicator's end, Comm::Impl::releaseNamespace). Over other stores: the destructor sets
  /// "dead/<rank>", and nothing watches (a revoke reaches the ranks through the transport).
  Liveness(std::shared_ptr<Store> commStore, int rank,
           std::function<void(const std::string&)> onRevoke);
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  /// Where this rank's protocol writes go: ordered before its dead key.
  Store& writes() { return *writes_; }
  /// Sets "revoked" once: on a thread of its own (`wait` false: a failing operation must not
  /// wait for a store that may be gone), or before returning.
  void publishRevoke(const std::string& why, bool wait);

 private:
  std::shared_ptr<Store> commStore_;
  const int rank_;
  std::shared_ptr<TcpStore> tcp_;    // the liveness connection: writes, ONCLOSE keys
  std::shared_ptr<TcpStore> watch_;  // the revoke watcher's
  std::string revokedKey_;
  std::string deadKey_;  // as the server spells it
  std::shared_ptr<Store> writes_;
  std::thread watcher_;
  std::thread publisher_;
  std::atomic<bool> published_{false};
};

}  // namespace braid::core
