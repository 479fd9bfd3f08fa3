// Index arithmetic and predicates shared by the CPU references and the CUDA kernels, so both
// compute the same thing by construction.
#pragma once

#include <cstdint>

#include "adjsnap/checksum_math.h"  // ADJSNAP_HD
#include "adjsnap/kernels.h"

namespace adjsnap::kernels::math {

// Offset, in elements of the full array, of the packed box element `p` (row-major, slowest
// axis first).
ADJSNAP_HD inline uint64_t BoxSourceIndex(const uint64_t dims[3], const uint64_t origin[3],
                                        const uint64_t extent[3], uint64_t p) {
  uint64_t x = p % extent[2];
  uint64_t rest = p / extent[2];
  uint64_t y = rest % extent[1];
  uint64_t z = rest / extent[1];
  return ((origin[0] + z) * dims[1] + (origin[1] + y)) * dims[2] + (origin[2] + x);
}

ADJSNAP_HD inline bool NonFinite32(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }
ADJSNAP_HD inline bool NonFinite64(uint64_t bits) {
  return (bits & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}

// The checksum kernel's schedule: a 64 KiB checksum block is read in tiles of this many bytes
// (zero-padded past its end); the lanes take ceil(tile bytes / 32) stripes of each tile.
inline constexpr uint32_t kTileBytes = 4096;
ADJSNAP_HD inline uint64_t TileStripes(uint64_t tile_bytes) {
  return (tile_bytes + checksum_math::kStripeBytes - 1) / checksum_math::kStripeBytes;
}

// Feeds one tile into the lanes; `tile` holds `tile_bytes` bytes zero-padded to a whole stripe.
ADJSNAP_HD inline void ConsumeTile(uint64_t lanes[4], const unsigned char* tile, uint64_t tile_bytes) {
  checksum_math::LaneStripes(lanes, tile, TileStripes(tile_bytes));
}

}  // namespace adjsnap::kernels::math
