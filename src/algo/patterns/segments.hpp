// Where each rank's segment lies in a buffer, and how a segment is cut into pipeline chunks.
// Pure functions and a value type; no allocation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace braid::algo::patterns {

/// A run of elements: [offset, offset + count).
struct Range {
  std::size_t offset = 0;
  std::size_t count = 0;
  friend bool operator==(const Range&, const Range&) = default;
};

/// Part `index` of `total` elements cut into `parts` balanced parts: the first total % parts
/// parts hold one element more.
constexpr Range evenSplit(std::size_t total, int parts, int index) noexcept {
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t base = total / p;
  const std::size_t rem = total % p;
  return {i * base + std::min(i, rem), base + (i < rem ? 1 : 0)};
}

/// Copies elements [0, total) of `src` (elements of `es` bytes) to `dst`, all but `skip`.
inline void copyAllBut(std::uint8_t* dst, const std::uint8_t* src, std::size_t total, Range skip,
                       std::size_t es) noexcept {
  std::memcpy(dst, src, skip.offset * es);
  const std::size_t tail = skip.offset + skip.count;
  std::memcpy(dst + tail * es, src + tail * es, (total - tail) * es);
}

/// Elements per pipeline chunk: chunkBytes, bounded by one of `slots` equal slots of scratch
/// when slots > 0, rounded down to whole elements, at least one element.
constexpr std::size_t chunkElements(std::size_t chunkBytes, std::size_t scratchBytes,
                                    std::size_t slots, std::size_t elemSize) noexcept {
  std::size_t bytes = chunkBytes;
  if (slots > 0) bytes = std::min(bytes, scratchBytes / slots);
  return std::max<std::size_t>(1, bytes / elemSize);
}

/// Number of chunks of `chunkElems` elements covering `count` elements (0 for count 0).
constexpr std::size_t chunkCount(std::size_t count, std::size_t chunkElems) noexcept {
  return (count + chunkElems - 1) / chunkElems;
}

/// Chunk `index` of the range `r` (empty once index is past its end).
constexpr Range chunkOf(Range r, std::size_t chunkElems, std::size_t index) noexcept {
  const std::size_t begin = std::min(r.count, index * chunkElems);
  const std::size_t end = std::min(r.count, begin + chunkElems);
  return {r.offset + begin, end - begin};
}

/// The segment of each rank in a buffer shared by all ranks: balanced parts of a total, equal
/// blocks of `count`, or explicit per-rank counts with displacements (none: packed in rank
/// order). Lookups are O(1), except packed counts, where moving to a neighbouring index (the
/// order rings and pairwise exchanges walk in) is O(1) and a jump is O(size).
class SegmentLayout {
 public:
  static SegmentLayout even(std::size_t total, int parts) noexcept {
    SegmentLayout l(Kind::Even, parts);
    l.total_ = total;
    l.max_ = parts > 0
                 ? (total + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts)
                 : 0;
    return l;
  }
  static SegmentLayout blocks(std::size_t count, int parts) noexcept {
    SegmentLayout l(Kind::Blocks, parts);
    l.total_ = count * static_cast<std::size_t>(parts);
    l.max_ = count;
    return l;
  }
  /// counts and displs (if not empty) must have `counts.size()` entries and outlive the layout.
  static SegmentLayout varying(std::span<const std::size_t> counts,
                               std::span<const std::size_t> displs) noexcept {
    SegmentLayout l(Kind::Varying, static_cast<int>(counts.size()));
    l.counts_ = counts;
    l.displs_ = displs;
    for (std::size_t c : counts) {
      l.total_ += c;
      l.max_ = std::max(l.max_, c);
    }
    return l;
  }

  int parts() const noexcept { return parts_; }
  /// Largest segment, in elements.
  std::size_t maxCount() const noexcept { return max_; }
  /// Sum of the segments' counts.
  std::size_t totalCount() const noexcept { return total_; }

  Range at(int index) noexcept {
    const auto i = static_cast<std::size_t>(index);
    switch (kind_) {
      case Kind::Even:
        return evenSplit(total_, parts_, index);
      case Kind::Blocks:
        return {i * max_, max_};
      case Kind::Varying:
        break;
    }
    if (!displs_.empty()) return {displs_[i], counts_[i]};
    return {packedOffset(index), counts_[i]};
  }

 private:
  enum class Kind { Even, Blocks, Varying };
  SegmentLayout(Kind k, int parts) noexcept : kind_(k), parts_(parts) {}

  std::size_t packedOffset(int index) noexcept {
    std::size_t off = 0;
    if (index == cursor_ + 1 && cursor_ >= 0) {
      off = cursorOffset_ + counts_[static_cast<std::size_t>(cursor_)];
    } else if (index == cursor_ - 1) {
      off = cursorOffset_ - counts_[static_cast<std::size_t>(index)];
    } else if (index == cursor_) {
      off = cursorOffset_;
    } else if (index == parts_ - 1) {
      off = total_ - counts_[static_cast<std::size_t>(index)];
    } else {
      for (int j = 0; j < index; ++j) off += counts_[static_cast<std::size_t>(j)];
    }
    cursor_ = index;
    cursorOffset_ = off;
    return off;
  }

  Kind kind_;
  int parts_;
  std::size_t total_ = 0;
  std::size_t max_ = 0;
  std::span<const std::size_t> counts_;
  std::span<const std::size_t> displs_;
  int cursor_ = -2;
  std::size_t cursorOffset_ = 0;
};

}  // namespace braid::algo::patterns
