// snapd block checksum, version 1: the checksum recorded with every snapshot.
//
// Data are cut into 64 KiB blocks; each block is hashed independently (four xxHash64-style
// lanes seeded with the block index) and the block hashes are combined by a wrapping sum of
// their avalanched values, plus the total length. Blocks are independent so a GPU kernel can
// compute the same value bit for bit with one thread group per block (kernels/).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapd/checksum_math.h"

namespace snapd {

inline constexpr size_t kChecksumBlockBytes = checksum_math::kBlockBytes;

// Hash of one block; `block_index` seeds it. Exposed for the GPU reference tests.
uint64_t ChecksumBlock(const void* data, size_t bytes, uint64_t block_index);

// Checksum of `bytes` bytes at `data`.
uint64_t Checksum(const void* data, size_t bytes);

// Folds per-block hashes into the final checksum; Checksum() == CombineBlockHashes over all
// blocks. Lets callers hash blocks in parallel or on another device.
uint64_t CombineBlockHashes(const uint64_t* block_hashes, size_t blocks, size_t total_bytes);

}  // namespace snapd
