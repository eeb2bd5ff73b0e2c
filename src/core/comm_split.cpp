// Sub-communicators: split(color, key), subgroup(ranks) (a split with every rank passing the same
// list) and memberSubgroup(ranks, name) (made by its members alone, as torch's new_group). Each
// agrees on its members, then runs the bootstrap over the parent's connections
// (Comm::Impl::makeSub, comm_create.cpp).
#include <algorithm>
#include <braid/comm.hpp>
#include <string>
#include <vector>

#include "core/comm_impl.hpp"

namespace braid {

// ---------------------------------------------------------------- sub-communicators

std::unique_ptr<Comm> Comm::split(int color, int key) {
  std::int32_t mine[2] = {color, key};
  std::vector<std::int32_t> all(2 * static_cast<std::size_t>(impl_->size));
  allgather(mine, all.data(), 2, DataType::Int32);
  // Validate on every rank from the same gathered data, so every rank fails the same way.
  for (int r = 0; r < impl_->size; ++r) {
    if (all[2 * r] < 0 && all[2 * r] != kUndefinedColor)
      throw Error(ErrorCode::InvalidArgument,
                  "split on rank " + std::to_string(impl_->rank) + " of communicator " + impl_->id +
                      ": rank " + std::to_string(r) + " passed color " +
                      std::to_string(all[2 * r]) + " (colors are >= 0 or kUndefinedColor)");
  }
  const int seq = ++impl_->splitSeq;
  if (color == kUndefinedColor) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < impl_->size; ++r)
    if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), impl_->rank) - members.begin());
  std::string id = impl_->id + "/s" + std::to_string(seq) + "c" + std::to_string(color);
  return std::unique_ptr<Comm>(
      new Comm(impl_->makeSub(newRank, members, std::move(id), impl_->opts)));
}

namespace {

// FNV-1a over a rank list: members compare it to find one that passed another list.
std::uint64_t rankListHash(std::span<const int> ranks) {
  std::uint64_t h = 1469598103934665603ull;
  for (int r : ranks) {
    h ^= static_cast<std::uint32_t>(r);
    h *= 1099511628211ull;
  }
  return h ^ ranks.size();
}

// The position of `rank` in `ranks` (-1: not listed), after checking that every entry is a rank
// of a communicator of `size` and none is listed twice.
int positionInRankList(std::span<const int> ranks, int rank, int size, const std::string& where) {
  std::vector<bool> seen(static_cast<std::size_t>(size), false);
  int position = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= size)
      throw Error(ErrorCode::InvalidArgument, where + ": ranks[" + std::to_string(i) +
                                                  "] = " + std::to_string(r) + " is outside [0, " +
                                                  std::to_string(size) + ")");
    if (seen[static_cast<std::size_t>(r)])
      throw Error(ErrorCode::InvalidArgument,
                  where + ": rank " + std::to_string(r) + " appears twice in ranks");
    seen[static_cast<std::size_t>(r)] = true;
    if (r == rank) position = static_cast<int>(i);
  }
  return position;
}

}  // namespace

std::unique_ptr<Comm> Comm::subgroup(std::span<const int> ranks) {
  // Every rank must pass the same list.
  std::uint64_t h = rankListHash(ranks);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(impl_->size));
  allgather(&h, all.data(), 1, DataType::Int64);
  const std::string where =
      "subgroup on rank " + std::to_string(impl_->rank) + " of communicator " + impl_->id;
  for (int r = 0; r < impl_->size; ++r)
    if (all[r] != all[0])
      throw Error(ErrorCode::InvalidArgument,
                  where + ": rank " + std::to_string(r) +
                      " passed a different rank list than rank 0 (every rank must pass the same)");
  const int position = positionInRankList(ranks, impl_->rank, impl_->size, where);
  return split(position >= 0 ? 0 : kUndefinedColor, position);
}

std::unique_ptr<Comm> Comm::memberSubgroup(std::span<const int> ranks, const std::string& name) {
  const std::string where = "memberSubgroup '" + name + "' on rank " + std::to_string(impl_->rank) +
                            " of communicator " + impl_->id;
  if (name.empty())
    throw Error(ErrorCode::InvalidArgument,
                where +
                    ": name is empty (it tells this communicator's groups apart: the same on "
                    "every member, once per group)");
  const int position = positionInRankList(ranks, impl_->rank, impl_->size, where);
  if (position < 0)
    throw Error(ErrorCode::InvalidArgument,
                where + ": this rank is not in ranks (only the members call memberSubgroup)");
  {
    std::lock_guard<std::mutex> lk(impl_->subgroupNamesMu);
    if (!impl_->subgroupNames.insert(name).second)
      throw Error(ErrorCode::InvalidArgument,
                  where +
                      ": name was used already on this communicator (a name is used once, "
                      "by the call that made the group or failed to)");
  }
  // The id is the name's, so the members agree on it (and on the lane: its hash) without
  // talking; the split ids ("/s...") never start with "/g".
  std::string id = impl_->id + "/g" + name;
  // The first listed rank publishes its list in the new communicator's namespace, the others
  // compare theirs and count themselves in; the one that makes the count complete publishes the
  // verdict "ok", a member that disagrees (or a second member that listed itself first) the
  // reason, so that every member fails at once instead of waiting out the connect timeout for a
  // partner that is not coming. (boot/ is deleted with the bootstrap's keys, after every member
  // read it.)
  PrefixStore ns(impl_->store, "braid/" + id + "/");
  // The list itself ("0,3,5"), so that a rank that lists itself in a group whose first rank
  // did not list it sees that it is no member of it (and leaves that group alone).
  std::string mine;
  for (int r : ranks) mine += (mine.empty() ? "" : ",") + std::to_string(r);
  const int n = static_cast<int>(ranks.size());
  // A disagreement adds this much, so the count never completes afterwards.
  constexpr std::int64_t kDisagreed = std::int64_t{1} << 40;
  const auto disagree = [&](const std::string& why) {
    const std::string text = where + ": " + why;
    try {
      ns.add("boot/agreed", kDisagreed);
      ns.setString("boot/verdict", "I:" + text);
    } catch (const Error&) {  // the store's own failure must not hide why this rank failed
    }
    throw Error(ErrorCode::InvalidArgument, text);
  };
  const auto waitFor = [&](const std::string& key, const std::string& what) {
    try {
      return ns.getString(key, impl_->opts.connectTimeout);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout, where + ": " + what + " within " +
                                          std::to_string(impl_->opts.connectTimeout.count()) +
                                          " ms (" + e.detail() + ")");
    }
  };
  if (position == 0) {
    // Members that listed different ranks first would each publish here; the second learns it.
    if (ns.add("boot/first", 1) != 1)
      disagree("another member also listed itself first (every member must pass the same list)");
    ns.setString("boot/members", mine);
  } else {
    const std::string theirs =
        waitFor("boot/members", "the first listed rank (" + std::to_string(ranks[0]) +
                                    ") did not create the group");
    if (theirs != mine) {
      const std::string why = "the first listed rank (" + std::to_string(ranks[0]) +
                              ") passed a different rank list (every member must pass the same)";
      bool listed = false;  // in the first rank's list: a member that disagrees
      for (std::size_t at = 0; at < theirs.size();) {
        std::size_t end = theirs.find(',', at);
        if (end == std::string::npos) end = theirs.size();
        listed = listed || theirs.compare(at, end - at, std::to_string(impl_->rank)) == 0;
        at = end + 1;
      }
      if (!listed)  // not a member of the group it made: that group is not this rank's to fail
        throw Error(ErrorCode::InvalidArgument, where + ": " + why);
      disagree(why);
    }
  }
  if (ns.add("boot/agreed", 1) == n) ns.setString("boot/verdict", "ok");
  const std::string verdict = waitFor("boot/verdict", "not every member created the group");
  if (verdict != "ok")
    throw Error(ErrorCode::InvalidArgument,
                where + ": another member failed to create the group: " +
                    verdict.substr(std::min<std::size_t>(2, verdict.size())));
  const std::vector<int> members(ranks.begin(), ranks.end());
  auto impl = impl_->makeSub(position, members, std::move(id), impl_->opts);
  impl->log(2, "member subgroup of communicator " + impl_->id + ": " +
                   std::to_string(ranks.size()) + " ranks; its rank " + std::to_string(position) +
                   " is rank " + std::to_string(impl_->rank) + " there");
  return std::unique_ptr<Comm>(new Comm(std::move(impl)));
}

}  // namespace braid
