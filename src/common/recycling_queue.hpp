// A FIFO that hands its popped elements out again: an element that owns storage (a vector)
// keeps it, so a steady stream of pushes and pops allocates nothing. Not thread-safe.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace braid {

template <typename T>
class RecyclingQueue {
 public:
  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }
  T& front() noexcept { return slots_[head_]; }
  const T& front() const noexcept { return slots_[head_]; }
  /// A new element at the back. It holds whatever an element popped earlier left there: the
  /// caller sets every field (storage it owns keeps its capacity).
  T& push() {
    if (count_ == slots_.size()) grow();
    T& slot = slots_[(head_ + count_) & (slots_.size() - 1)];
    ++count_;
    return slot;
  }
  void pop() noexcept {
    head_ = (head_ + 1) & (slots_.size() - 1);
    if (--count_ == 0) {
      head_ = 0;
      // A burst that grew the queue leaves: its storage goes too.
      if (slots_.size() > kKept) std::vector<T>(kKept).swap(slots_);
    }
  }
  /// Empties the queue and frees its storage.
  void clear() {
    std::vector<T>().swap(slots_);
    head_ = count_ = 0;
  }

 private:
  static constexpr std::size_t kKept = 16;  // a power of two

  void grow() {
    const std::size_t n = slots_.empty() ? kKept : 2 * slots_.size();
    std::vector<T> bigger(n);
    for (std::size_t i = 0; i < slots_.size(); ++i)
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;  // a power of two of them (or none)
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

}  // namespace braid
