// adjsnapd block checksum, version 1: the checksum recorded with every snapshot.
//
// Data are cut into 64 KiB blocks; each block is hashed independently (four xxHash64-style
// lanes seeded with the block index) and the block hashes are combined by a wrapping sum of
// their avalanched values, plus the total length. Blocks are independent so a GPU kernel can
// compute the same value bit for bit with one thread group per block (kernels/).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adjsnap/checksum_math.h"

namespace adjsnap {

inline constexpr size_t kChecksumBlockBytes = checksum_math::kBlockBytes;

// Hash of one block; `block_index` seeds it. Exposed for the GPU reference tests.
uint64_t ChecksumBlock(const void* data, size_t bytes, uint64_t block_index);

// Checksum of `bytes` bytes at `data`.
uint64_t Checksum(const void* data, size_t bytes);

// The checksum computed inside the copy that moves the bytes, while they are in registers: a
// push's copy into the host tier records its checksum without a second read of the step.
//
// CopySummingBlocks copies `bytes` bytes from `src` to `dst` (which must not overlap) and
// returns the wrapping sum of the terms of the blocks they hold, numbered from `first_block`:
// `bytes` is a whole number of blocks, but for the last piece of a buffer. The pieces of one
// buffer, copied on several threads, add up, and FinishChecksum turns their sum into the
// buffer's Checksum(). The stores bypass the cache (the destination is read by another process,
// later): call StoreFence before telling anyone the bytes are there.
uint64_t CopySummingBlocks(void* dst, const void* src, size_t bytes, uint64_t first_block);
uint64_t FinishChecksum(uint64_t sum_of_block_terms, size_t total_bytes);
void StoreFence();
// Copies and returns Checksum(src, bytes) (fenced), on the calling thread.
uint64_t CopyWithChecksum(void* dst, const void* src, size_t bytes);

// Folds per-block hashes into the final checksum; Checksum() == CombineBlockHashes over all
// blocks. Lets callers hash blocks in parallel or on another device.
uint64_t CombineBlockHashes(const uint64_t* block_hashes, size_t blocks, size_t total_bytes);

}  // namespace adjsnap
