// The arithmetic of adjsnapd's block checksum (checksum.h), shared by the CPU implementation and
// the CUDA kernel (kernels/checksum.cu) so the two cannot drift apart: both call these
// functions. Little-endian loads; host and device are little-endian on every supported target.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define ADJSNAP_HD __host__ __device__
#else
#define ADJSNAP_HD
#endif

namespace adjsnap::checksum_math {

inline constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
inline constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
inline constexpr size_t kStripeBytes = 32;  // one 8-byte word for each of the four lanes
inline constexpr uint64_t kBlockBytes = 64 * 1024;  // hashed independently of each other

ADJSNAP_HD inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

ADJSNAP_HD inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  return Rotl(acc, 31) * kP1;
}

ADJSNAP_HD inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

ADJSNAP_HD inline uint64_t LoadLE64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The four lanes of block `block_index` before its first stripe.
ADJSNAP_HD inline void LaneInit(uint64_t block_index, uint64_t lanes[4]) {
  lanes[0] = block_index + kP1 + kP2;
  lanes[1] = block_index + kP2;
  lanes[2] = block_index;
  lanes[3] = block_index - kP1;
}

// Feeds `stripes` full 32-byte stripes at `p` into the lanes.
ADJSNAP_HD inline void LaneStripes(uint64_t lanes[4], const unsigned char* p, size_t stripes) {
  for (size_t s = 0; s < stripes; ++s, p += kStripeBytes) {
    lanes[0] = Round(lanes[0], LoadLE64(p));
    lanes[1] = Round(lanes[1], LoadLE64(p + 8));
    lanes[2] = Round(lanes[2], LoadLE64(p + 16));
    lanes[3] = Round(lanes[3], LoadLE64(p + 24));
  }
}

// The hash of a block of `bytes` bytes from its lanes (after every stripe, the last one
// zero-padded).
ADJSNAP_HD inline uint64_t BlockHash(const uint64_t lanes[4], uint64_t bytes) {
  uint64_t h = Rotl(lanes[0], 1) + Rotl(lanes[1], 7) + Rotl(lanes[2], 12) + Rotl(lanes[3], 18);
  return Avalanche(h + bytes);
}

// Block b's term in the final wrapping sum (order-free, so blocks may be summed in parallel).
ADJSNAP_HD inline uint64_t BlockTerm(uint64_t block_hash, uint64_t block_index) {
  return Avalanche(block_hash ^ (block_index * kP3));
}

ADJSNAP_HD inline uint64_t Finish(uint64_t sum_of_terms, uint64_t total_bytes) {
  return Avalanche(sum_of_terms + total_bytes);
}

}  // namespace adjsnap::checksum_math
