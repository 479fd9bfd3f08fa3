#include "snapd/checksum.h"

#include <atomic>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

namespace {

static_assert(std::endian::native == std::endian::little,
              "the checksum's words are little-endian loads (checksum_math.h)");

// One 32-byte stripe's words, stored to `dst` past the cache (movnti: no alignment needed).
inline void StreamStripe(unsigned char* dst, const uint64_t w[4]) {
#if defined(__x86_64__)
  auto* d = reinterpret_cast<long long*>(dst);
  _mm_stream_si64(d, static_cast<long long>(w[0]));
  _mm_stream_si64(d + 1, static_cast<long long>(w[1]));
  _mm_stream_si64(d + 2, static_cast<long long>(w[2]));
  _mm_stream_si64(d + 3, static_cast<long long>(w[3]));
#else
  std::memcpy(dst, w, kStripeBytes);
#endif
}

// Copies one block (at most kChecksumBlockBytes) and returns its hash: each 32-byte stripe is
// loaded once, fed to the four lanes and stored, so the bytes are read from memory once.
uint64_t CopyBlock(unsigned char* dst, const unsigned char* src, size_t bytes,
                   uint64_t block_index) {
  uint64_t lanes[4];
  LaneInit(block_index, lanes);
  const size_t full = bytes / kStripeBytes;
  for (size_t s = 0; s < full; ++s, src += kStripeBytes, dst += kStripeBytes) {
    uint64_t w[4];
    std::memcpy(w, src, kStripeBytes);
    lanes[0] = checksum_math::Round(lanes[0], w[0]);
    lanes[1] = checksum_math::Round(lanes[1], w[1]);
    lanes[2] = checksum_math::Round(lanes[2], w[2]);
    lanes[3] = checksum_math::Round(lanes[3], w[3]);
    StreamStripe(dst, w);
  }
  if (size_t rest = bytes - full * kStripeBytes; rest != 0) {
    unsigned char tail[kStripeBytes] = {};  // zero-padded, as ChecksumBlock
    std::memcpy(tail, src, rest);
    std::memcpy(dst, src, rest);
    LaneStripes(lanes, tail, 1);
  }
  return BlockHash(lanes, bytes);
}

}  // namespace

uint64_t CopySummingBlocks(void* dst, const void* src, size_t bytes, uint64_t first_block) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* p = static_cast<const unsigned char*>(src);
  uint64_t sum = 0;
  uint64_t b = first_block;
  for (size_t off = 0; off < bytes; off += kChecksumBlockBytes, ++b) {
    size_t n = bytes - off < kChecksumBlockBytes ? bytes - off : kChecksumBlockBytes;
    sum += BlockTerm(CopyBlock(d + off, p + off, n, b), b);
  }
  return sum;
}

uint64_t FinishChecksum(uint64_t sum_of_block_terms, size_t total_bytes) {
  return Finish(sum_of_block_terms, total_bytes);
}

void StoreFence() {
#if defined(__x86_64__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

uint64_t CopyWithChecksum(void* dst, const void* src, size_t bytes) {
  uint64_t sum = CopySummingBlocks(dst, src, bytes, 0);
  StoreFence();
  return FinishChecksum(sum, bytes);
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
