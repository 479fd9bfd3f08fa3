#include "adjsnap/checksum.h"

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "adjsnap/checksum_math.h"

namespace adjsnap {

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

constexpr size_t kBlock = kChecksumBlockBytes;

// How a fused copy stores: not at all (a checksum alone), or past the cache, with two 16-byte
// streaming stores per stripe where the destination is 16-byte aligned (tier blocks are), else
// four 8-byte ones (movnti, no alignment needed; a third slower).
enum class Store { kNone, kStream16, kStream8 };

template <Store kStore>
inline void StreamStripe(unsigned char* dst, const uint64_t w[4]) {
  if constexpr (kStore == Store::kNone) return;
#if defined(__x86_64__)
  if constexpr (kStore == Store::kStream16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
  } else {
    auto* d = reinterpret_cast<long long*>(dst);
    _mm_stream_si64(d, static_cast<long long>(w[0]));
    _mm_stream_si64(d + 1, static_cast<long long>(w[1]));
    _mm_stream_si64(d + 2, static_cast<long long>(w[2]));
    _mm_stream_si64(d + 3, static_cast<long long>(w[3]));
  }
#else
  std::memcpy(dst, w, kStripeBytes);
#endif
}

// `dst + off`, where the copy has a destination: a checksum alone has none (null), and no
// offset may be added to a null pointer.
template <Store kStore>
inline unsigned char* Dst(unsigned char* dst, size_t off) {
  if constexpr (kStore == Store::kNone) {
    return nullptr;
  } else {
    return dst + off;
  }
}

inline void Rounds(uint64_t lanes[4], const uint64_t w[4]) {
  lanes[0] = checksum_math::Round(lanes[0], w[0]);
  lanes[1] = checksum_math::Round(lanes[1], w[1]);
  lanes[2] = checksum_math::Round(lanes[2], w[2]);
  lanes[3] = checksum_math::Round(lanes[3], w[3]);
}

// The hashes of two whole blocks, b and b + 1, at `src` (copied to `dst` unless kStore is kNone).
// Their eight lanes are independent chains: a round's multiplies wait for the previous
// round's, so one block alone is bound by that latency (~3.5 bytes a cycle), and two in
// flight hash twice as fast. The host's loads are plain little-endian words.
template <Store kStore>
void TwoBlocks(unsigned char* dst, const unsigned char* src, uint64_t b, uint64_t* h0,
               uint64_t* h1) {
  uint64_t x[4], y[4];
  LaneInit(b, x);
  LaneInit(b + 1, y);
  for (size_t off = 0; off < kBlock; off += kStripeBytes) {
    uint64_t w[4], v[4];
    std::memcpy(w, src + off, kStripeBytes);
    std::memcpy(v, src + kBlock + off, kStripeBytes);
    Rounds(x, w);
    Rounds(y, v);
    StreamStripe<kStore>(Dst<kStore>(dst, off), w);
    StreamStripe<kStore>(Dst<kStore>(dst, kBlock + off), v);
  }
  *h0 = BlockHash(x, kBlock);
  *h1 = BlockHash(y, kBlock);
}

// The hash of one block of up to kBlock bytes (the last of a buffer may be short).
template <Store kStore>
uint64_t OneBlock(unsigned char* dst, const unsigned char* src, size_t bytes, uint64_t b) {
  uint64_t lanes[4];
  LaneInit(b, lanes);
  const size_t full = bytes / kStripeBytes * kStripeBytes;
  for (size_t off = 0; off < full; off += kStripeBytes) {
    uint64_t w[4];
    std::memcpy(w, src + off, kStripeBytes);
    Rounds(lanes, w);
    StreamStripe<kStore>(Dst<kStore>(dst, off), w);
  }
  if (size_t rest = bytes - full; rest != 0) {
    uint64_t w[4] = {};  // zero-padded, as ChecksumBlock
    std::memcpy(w, src + full, rest);
    Rounds(lanes, w);
    if constexpr (kStore != Store::kNone) std::memcpy(dst + full, src + full, rest);
  }
  return BlockHash(lanes, bytes);
}

// The wrapping sum of the terms of the blocks at `src` (numbered from `b`), two at a time.
template <Store kStore>
uint64_t SumBlocks(unsigned char* dst, const unsigned char* src, size_t bytes, uint64_t b) {
  uint64_t sum = 0;
  size_t off = 0;
  for (; bytes - off >= 2 * kBlock; off += 2 * kBlock, b += 2) {
    uint64_t h0, h1;
    TwoBlocks<kStore>(Dst<kStore>(dst, off), src + off, b, &h0, &h1);
    sum += BlockTerm(h0, b) + BlockTerm(h1, b + 1);
  }
  for (; off < bytes; off += kBlock, ++b) {
    size_t n = bytes - off < kBlock ? bytes - off : kBlock;
    sum += BlockTerm(OneBlock<kStore>(Dst<kStore>(dst, off), src + off, n, b), b);
  }
  return sum;
}

}  // namespace

uint64_t CopySummingBlocks(void* dst, const void* src, size_t bytes, uint64_t first_block) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* p = static_cast<const unsigned char*>(src);
  return (reinterpret_cast<uintptr_t>(d) & 15) == 0
             ? SumBlocks<Store::kStream16>(d, p, bytes, first_block)
             : SumBlocks<Store::kStream8>(d, p, bytes, first_block);
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
  return Finish(SumBlocks<Store::kNone>(nullptr, static_cast<const unsigned char*>(data), bytes, 0),
                bytes);
}

}  // namespace adjsnap
