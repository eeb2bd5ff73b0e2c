#include "store/all_gather.hpp"

#include <braid/error.hpp>

namespace braid {

std::vector<std::string> allGatherStrings(Store& store, const std::string& prefix, int rank,
                                          int size, const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          const std::string& what) {
  auto key = [&](int r) { return prefix + "/" + std::to_string(r); };
  store.setString(key(rank), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(r));
  try {
    store.wait(keys, timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({keys[static_cast<std::size_t>(r)]}))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw Error(ErrorCode::Timeout, "rank " + std::to_string(rank) + " timed out after " +
                                        std::to_string(timeout.count()) + " ms waiting for ranks " +
                                        missing + " to publish " + what);
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(store.getString(k, timeout));
  return values;
}

}  // namespace braid
