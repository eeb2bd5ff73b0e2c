// The lanes of a transport that carries them (TCP, UCX, shared memory; docs/architecture.md,
// "Shared connections"): which are open, with the error of those aborted on this rank; which
// were closed here (their late messages are dropped); and the peers each open lane's
// communicator talks to (told when it closes or aborts here). Lane 0 is the communicator that
// made the connections (over shared memory: TCP and UCX give it a lane of its own): never opened
// here, its peers are every other rank, told only while another lane is open (otherwise the
// transport goes with it, and its closed rings tell them). Not thread-safe: the transport's lock
// guards it.
#pragma once

#include <braid/error.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace braid::transport {

class LaneBook {
 public:
  /// Opens `lane` for a communicator talking to `peers` (empty: every rank of `size` but
  /// `self`). Error(Internal) when `lane` is 0 or open already (`where` names the connections).
  void open(std::uint64_t lane, std::vector<int> peers, int self, int size,
            const std::string& where) {
    if (lane == 0 || !open_.emplace(lane, std::nullopt).second)
      throw Error(ErrorCode::Internal, "rank " + std::to_string(self) + ": lane " +
                                           std::to_string(lane) + " is open already on " + where +
                                           " (two communicators whose ids hash alike)");
    closed_.erase(lane);
    if (peers.empty())
      for (int r = 0; r < size; ++r)
        if (r != self) peers.push_back(r);
    peers_[lane] = std::move(peers);
  }
  /// The lane's communicator is gone here: returns the peers to tell.
  std::vector<int> close(std::uint64_t lane) {
    if (const auto it = open_.find(lane); it != open_.end()) {
      if (it->second) --aborted_;
      open_.erase(it);
    }
    closed_.insert(lane);
    std::vector<int> out;
    if (const auto it = peers_.find(lane); it != peers_.end()) {
      out = std::move(it->second);
      peers_.erase(it);
    }
    return out;
  }
  /// Aborted here with `error` (the first reason stays); returns the peers to tell.
  const std::vector<int>& abort(std::uint64_t lane, Error error) {
    auto& failure = open_[lane];
    if (!failure) {
      failure = std::move(error);
      ++aborted_;
    }
    return peers_[lane];
  }
  /// Lane 0's peers to tell that its communicator is gone here (`self`, `size`: the
  /// transport's rank and size): every other rank while another lane is open, else none. (Only
  /// a shared-memory segment's owner posts on lane 0 while children share its transport.)
  std::vector<int> ownerPeers(int self, int size) const {
    for (const auto& l : open_)
      if (l.first != 0) {
        std::vector<int> out;
        for (int r = 0; r < size; ++r)
          if (r != self) out.push_back(r);
        return out;
      }
    return {};
  }
  /// Whether `lane` is the only lane open (or none is): aborting it is aborting the transport.
  bool onlyOpen(std::uint64_t lane) const {
    return open_.size() <= 1 && (open_.empty() || open_.count(lane) != 0);
  }
  // (Asked for every message: the common case, nothing closed or aborted, looks up nothing.)
  bool closed(std::uint64_t lane) const { return !closed_.empty() && closed_.count(lane) != 0; }
  /// The error of a lane aborted here, else nullptr.
  const Error* aborted(std::uint64_t lane) const {
    if (aborted_ == 0) return nullptr;
    const auto it = open_.find(lane);
    return it != open_.end() && it->second ? &*it->second : nullptr;
  }
  /// Closed or aborted here: what a pair connected later must still be told.
  bool gone(std::uint64_t lane) const { return closed(lane) || aborted(lane) != nullptr; }

 private:
  std::unordered_map<std::uint64_t, std::optional<Error>> open_;
  std::unordered_set<std::uint64_t> closed_;
  std::size_t aborted_ = 0;  // open_ entries with an error
  std::unordered_map<std::uint64_t, std::vector<int>> peers_;
};

}  // namespace braid::transport
