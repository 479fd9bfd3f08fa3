#include "adjsnap/range_allocator.h"

#include <algorithm>
#include <iterator>

namespace adjsnap {

RangeAllocator::RangeAllocator(uint64_t capacity) {
  if (capacity) free_[0] = capacity;
}

std::optional<uint64_t> RangeAllocator::Allocate(uint64_t bytes, bool from_top) {
  if (bytes == 0) return std::nullopt;
  if (from_top) {
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
      if (it->second < bytes) continue;
      uint64_t offset = it->first + it->second - bytes;
      it->second -= bytes;
      if (it->second == 0) free_.erase(std::next(it).base());
      return offset;
    }
    return std::nullopt;
  }
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    uint64_t offset = it->first;
    uint64_t rest = it->second - bytes;
    free_.erase(it);
    if (rest) free_[offset + bytes] = rest;
    return offset;
  }
  return std::nullopt;
}

bool RangeAllocator::AllocateAt(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return false;
  auto it = free_.upper_bound(offset);
  if (it == free_.begin()) return false;
  --it;  // the free range starting at or below `offset`
  uint64_t start = it->first, length = it->second;
  if (offset + bytes < offset || offset + bytes > start + length) return false;
  free_.erase(it);
  if (offset > start) free_[start] = offset - start;
  if (start + length > offset + bytes) free_[offset + bytes] = start + length - offset - bytes;
  return true;
}

bool RangeAllocator::IsFree(uint64_t offset, uint64_t bytes) const {
  auto it = free_.upper_bound(offset);
  if (it == free_.begin()) return false;
  --it;
  return offset + bytes >= offset && offset + bytes <= it->first + it->second;
}

std::vector<std::pair<uint64_t, uint64_t>> RangeAllocator::FreeRanges() const {
  return {free_.begin(), free_.end()};
}

void RangeAllocator::Free(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_[offset] = bytes;
}

uint64_t RangeAllocator::largest_free() const {
  uint64_t best = 0;
  for (const auto& [offset, length] : free_) best = std::max(best, length);
  return best;
}

uint64_t RangeAllocator::free_bytes() const {
  uint64_t sum = 0;
  for (const auto& [offset, length] : free_) sum += length;
  return sum;
}

}  // namespace adjsnap
