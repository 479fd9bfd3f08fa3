// First-fit allocator of byte ranges of [0, capacity), freed ranges merged with their free
// neighbours. Bookkeeping only: the host tier places blocks in its arena with it, libadjsnap's
// device tier places run slots in its GPU pool. Not thread-safe: its owner locks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace adjsnap {

class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t capacity);
  // The lowest free range that fits, or with `from_top` the highest one (its top end).
  std::optional<uint64_t> Allocate(uint64_t bytes, bool from_top = false);
  // Takes exactly [offset, offset + bytes) if all of it is free (the host tier taking back
  // the blocks of a memfd kept through a restart); false, changing nothing, if not.
  bool AllocateAt(uint64_t offset, uint64_t bytes);
  void Free(uint64_t offset, uint64_t bytes);
  // Whether all of [offset, offset + bytes) is free.
  bool IsFree(uint64_t offset, uint64_t bytes) const;
  // The free ranges, (offset, length), in offset order.
  std::vector<std::pair<uint64_t, uint64_t>> FreeRanges() const;
  uint64_t largest_free() const;
  uint64_t free_bytes() const;

 private:
  std::map<uint64_t, uint64_t> free_;  // offset -> length, coalesced
};

}  // namespace adjsnap
