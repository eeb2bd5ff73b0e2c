// Liveness over a TCP store (docs/reliability.md, "Liveness"): one hub per process and store
// server, shared by every communicator rank the process holds there.
//
// The hub holds two connections to the server. The liveness connection carries, for every
// enrolled communicator rank, ONCLOSE registrations of its "dead/<rank>" and "revoked" keys
// (so the server sets them all when the process goes) and every write of its shrink protocol;
// it is pinned (never re-established), so once a dead key is visible nothing more from that rank
// can appear. The watcher connection has one WAITANY parked on the "revoked" keys of every
// enrolled rank plus the hub's wake key; enrolling or leaving sets the wake key, which makes the
// watcher take the new list. A communicator thus costs its ranks two ONCLOSE requests and a wake
// at creation, not two connections and a thread.
//
// The wake key is deleted by the watcher while it holds the hub's lock and reads the list, and
// set by enroll() and leave() while they hold it after changing the list: a change either is in
// the list the watcher reads, or sets the key after its deletion, so no change is missed.
#include "core/liveness.hpp"

#include <unistd.h>

#include <array>
#include <braid/error.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "common/crypto.hpp"

namespace braid::core {

using namespace std::chrono_literals;

class LivenessHub {
 public:
  /// The hub of the server `tcp` talks to: this process's, made on first use. A hub made before
  /// a fork (another process's connections) or whose connections broke is not reused.
  static std::shared_ptr<LivenessHub> of(const TcpStore& tcp) {
    static std::mutex registryMu;
    static auto* registry = new std::map<std::string, std::weak_ptr<LivenessHub>>();
    std::lock_guard<std::mutex> lk(registryMu);
    auto& slot = (*registry)[tcp.address()];
    if (auto hub = slot.lock(); hub && hub->pid_ == ::getpid() && !hub->retired_.load()) return hub;
    auto hub = std::make_shared<LivenessHub>(tcp);
    slot = hub;
    return hub;
  }

  explicit LivenessHub(const TcpStore& tcp)
      : live_(tcp.connectAgain()), watch_(tcp.connectAgain()) {
    std::array<std::uint8_t, 12> token{};
    crypto::randomBytes(token);
    wakeKey_ = "braid/liveness/" + crypto::toHex(token) + "/wake";
    watcher_ = std::thread([this] { watch(); });
  }

  ~LivenessHub() {
    stopping_.store(true);
    watch_->disconnect();  // its parked WAITANY fails at once
    if (watcher_.joinable()) watcher_.join();
    {
      // Every communicator left, each after its callbacks ended: none runs; but a callback
      // thread may still be returning from its last lock of mu_.
      std::unique_lock<std::mutex> lk(mu_);
      done_.wait(lk, [&] { return running_ == 0; });
    }
    try {
      live_->deleteKeys({wakeKey_});
    } catch (const std::exception&) {
    }
    live_->disconnect();
  }

  LivenessHub(const LivenessHub&) = delete;
  LivenessHub& operator=(const LivenessHub&) = delete;

  /// Registers a communicator rank: its keys as the server spells them, the revoke text the
  /// server sets if the process goes, and what to call once "revoked" is set. Returns its id.
  std::uint64_t enroll(const std::string& deadKey, const std::string& revokedKey,
                       const std::string& why, std::function<void(const std::string&)> onRevoke) {
    int registered = 0;
    std::uint64_t id = 0;
    try {
      live_->setOnClose(deadKey, {'1'});
      ++registered;
      live_->setOnClose(revokedKey, std::vector<std::uint8_t>(why.begin(), why.end()));
      ++registered;
      std::lock_guard<std::mutex> lk(mu_);
      id = next_++;
      entries_.emplace(id, Entry{deadKey, revokedKey, std::move(onRevoke)});
      live_->set(wakeKey_, {'1'});
      return id;
    } catch (const Error&) {
      // Not reused: its connection broke, or the server refused a registration (the bound on
      // one connection's: a new hub has a connection of its own).
      retired_.store(true);
      if (id != 0) forget(id);
      try {
        if (registered > 1) live_->cancelOnClose(revokedKey);
        if (registered > 0) live_->cancelOnClose(deadKey);
      } catch (const std::exception&) {
      }
      throw;
    }
  }

  /// Leaving on purpose: no more callbacks (a running one is waited for), "dead/<rank>" set in
  /// order after every write of the rank, the registrations cancelled.
  void leave(std::uint64_t id) {
    const Entry e = forget(id);
    if (e.deadKey.empty()) return;
    try {
      live_->cancelOnClose(e.revokedKey);
      live_->set(e.deadKey, {'1'});
      live_->cancelOnClose(e.deadKey);
    } catch (const std::exception&) {
    }
  }

  const std::shared_ptr<TcpStore>& connection() const { return live_; }

 private:
  struct Entry {
    std::string deadKey;
    std::string revokedKey;
    std::function<void(const std::string&)> onRevoke;
    bool fired = false;
    int running = 0;  // its onRevoke runs now
  };

  // Takes an entry out (once its running callback, if any, ended) and wakes the watcher, so
  // that it stops waiting on the entry's key. Returns it (empty when there was none).
  Entry forget(std::uint64_t id) {
    std::unique_lock<std::mutex> lk(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return {};
    done_.wait(lk, [&] { return it->second.running == 0; });
    Entry e = std::move(it->second);
    entries_.erase(it);
    try {
      live_->set(wakeKey_, {'1'});
    } catch (const std::exception&) {
    }
    return e;
  }

  void watch() {
    std::vector<std::string> keys;
    std::vector<std::uint64_t> ids;
    while (!stopping_.load()) {
      try {
        {
          std::lock_guard<std::mutex> lk(mu_);
          keys.assign(1, wakeKey_);
          ids.assign(1, 0);
          for (const auto& [id, e] : entries_) {
            if (e.fired) continue;
            keys.push_back(e.revokedKey);
            ids.push_back(id);
          }
          watch_->deleteKeys({wakeKey_});
        }
        std::size_t at = 0;
        try {
          at = watch_->waitAny(keys, 24h);
        } catch (const Error& err) {
          if (err.code() == ErrorCode::Timeout) continue;
          throw;
        }
        if (at == 0) continue;
        std::string why;
        try {
          // Not waited for: the key may be gone again (the communicator ended everywhere, its
          // namespace deleted), and then there is nobody to tell.
          const auto v = watch_->get(keys[at], 0ms);
          why.assign(v.begin(), v.end());
        } catch (const Error& err) {
          if (err.code() == ErrorCode::Timeout) continue;
          throw;
        }
        // Every rank of the process in that communicator (ranks as threads share the key), each
        // on a thread of its own: a revoke aborts its transport, which may take a while, and the
        // others' (or another communicator's) must not wait for it.
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& [id, e] : entries_) {
          if (e.fired || e.revokedKey != keys[at]) continue;
          e.fired = true;
          ++e.running;
          ++running_;
          std::thread([this, id, onRevoke = e.onRevoke, why] {
            try {
              onRevoke(why);
            } catch (const std::exception&) {
            }
            std::lock_guard<std::mutex> g(mu_);
            if (auto it = entries_.find(id); it != entries_.end()) --it->second.running;
            --running_;
            done_.notify_all();
          }).detach();
        }
      } catch (const std::exception&) {
        // The server is gone or the hub is ending: nothing more to watch; a later communicator
        // gets a new hub.
        retired_.store(true);
        return;
      }
    }
  }

  const pid_t pid_ = ::getpid();
  std::shared_ptr<TcpStore> live_;
  std::unique_ptr<TcpStore> watch_;
  std::string wakeKey_;
  std::mutex mu_;  // entries_, next_; held around the wake key's set and delete
  std::map<std::uint64_t, Entry> entries_;
  std::uint64_t next_ = 1;
  std::condition_variable done_;  // a callback ended
  int running_ = 0;               // callbacks running
  std::atomic<bool> stopping_{false};
  std::atomic<bool> retired_{false};  // not handed to new communicators
  std::thread watcher_;
};

Liveness::Liveness(std::shared_ptr<Store> commStore, int rank,
                   std::function<void(const std::string&)> onRevoke)
    : commStore_(std::move(commStore)), rank_(rank) {
  // The TCP store under the communicator's PrefixStore (and any of the caller's), if any.
  std::vector<std::string> prefixes;  // outermost first
  std::shared_ptr<Store> cur = commStore_;
  while (auto* p = dynamic_cast<PrefixStore*>(cur.get())) {
    prefixes.push_back(p->prefix());
    cur = p->base();
  }
  auto* tcp = dynamic_cast<TcpStore*>(cur.get());
  if (tcp == nullptr) {
    writes_ = commStore_;
    return;
  }
  // The keys as the server spells them.
  std::string flat;
  for (auto it = prefixes.rbegin(); it != prefixes.rend(); ++it) flat += *it + "/";
  // A rank that goes without destroying the communicator (killed, crashed, exited) revokes it:
  // the server sets the key when the connection closes; the destructor cancels it first.
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::string why = "rank " + std::to_string(rank_) + " (pid " + std::to_string(::getpid()) +
                          " on " + host +
                          "), whose process exited or was killed (its connection to the "
                          "store closed)";
  const std::string deadKey = flat + "dead/" + std::to_string(rank_);
  const std::string revokedKey = flat + "revoked";
  for (int attempt = 0;; ++attempt) {
    hub_ = LivenessHub::of(*tcp);
    try {
      enrolled_ = hub_->enroll(deadKey, revokedKey, why, onRevoke);
      break;
    } catch (const Error&) {
      // A hub whose server went away (and came back at the same address) is replaced once.
      hub_.reset();
      if (attempt > 0) throw;
    }
  }
  // The same namespaces over the liveness connection.
  std::shared_ptr<Store> wrapped = hub_->connection();
  for (auto it = prefixes.rbegin(); it != prefixes.rend(); ++it)
    wrapped = std::make_shared<PrefixStore>(wrapped, *it);
  writes_ = wrapped;
}

Liveness::~Liveness() {
  if (hub_) {
    // Going on purpose: the others see this rank gone (dead/<rank>), not a revoke. The dead
    // key is set here, in order on the liveness connection (so after every protocol write),
    // rather than by the server at close: the last rank to leave deletes the namespace, which
    // must not be followed by a key set on close.
    hub_->leave(enrolled_);
    writes_.reset();
    hub_.reset();
  } else {
    // Best effort, as the communicator's end (Comm::Impl::releaseNamespace): the rank that
    // served the store may have exited first, which a store that can tell reports at once
    // (addIfReachable). What counts is that the key exists.
    try {
      commStore_->addIfReachable("dead/" + std::to_string(rank_), 1, std::chrono::seconds(10));
    } catch (const std::exception&) {
    }
  }
  if (publisher_.joinable()) publisher_.join();
}

void Liveness::publishRevoke(const std::string& why, bool wait) {
  if (published_.exchange(true)) return;
  auto store = commStore_;
  // The first cause stays: a rank whose operation failed because a peer had died (or had
  // revoked it) does not replace the text that names that peer. (Two ranks setting it at the
  // same moment may still both write; every rank keeps the first text it received.)
  auto set = [store, why] {
    try {
      if (!store->check({"revoked"}))
        store->set("revoked", std::vector<std::uint8_t>(why.begin(), why.end()));
    } catch (const std::exception&) {
    }
  };
  if (wait)
    set();
  else
    publisher_ = std::thread(set);
}

}  // namespace braid::core
