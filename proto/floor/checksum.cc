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

#if defined(__x86_64__)
// Four blocks at once in AVX-512 registers, where the CPU has them: the lanes of blocks b and
// b + 1 in one register, of b + 2 and b + 3 in another, each round one 64-bit multiply per
// register where the scalar code makes eight. The same arithmetic as the scalar rounds, lane
// for lane (checksum_math.h), so the same values; the tests compare the two. Streaming stores
// need a 16-byte aligned destination (kStream16): an unaligned one takes the scalar path.
#define ADJSNAP_AVX512 __attribute__((target("avx512f,avx512dq")))

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return has;
}

ADJSNAP_AVX512 inline __m512i Round8(__m512i acc, __m512i w, __m512i p1, __m512i p2) {
  acc = _mm512_add_epi64(acc, _mm512_mullo_epi64(w, p2));
  // The masked forms with every lane set: gcc 12's unmasked ones read an undefined register
  // (-Wuninitialized).
  return _mm512_mullo_epi64(_mm512_mask_rol_epi64(acc, 0xFF, acc, 31), p1);
}

ADJSNAP_AVX512 inline __m256i Load32(const unsigned char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

ADJSNAP_AVX512 inline __m512i Pair(__m256i lo, __m256i hi) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i low = _mm512_mask_inserti64x4(zero, 0xFF, zero, lo, 0);
  return _mm512_mask_inserti64x4(low, 0xFF, low, hi, 1);
}

// Two 16-byte streaming stores (the destination is 16-byte aligned, not always 32).
ADJSNAP_AVX512 inline void Stream32(unsigned char* dst, __m256i v) {
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(v));
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), _mm256_extracti128_si256(v, 1));
}

template <Store kStore>
ADJSNAP_AVX512 void FourBlocks(unsigned char* dst, const unsigned char* src, uint64_t b,
                               uint64_t h[4]) {
  alignas(64) uint64_t lanes[16];
  for (uint64_t k = 0; k < 4; ++k) LaneInit(b + k, lanes + 4 * k);
  __m512i x = _mm512_load_si512(lanes);
  __m512i y = _mm512_load_si512(lanes + 8);
  const __m512i p1 = _mm512_set1_epi64(static_cast<long long>(checksum_math::kP1));
  const __m512i p2 = _mm512_set1_epi64(static_cast<long long>(checksum_math::kP2));
  for (size_t off = 0; off < kBlock; off += kStripeBytes) {
    const __m256i w0 = Load32(src + off), w1 = Load32(src + kBlock + off);
    const __m256i w2 = Load32(src + 2 * kBlock + off), w3 = Load32(src + 3 * kBlock + off);
    x = Round8(x, Pair(w0, w1), p1, p2);
    y = Round8(y, Pair(w2, w3), p1, p2);
    if constexpr (kStore == Store::kStream16) {
      Stream32(dst + off, w0);
      Stream32(dst + kBlock + off, w1);
      Stream32(dst + 2 * kBlock + off, w2);
      Stream32(dst + 3 * kBlock + off, w3);
    }
  }
  _mm512_store_si512(lanes, x);
  _mm512_store_si512(lanes + 8, y);
  for (size_t k = 0; k < 4; ++k) h[k] = BlockHash(lanes + 4 * k, kBlock);
}
#endif

// The wrapping sum of the terms of the blocks at `src` (numbered from `b`): four at a time
// where AVX-512 hashes them, then two at a time.
template <Store kStore>
uint64_t SumBlocks(unsigned char* dst, const unsigned char* src, size_t bytes, uint64_t b) {
  uint64_t sum = 0;
  size_t off = 0;
#if defined(__x86_64__)
  if (kStore != Store::kStream8 && HasAvx512()) {
    for (; bytes - off >= 4 * kBlock; off += 4 * kBlock, b += 4) {
      uint64_t h[4];
      FourBlocks<kStore>(Dst<kStore>(dst, off), src + off, b, h);
      sum += BlockTerm(h[0], b) + BlockTerm(h[1], b + 1) + BlockTerm(h[2], b + 2) +
             BlockTerm(h[3], b + 3);
    }
  }
#endif
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
