#include "store_adapter.hpp"

#include <braid/error.hpp>

namespace braid_torch {

namespace {

[[noreturn]] void rethrowAsBraid(const char* what, const std::string& key, const std::exception& e,
                                 braid::ErrorCode code) {
  throw braid::Error(code, std::string("torch store ") + what + " of key '" + key +
                               "' failed: " + e.what());
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

}  // namespace braid_torch
