// The ranks' notice board: braid-check's results travel through the job's store, not through the
// communicator under test, so a rank whose communicator failed (or never came up) still reports
// why, and a rank that never reports is named instead of waited for forever.
#pragma once

#include <braid/store.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace braid::check {

class Board {
 public:
  /// Keys live under `prefix` (one namespace per run of braid-check on this store).
  Board(Store& store, std::string prefix, int rank, int size);

  /// Publishes this rank's result of `stage`.
  void post(const std::string& stage, const std::string& value);

  /// Every rank's result of `stage`, indexed by rank; nullopt for a rank that did not post it.
  /// Waits until all posted, at most `bound`, and gives up earlier once no other rank has posted
  /// for `quiet` (so one lost rank costs `quiet`, not `bound`). Only the ranks marked in
  /// `waitFor` are waited for (empty: every rank). Store errors propagate.
  std::vector<std::optional<std::string>> collect(const std::string& stage,
                                                  std::chrono::milliseconds bound,
                                                  std::chrono::milliseconds quiet,
                                                  const std::vector<bool>& waitFor = {});

  /// Ranks for which `results` holds nothing, as "2, 5".
  static std::string missingRanks(const std::vector<std::optional<std::string>>& results);

 private:
  std::string key(const std::string& stage, int rank) const;

  Store& store_;
  std::string prefix_;
  int rank_;
  int size_;
};

/// Fields of one record are separated by tabs, records by newlines; text put into a field has
/// both replaced by spaces.
std::string field(std::string text);
std::vector<std::string> splitFields(const std::string& record);
std::vector<std::string> splitRecords(const std::string& text);

}  // namespace braid::check
