// A buffer for the disk tier's O_DIRECT calls in tests: DiskTier::FileBytes(raw) bytes, aligned
// as the disk tier's files are.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "disk_tier/disk_tier.h"

namespace adjsnap::testing {

struct AlignedBuffer {
  explicit AlignedBuffer(uint64_t raw)
      : bytes(DiskTier::FileBytes(raw)),
        data(static_cast<char*>(std::aligned_alloc(DiskTier::kAlignment, bytes)), std::free) {}
  uint64_t bytes;
  std::unique_ptr<char, void (*)(void*)> data;
};

}  // namespace adjsnap::testing
