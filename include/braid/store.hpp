// braid public API: the key-value store ranks rendezvous through.
#pragma once

#include <braid/options.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid {

/// A key-value store shared by every rank of a job. Used only to bootstrap (exchange listen
/// addresses, split membership), never on the data path. Implementations are thread-safe.
/// Every call is bounded: one that cannot complete in time throws Error(Timeout).
class Store {
 public:
  virtual ~Store() = default;
  /// Sets key to value (overwrites).
  virtual void set(const std::string& key, const std::vector<std::uint8_t>& value) = 0;
  /// Waits until key exists, at most `timeout`, and returns its value.
  virtual std::vector<std::uint8_t> get(const std::string& key,
                                        std::chrono::milliseconds timeout) = 0;
  /// Atomically adds delta to the integer stored at key (0 if absent); returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  /// add() for best-effort work that must not hold a process up (a communicator's cleanup when
  /// it is destroyed, after the rank that served the store may have exited): throws Error after
  /// at most `timeout`, and at once (PeerLost) when the store's server refuses connections,
  /// instead of retrying for the whole connect timeout. The default calls add().
  virtual std::int64_t addIfReachable(const std::string& key, std::int64_t delta,
                                      std::chrono::milliseconds timeout);
  /// Waits until every key exists, at most `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  /// True when every key exists right now.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Removes every key of `keys` that exists (a missing key is no error: several ranks may
  /// clean up the same keys) and returns how many existed. A key that is waited for after its
  /// deletion is waited for anew. The default throws Error(InvalidArgument) naming the store's
  /// kind: a store without deletion keeps bootstrap keys (callers check supportsDelete()).
  virtual std::int64_t deleteKeys(const std::vector<std::string>& keys);
  /// Removes every key that starts with `prefix` (byte for byte) and returns how many; throws
  /// like deleteKeys. PrefixStore deletes its own namespace's keys that start with it.
  virtual std::int64_t deletePrefix(const std::string& prefix);
  /// The number of keys the store holds (counters included); the default throws like
  /// deleteKeys. PrefixStore counts the whole base store, as torch's num_keys does.
  virtual std::int64_t numKeys();
  /// True when deleteKeys, deletePrefix and numKeys work.
  virtual bool supportsDelete() const { return false; }
  /// deleteKeys of one key: true when it existed.
  bool deleteKey(const std::string& key) { return deleteKeys({key}) > 0; }

  // Convenience wrappers for string values.
  void setString(const std::string& key, const std::string& value);
  std::string getString(const std::string& key, std::chrono::milliseconds timeout);
};

/// Serves a store over TCP (what rank 0 runs unless the store is external). Binds host:port;
/// port 0 picks a free port. Serves until destroyed. The server runs one thread with epoll.
/// `security`: a connection from an address outside security.allowedPeers, or one that fails the
/// handshake (wrong or missing security.authKey, garbage, silence past handshakeTimeout), is
/// closed and logged without disturbing the other clients (docs/security.md).
class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& host, std::uint16_t port,
                 const SecurityOptions& security = SecurityOptions());
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  std::uint16_t port() const noexcept;
  /// Requests served so far (every decoded request of every client, whatever its outcome) and
  /// keys held now; read from any thread (tests and benchmarks count the bootstrap's load).
  std::uint64_t requestCount() const noexcept;
  std::size_t keyCount() const noexcept;
  /// Client connections open now (in the handshake or past it).
  std::size_t connectionCount() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Client of a TcpStoreServer. Connecting retries until connectTimeout, then throws
/// Error(Timeout) naming the address. `opTimeout` bounds set/add/check. Every connection opens
/// with the handshake; when the server and this client disagree on security.authKey (different
/// keys, or a key on one side only) the constructor (or the request that reconnects) throws
/// Error(Auth) naming the store's address.
class TcpStore : public Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultOpTimeout{60000};
  TcpStore(const std::string& host, std::uint16_t port, std::chrono::milliseconds connectTimeout,
           std::chrono::milliseconds opTimeout = kDefaultOpTimeout,
           const SecurityOptions& security = SecurityOptions());
  ~TcpStore() override;
  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::int64_t addIfReachable(const std::string& key, std::int64_t delta,
                              std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t deleteKeys(const std::vector<std::string>& keys) override;
  std::int64_t deletePrefix(const std::string& prefix) override;
  std::int64_t numKeys() override;
  bool supportsDelete() const override { return true; }
  /// Waits until at least one of `keys` (one or more) is set and returns the index of the first
  /// that is; throws Error(Timeout) when none is within `timeout`. Parked server-side, as wait().
  std::size_t waitAny(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  /// The local address of the connection to the store: an address of this host that the store's
  /// network can reach (used as the default listen address).
  std::string localAddress() const;
  /// Liveness (docs/reliability.md): asks the server to set `key` to `value` when this client's
  /// connection closes: the process exits or is killed, or this TcpStore is destroyed or
  /// disconnected. From then on the client never reconnects (a request after the connection
  /// broke throws Error(PeerLost)), so nothing it sends can reach the server after the key was set.
  void setOnClose(const std::string& key, const std::vector<std::uint8_t>& value);
  /// Drops this connection's setOnClose of `key` (nothing when there is none).
  void cancelOnClose(const std::string& key);
  /// A second, independent connection to the same server with the same settings.
  std::unique_ptr<TcpStore> connectAgain() const;
  /// The server's "host:port", as given to the constructor.
  const std::string& address() const noexcept;
  /// Shuts the connection down from any thread: a request in progress (a parked GET) fails with
  /// Error(PeerLost) at once, and ONCLOSE keys are set.
  void disconnect();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Prepends a prefix to every key (one namespace per communicator).
class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix);
  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::int64_t addIfReachable(const std::string& key, std::int64_t delta,
                              std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t deleteKeys(const std::vector<std::string>& keys) override;
  std::int64_t deletePrefix(const std::string& prefix) override;
  std::int64_t numKeys() override;
  bool supportsDelete() const override { return base_->supportsDelete(); }
  const std::shared_ptr<Store>& base() const { return base_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace braid
