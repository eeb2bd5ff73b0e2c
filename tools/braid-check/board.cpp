#include "board.hpp"

#include <algorithm>
#include <thread>

namespace braid::check {

Board::Board(Store& store, std::string prefix, int rank, int size)
    : store_(store), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

std::string Board::key(const std::string& stage, int rank) const {
  return prefix_ + stage + "/" + std::to_string(rank);
}

void Board::post(const std::string& stage, const std::string& value) {
  store_.setString(key(stage, rank_), value);
}

std::vector<std::optional<std::string>> Board::collect(const std::string& stage,
                                                       std::chrono::milliseconds bound,
                                                       std::chrono::milliseconds quiet,
                                                       const std::vector<bool>& waitFor) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto lastArrival = start;
  std::vector<std::optional<std::string>> out(static_cast<std::size_t>(size_));
  int missing = 0;
  for (int r = 0; r < size_; ++r)
    if (waitFor.empty() || waitFor[static_cast<std::size_t>(r)]) ++missing;
  auto poll = std::chrono::milliseconds(1);
  while (true) {
    for (int r = 0; r < size_; ++r) {
      auto& slot = out[static_cast<std::size_t>(r)];
      const bool awaited = waitFor.empty() || waitFor[static_cast<std::size_t>(r)];
      if (slot || !awaited || !store_.check({key(stage, r)})) continue;
      slot = store_.getString(key(stage, r), bound);
      --missing;
      if (r != rank_) lastArrival = Clock::now();
    }
    const auto now = Clock::now();
    if (missing == 0 || now - start >= bound || now - lastArrival >= quiet) return out;
    std::this_thread::sleep_for(poll);
    poll = std::min(poll * 2, std::chrono::milliseconds(50));
  }
}

std::string Board::missingRanks(const std::vector<std::optional<std::string>>& results) {
  std::string text;
  for (std::size_t r = 0; r < results.size(); ++r)
    if (!results[r]) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

std::string field(std::string text) {
  std::replace(text.begin(), text.end(), '\t', ' ');
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

namespace {
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}
}  // namespace

std::vector<std::string> splitFields(const std::string& record) {
  return split(record, '\t');
}

std::vector<std::string> splitRecords(const std::string& text) {
  std::vector<std::string> records;
  for (std::string& r : split(text, '\n'))
    if (!r.empty()) records.push_back(std::move(r));
  return records;
}

}  // namespace braid::check
