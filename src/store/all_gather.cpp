#include "store/all_gather.hpp"

#include <algorithm>
#include <braid/error.hpp>
#include <map>

namespace braid {

namespace {

using Clock = std::chrono::steady_clock;

// A blob of (rank, value) entries: u32 count, then per entry u32 rank, u32 length, bytes.
void putU32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string encode(const std::vector<std::pair<int, std::string>>& entries) {
  std::string out;
  putU32(out, static_cast<std::uint32_t>(entries.size()));
  for (const auto& [r, v] : entries) {
    putU32(out, static_cast<std::uint32_t>(r));
    putU32(out, static_cast<std::uint32_t>(v.size()));
    out += v;
  }
  return out;
}

// Decodes into table[rank]; false when the blob is not well formed or names a rank twice or
// outside [0, table.size()).
bool decodeInto(const std::string& blob, std::vector<std::string>& table, std::vector<bool>& seen) {
  std::size_t at = 0;
  auto u32 = [&](std::uint32_t& v) {
    if (blob.size() - at < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<std::uint32_t>(static_cast<unsigned char>(blob[at + i])) << (8 * i);
    at += 4;
    return true;
  };
  std::uint32_t n = 0;
  if (!u32(n)) return false;
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint32_t r = 0, len = 0;
    if (!u32(r) || !u32(len) || r >= table.size() || seen[r] || blob.size() - at < len)
      return false;
    table[r] = blob.substr(at, len);
    seen[r] = true;
    at += len;
  }
  return at == blob.size();
}

std::string rankText(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

std::vector<int> nodeIndices(const std::vector<std::string>& identities) {
  std::map<std::string, int> index;
  std::vector<int> out;
  out.reserve(identities.size());
  for (const auto& id : identities)
    out.push_back(index.emplace(id, static_cast<int>(index.size())).first->second);
  return out;
}

std::vector<std::string> gatherByNode(Store& store, const std::string& prefix, int rank, int size,
                                      std::span<const int> nodeOf, const std::string& mine,
                                      std::chrono::milliseconds timeout, const std::string& what) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::InvalidArgument, "gather of " + what + ": rank " + std::to_string(rank) +
                                                " is outside size " + std::to_string(size));
  if (!nodeOf.empty() && nodeOf.size() != static_cast<std::size_t>(size))
    throw Error(ErrorCode::InvalidArgument, "gather of " + what + " on rank " +
                                                std::to_string(rank) + ": nodeOf has " +
                                                std::to_string(nodeOf.size()) + " entries for " +
                                                std::to_string(size) + " ranks");
  const auto node = [&](int r) { return nodeOf.empty() ? 0 : nodeOf[static_cast<std::size_t>(r)]; };
  // Leaders in rank order (the first is rank 0), and each node's members.
  std::map<int, std::vector<int>> members;
  std::vector<int> leaders;
  for (int r = 0; r < size; ++r) {
    auto& m = members[node(r)];
    if (m.empty()) leaders.push_back(r);
    m.push_back(r);
  }
  const std::vector<int>& myNode = members[node(rank)];
  const int myLeader = myNode.front();
  const auto deadline = Clock::now() + timeout;
  const auto left = [&] {
    return std::chrono::ceil<std::chrono::milliseconds>(
        std::max(deadline - Clock::now(), Clock::duration::zero()));
  };
  const std::string self = "rank " + std::to_string(rank);
  const auto timedOut = [&](const std::string& waitingFor) {
    return Error(ErrorCode::Timeout, self + " timed out after " + std::to_string(timeout.count()) +
                                         " ms waiting for " + waitingFor);
  };
  const auto rankKey = [&](int r) { return prefix + "/r/" + std::to_string(r); };
  const auto nodeKey = [&](int l) { return prefix + "/n/" + std::to_string(l); };
  const std::string allKey = prefix + "/all";
  // Waits for every key of `ranks` (keyOf), then reads them; a timeout names the missing ranks.
  const auto collect = [&](const std::vector<int>& ranks, auto keyOf, const std::string& part) {
    std::vector<std::string> keys;
    for (int r : ranks) keys.push_back(keyOf(r));
    std::vector<std::string> values;
    if (keys.empty()) return values;
    try {
      store.wait(keys, left());
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      std::vector<int> missing;
      for (std::size_t i = 0; i < keys.size(); ++i)
        if (!store.check({keys[i]})) missing.push_back(ranks[i]);
      throw timedOut("ranks " + rankText(missing) + " to publish " + part);
    }
    for (const auto& k : keys) values.push_back(store.getString(k, left()));
    return values;
  };

  if (rank != myLeader) {
    store.setString(rankKey(rank), mine);
  } else {
    std::vector<int> others(myNode.begin() + 1, myNode.end());
    const auto got = collect(others, rankKey, what);
    std::vector<std::pair<int, std::string>> entries{{rank, mine}};
    for (std::size_t i = 0; i < others.size(); ++i) entries.emplace_back(others[i], got[i]);
    if (rank != 0) {
      store.setString(nodeKey(rank), encode(entries));
    } else {
      std::vector<std::string> table(static_cast<std::size_t>(size));
      std::vector<bool> seen(static_cast<std::size_t>(size), false);
      for (const auto& [r, v] : entries) {
        table[static_cast<std::size_t>(r)] = v;
        seen[static_cast<std::size_t>(r)] = true;
      }
      std::vector<int> otherLeaders(leaders.begin() + 1, leaders.end());
      const auto blobs =
          collect(otherLeaders, nodeKey, what + " for their node (as its lowest rank)");
      for (std::size_t i = 0; i < blobs.size(); ++i)
        if (!decodeInto(blobs[i], table, seen))
          throw Error(ErrorCode::Internal, self + ": the node table of " + what + " from rank " +
                                               std::to_string(otherLeaders[i]) + " is malformed");
      std::vector<std::pair<int, std::string>> all;
      for (int r = 0; r < size; ++r) all.emplace_back(r, table[static_cast<std::size_t>(r)]);
      store.setString(allKey, encode(all));
      return table;
    }
  }
  std::string blob;
  try {
    blob = store.getString(allKey, left());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    throw timedOut("rank 0 to publish the table of " + what + " (gathered by node: some rank " +
                   "did not publish; its node's lowest rank or rank 0 names it)");
  }
  std::vector<std::string> table(static_cast<std::size_t>(size));
  std::vector<bool> seen(static_cast<std::size_t>(size), false);
  if (!decodeInto(blob, table, seen) || std::find(seen.begin(), seen.end(), false) != seen.end())
    throw Error(ErrorCode::Internal,
                self + ": the table of " + what + " from rank 0 is malformed or incomplete");
  return table;
}

std::vector<std::string> allGatherStrings(Store& store, const std::string& prefix, int rank,
                                          int size, const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          const std::string& what) {
  return gatherByNode(store, prefix, rank, size, {}, mine, timeout, what);
}

}  // namespace braid
