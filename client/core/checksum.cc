#include "checksum.h"

#include <cstring>
#include <vector>

namespace snapd {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  return Rotl(acc, 31) * kP1;
}

inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

inline uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only (x86-64, aarch64)
  return v;
}

}  // namespace

uint64_t ChecksumBlock(const void* data, size_t bytes, uint64_t block_index) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t v1 = block_index + kP1 + kP2;
  uint64_t v2 = block_index + kP2;
  uint64_t v3 = block_index;
  uint64_t v4 = block_index - kP1;
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    v1 = Round(v1, Load64(p + i));
    v2 = Round(v2, Load64(p + i + 8));
    v3 = Round(v3, Load64(p + i + 16));
    v4 = Round(v4, Load64(p + i + 24));
  }
  if (i < bytes) {  // zero-padded final stripe; the length below tells padding from zeros
    unsigned char tail[32] = {};
    std::memcpy(tail, p + i, bytes - i);
    v1 = Round(v1, Load64(tail));
    v2 = Round(v2, Load64(tail + 8));
    v3 = Round(v3, Load64(tail + 16));
    v4 = Round(v4, Load64(tail + 24));
  }
  uint64_t h = Rotl(v1, 1) + Rotl(v2, 7) + Rotl(v3, 12) + Rotl(v4, 18);
  return Avalanche(h + bytes);
}

uint64_t CombineBlockHashes(const uint64_t* block_hashes, size_t blocks, size_t total_bytes) {
  uint64_t sum = 0;
  for (size_t b = 0; b < blocks; ++b) sum += Avalanche(block_hashes[b] ^ (b * kP3));
  return Avalanche(sum + total_bytes);
}

uint64_t Checksum(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t sum = 0;
  size_t b = 0;
  for (size_t off = 0; off < bytes; off += kChecksumBlockBytes, ++b) {
    size_t n = bytes - off < kChecksumBlockBytes ? bytes - off : kChecksumBlockBytes;
    sum += Avalanche(ChecksumBlock(p + off, n, b) ^ (b * kP3));
  }
  return Avalanche(sum + bytes);
}

}  // namespace snapd
