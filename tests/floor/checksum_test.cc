#include "snapd/checksum.h"

#include <gtest/gtest.h>

#include <vector>

namespace snapd {
namespace {

std::vector<unsigned char> Bytes(size_t n) {
  std::vector<unsigned char> v(n);
  uint32_t x = 12345;  // xorshift: no short period, so no two blocks are equal
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<unsigned char>(x);
  }
  return v;
}

// Checksums recorded in catalogs must stay valid: version 1's values for a fixed pattern
// (computed before the arithmetic moved to checksum_math.h, which the CUDA kernel shares).
TEST(Checksum, Version1ValuesAreStable) {
  auto pattern = [](size_t n) {
    std::vector<unsigned char> d(n);
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<unsigned char>(i * 7 + 3);
    return d;
  };
  EXPECT_EQ(Checksum(nullptr, 0), 0u);
  EXPECT_EQ(Checksum(pattern(100).data(), 100), 0x188758664946a80cULL);
  EXPECT_EQ(Checksum(pattern(100000).data(), 100000), 0x79a4c3a1a5d0b3b2ULL);
}

TEST(Checksum, EqualsTheCombinationOfItsBlocks) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{31}, kChecksumBlockBytes,
                   3 * kChecksumBlockBytes + 17}) {
    auto v = Bytes(n);
    std::vector<uint64_t> blocks;
    for (size_t off = 0, b = 0; off < n; off += kChecksumBlockBytes, ++b) {
      blocks.push_back(ChecksumBlock(v.data() + off, std::min(kChecksumBlockBytes, n - off), b));
    }
    EXPECT_EQ(Checksum(v.data(), n), CombineBlockHashes(blocks.data(), blocks.size(), n)) << n;
  }
}

TEST(Checksum, DetectsEverySingleBitFlipInAStripe) {
  auto v = Bytes(4096);
  uint64_t base = Checksum(v.data(), v.size());
  for (size_t bit = 0; bit < 32 * 8; ++bit) {
    v[1000 + bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    EXPECT_NE(Checksum(v.data(), v.size()), base) << "bit " << bit;
    v[1000 + bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  }
}

TEST(Checksum, DependsOnBlockOrderAndLength) {
  auto v = Bytes(2 * kChecksumBlockBytes);
  std::vector<unsigned char> swapped(v.begin() + kChecksumBlockBytes, v.end());
  swapped.insert(swapped.end(), v.begin(), v.begin() + kChecksumBlockBytes);
  EXPECT_NE(Checksum(v.data(), v.size()), Checksum(swapped.data(), swapped.size()));
  std::vector<unsigned char> zeros(64, 0);
  EXPECT_NE(Checksum(zeros.data(), 63), Checksum(zeros.data(), 64));  // padding vs real zeros
}

}  // namespace
}  // namespace snapd
