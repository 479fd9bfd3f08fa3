#include "adjsnap/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace adjsnap {
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

// ChecksumBlock is the plain arithmetic of checksum_math.h, block by block; Checksum hashes four
// blocks at once where the CPU has AVX-512, two at once otherwise: the sizes past four blocks
// hold the value of the vector path to the scalar one.
TEST(Checksum, EqualsTheCombinationOfItsBlocks) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{31}, kChecksumBlockBytes,
                   3 * kChecksumBlockBytes + 17, 4 * kChecksumBlockBytes,
                   11 * kChecksumBlockBytes + 40}) {
    auto v = Bytes(n);
    std::vector<uint64_t> blocks;
    for (size_t off = 0, b = 0; off < n; off += kChecksumBlockBytes, ++b) {
      blocks.push_back(ChecksumBlock(v.data() + off, std::min(kChecksumBlockBytes, n - off), b));
    }
    EXPECT_EQ(Checksum(v.data(), n), CombineBlockHashes(blocks.data(), blocks.size(), n)) << n;
  }
}

// The copy that moves a push's bytes computes its checksum too: the same value as a second
// read would, byte-exact copies, at any length and misalignment of either buffer.
TEST(Checksum, TheFusedCopyCopiesExactlyAndComputesTheSameChecksum) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{4095},
                   kChecksumBlockBytes - 1, kChecksumBlockBytes, kChecksumBlockBytes + 24,
                   5 * kChecksumBlockBytes + 17}) {
    for (size_t src_skew : {size_t{0}, size_t{3}}) {
      for (size_t dst_skew : {size_t{0}, size_t{5}, size_t{8}}) {
        auto v = Bytes(n + src_skew);
        std::vector<unsigned char> out(n + dst_skew + 1, 0xAB);
        uint64_t sum = CopyWithChecksum(out.data() + dst_skew, v.data() + src_skew, n);
        EXPECT_EQ(sum, Checksum(v.data() + src_skew, n)) << n << " " << src_skew << dst_skew;
        EXPECT_TRUE(std::equal(v.begin() + src_skew, v.end(), out.begin() + dst_skew)) << n;
        EXPECT_EQ(out[n + dst_skew], 0xAB) << "wrote past the end, n = " << n;
      }
    }
  }
}

// Pieces copied on several threads (whole blocks each, numbered where they start) add up to
// the buffer's checksum, in any order.
TEST(Checksum, FusedCopyPiecesAddUpInAnyOrder) {
  const size_t n = 7 * kChecksumBlockBytes + 1000;
  auto v = Bytes(n);
  std::vector<unsigned char> out(n);
  const size_t cut = 3 * kChecksumBlockBytes;
  uint64_t tail = CopySummingBlocks(out.data() + cut, v.data() + cut, n - cut, 3);
  uint64_t head = CopySummingBlocks(out.data(), v.data(), cut, 0);
  StoreFence();
  EXPECT_EQ(FinishChecksum(head + tail, n), Checksum(v.data(), n));
  EXPECT_EQ(out, v);
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
}  // namespace adjsnap
