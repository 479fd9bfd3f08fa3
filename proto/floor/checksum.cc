#include "snapd/checksum.h"

#include <cstring>

#include "snapd/checksum_math.h"

namespace snapd {

using checksum_math::BlockHash;
using checksum_math::BlockTerm;
using checksum_math::Finish;
using checksum_math::kStripeBytes;
using checksum_math::LaneInit;
using checksum_math::LaneStripes;

uint64_t ChecksumBlock(const void* data, size_t bytes, uint64_t block_index) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lanes[4];
  LaneInit(block_index, lanes);
  size_t full = bytes / kStripeBytes;
  LaneStripes(lanes, p, full);
  if (size_t rest = bytes - full * kStripeBytes; rest != 0) {
    // Zero-padded final stripe; the length in BlockHash tells padding from zeros.
    unsigned char tail[kStripeBytes] = {};
    std::memcpy(tail, p + full * kStripeBytes, rest);
    LaneStripes(lanes, tail, 1);
  }
  return BlockHash(lanes, bytes);
}

uint64_t CombineBlockHashes(const uint64_t* block_hashes, size_t blocks, size_t total_bytes) {
  uint64_t sum = 0;
  for (size_t b = 0; b < blocks; ++b) sum += BlockTerm(block_hashes[b], b);
  return Finish(sum, total_bytes);
}

uint64_t Checksum(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t sum = 0;
  size_t b = 0;
  for (size_t off = 0; off < bytes; off += kChecksumBlockBytes, ++b) {
    size_t n = bytes - off < kChecksumBlockBytes ? bytes - off : kChecksumBlockBytes;
    sum += BlockTerm(ChecksumBlock(p + off, n, b), b);
  }
  return Finish(sum, bytes);
}

}  // namespace snapd
