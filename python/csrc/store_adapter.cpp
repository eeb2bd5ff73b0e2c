#include "store_adapter.hpp"

#include <algorithm>
#include <braid/error.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "transport/tcp/socket.hpp"

namespace braid_torch {

namespace {

[[noreturn]] void rethrowAsBraid(const char* what, const std::string& key, const std::exception& e,
                                 braid::ErrorCode code) {
  throw braid::Error(
      code, std::string("torch store ") + what + " of key '" + key + "' failed: " + e.what());
}

std::string joinKeys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

void TorchStoreAdapter::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  try {
    store_->set(key, value);
  } catch (const std::exception& e) {
    rethrowAsBraid("set", key, e, braid::ErrorCode::Internal);
  }
}

std::vector<std::uint8_t> TorchStoreAdapter::get(const std::string& key,
                                                 std::chrono::milliseconds timeout) {
  try {
    store_->wait({key}, timeout);
  } catch (const std::exception& e) {
    rethrowAsBraid("wait", key, e, braid::ErrorCode::Timeout);
  }
  try {
    return store_->get(key);
  } catch (const std::exception& e) {
    rethrowAsBraid("get", key, e, braid::ErrorCode::Timeout);
  }
}

std::int64_t TorchStoreAdapter::add(const std::string& key, std::int64_t delta) {
  try {
    return store_->add(key, delta);
  } catch (const std::exception& e) {
    rethrowAsBraid("add", key, e, braid::ErrorCode::Internal);
  }
}

std::int64_t TorchStoreAdapter::addIfReachable(const std::string& key, std::int64_t delta,
                                               std::chrono::milliseconds timeout) {
  c10d::Store* base = store_.get();
  while (auto* prefix = dynamic_cast<c10d::PrefixStore*>(base))
    base = prefix->getUnderlyingStore().get();
  if (const auto* tcp = dynamic_cast<const c10d::TCPStore*>(base)) {
    // A connection that is opened and closed at once: torch's server (libuv or not) accepts
    // and drops it without a word.
    const auto bound = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(1));
    std::string error;
    const braid::Fd probe = braid::transport::tcp::connectTo(
        {tcp->getHost(), tcp->getPort()}, 0, braid::transport::Clock::now() + bound, error);
    if (!probe)
      throw braid::Error(braid::ErrorCode::PeerLost,
                         "torch store add of key '" + key + "' not sent: its TCPStore server " +
                             tcp->getHost() + ":" + std::to_string(tcp->getPort()) +
                             " does not answer (" + error + ")");
  }
  return add(key, delta);
}

void TorchStoreAdapter::wait(const std::vector<std::string>& keys,
                             std::chrono::milliseconds timeout) {
  try {
    store_->wait(keys, timeout);
  } catch (const std::exception& e) {
    rethrowAsBraid("wait", joinKeys(keys), e, braid::ErrorCode::Timeout);
  }
}

bool TorchStoreAdapter::check(const std::vector<std::string>& keys) {
  try {
    return store_->check(keys);
  } catch (const std::exception& e) {
    rethrowAsBraid("check", joinKeys(keys), e, braid::ErrorCode::Internal);
  }
}

std::int64_t TorchStoreAdapter::deleteKeys(const std::vector<std::string>& keys) {
  std::int64_t removed = 0;
  for (const auto& key : keys) {
    try {
      removed += store_->deleteKey(key) ? 1 : 0;
    } catch (const std::exception& e) {
      deleteFailed_ = true;
      rethrowAsBraid("deleteKey", key, e, braid::ErrorCode::InvalidArgument);
    }
  }
  return removed;
}

std::int64_t TorchStoreAdapter::numKeys() {
  try {
    return store_->getNumKeys();
  } catch (const std::exception& e) {
    deleteFailed_ = true;
    throw braid::Error(braid::ErrorCode::InvalidArgument,
                       std::string("torch store getNumKeys failed: ") + e.what());
  }
}

std::shared_ptr<braid::Store> bootstrapStore(const c10::intrusive_ptr<c10d::Store>& torchStore,
                                             int rank, const braid::Options& options) {
  auto adapter = std::make_shared<TorchStoreAdapter>(torchStore);
  braid::LaunchInfo launch;
  try {
    launch = braid::LaunchInfo::fromEnv();
  } catch (const braid::Error&) {
    return adapter;  // no launcher's store to use (bad or partial variables): torch's
  }
  if (!launch.storeExternal || launch.storeSource != "BRAID_STORE" || launch.storePort == 0)
    return adapter;
  auto tcp =
      std::make_shared<braid::TcpStore>(launch.storeHost, launch.storePort, options.connectTimeout,
                                        braid::TcpStore::kDefaultOpTimeout, options.security);
  // torch's store is already this group's namespace: the key is the group's.
  const std::string key = "braid/namespace";
  std::string ns;
  if (rank == 0) {
    ns = "braid/torch/" + std::to_string(tcp->add("braid/torch/groups", 1));
    adapter->setString(key, ns);
  } else {
    ns = adapter->getString(key, options.connectTimeout);
  }
  return std::make_shared<braid::PrefixStore>(tcp, ns);
}

}  // namespace braid_torch
