#include "adjsnap/zfp_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace adjsnap::compress {
namespace {

template <typename T>
FieldSpec Field(v1::Dtype dtype, std::vector<uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return FieldSpec{dtype, shape, n * sizeof(T)};
}

template <typename T>
std::vector<T> RoundTrip(const CodecSpec& c, const FieldSpec& f, const std::vector<T>& in,
                         uint64_t* stored = nullptr) {
  auto max = MaxCompressedBytes(c, f);
  EXPECT_TRUE(max.ok()) << max.status().ToString();
  std::vector<uint64_t> buf(*max / 8 + 1);
  auto n = Compress(c, f, in.data(), buf.data(), buf.size() * 8);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (stored) *stored = *n;
  std::vector<T> out(in.size());
  Status s = Decompress(c, f, buf.data(), *n, out.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// A smooth 2-D wave, as a wavefield snapshot is.
std::vector<float> Wave(size_t ny, size_t nx) {
  std::vector<float> v(ny * nx);
  for (size_t y = 0; y < ny; ++y) {
    for (size_t x = 0; x < nx; ++x) {
      v[y * nx + x] = std::sin(0.05f * x) * std::cos(0.03f * y) * std::exp(-1e-4f * x * y);
    }
  }
  return v;
}

TEST(ZfpCodec, ReversibleIsBitExactForSpecialValues) {
  auto f = Field<float>(v1::DTYPE_FLOAT32, {37, 53});  // not multiples of the 4x4 block
  std::vector<float> in = Wave(37, 53);
  in[0] = std::numeric_limits<float>::quiet_NaN();
  in[1] = std::numeric_limits<float>::infinity();
  in[2] = -std::numeric_limits<float>::infinity();
  in[3] = std::numeric_limits<float>::denorm_min();
  in[4] = -0.0f;
  in[5] = std::numeric_limits<float>::max();
  std::vector<float> out = RoundTrip(CodecSpec{v1::CODEC_ZFP_REVERSIBLE, 0}, f, in);
  ASSERT_EQ(out.size(), in.size());
  EXPECT_EQ(0, std::memcmp(out.data(), in.data(), in.size() * sizeof(float)));
}

TEST(ZfpCodec, ReversibleIsBitExactForDoublesAndIntegersInManySlabs) {
  // 3-D doubles larger than one slab: several independent streams.
  auto f = Field<double>(v1::DTYPE_FLOAT64, {40, 64, 512});  // 10 MiB
  std::vector<double> in(40 * 64 * 512);
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(1e-3 * i) * 1e300 * ((i % 7) - 3);
  auto out = RoundTrip(CodecSpec{v1::CODEC_ZFP_REVERSIBLE, 0}, f, in);
  EXPECT_EQ(0, std::memcmp(out.data(), in.data(), in.size() * sizeof(double)));
  auto fi = Field<int32_t>(v1::DTYPE_INT32, {});
  fi.bytes = 4000 * sizeof(int32_t);
  std::vector<int32_t> ints(4000);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int32_t>(i * 2654435761u);
  auto iout = RoundTrip(CodecSpec{v1::CODEC_ZFP_REVERSIBLE, 0}, fi, ints);
  EXPECT_EQ(iout, ints);
}

TEST(ZfpCodec, AccuracyModeStaysWithinTheTolerancePointwise) {
  auto f = Field<float>(v1::DTYPE_FLOAT32, {256, 300});
  std::vector<float> in = Wave(256, 300);
  const double tol = 1e-3;
  uint64_t stored = 0;
  auto out = RoundTrip(CodecSpec{v1::CODEC_ZFP_ACCURACY, tol}, f, in, &stored);
  double worst = 0;
  for (size_t i = 0; i < in.size(); ++i) worst = std::max(worst, std::fabs(double(out[i]) - in[i]));
  EXPECT_LE(worst, tol);
  EXPECT_LT(stored, f.bytes / 3);  // a smooth field compresses well at this tolerance
}

TEST(ZfpCodec, RateModeStoresTheFixedRateSize) {
  // 256 x 512 floats, one slab of whole 4x4 blocks: R bits per value, exactly.
  auto f = Field<float>(v1::DTYPE_FLOAT32, {256, 512});
  std::vector<float> in = Wave(256, 512);
  for (double rate : {4.0, 8.0, 16.0}) {
    uint64_t stored = 0;
    RoundTrip(CodecSpec{v1::CODEC_ZFP_RATE, rate}, f, in, &stored);
    uint64_t slabs = (256 * 512 * 4 + kSlabBytes - 1) / kSlabBytes;
    uint64_t payload = static_cast<uint64_t>(256 * 512 * rate / 8);
    EXPECT_EQ(stored, 8 + 8 * slabs + payload) << "rate " << rate;
  }
}

TEST(ZfpCodec, WorkersShareTheSlabsOfOneSnapshotAndGiveTheSameBytes) {
  auto f = Field<float>(v1::DTYPE_FLOAT32, {2048, 3000});  // ~24 MiB: three slabs
  std::vector<float> in = Wave(2048, 3000);
  CodecSpec c{v1::CODEC_ZFP_ACCURACY, 1e-5};
  uint64_t max = *MaxCompressedBytes(c, f);
  std::vector<uint64_t> alone(max / 8 + 1), shared(max / 8 + 1);
  auto n1 = Compress(c, f, in.data(), alone.data(), max);
  CompressPool pool(3);
  auto n2 = Compress(c, f, in.data(), shared.data(), max, &pool);
  ASSERT_TRUE(n1.ok() && n2.ok());
  ASSERT_EQ(*n1, *n2);
  EXPECT_EQ(0, std::memcmp(alone.data(), shared.data(), *n1));
  std::vector<float> a(in.size()), b(in.size());
  ASSERT_TRUE(Decompress(c, f, alone.data(), *n1, a.data()).ok());
  ASSERT_TRUE(Decompress(c, f, shared.data(), *n2, b.data(), &pool).ok());
  EXPECT_EQ(a, b);
}

TEST(ZfpCodec, RejectsWhatZfpCannotCodeAndDamagedStreams) {
  auto bytes = Field<uint8_t>(v1::DTYPE_UINT8, {64});
  EXPECT_EQ(Validate({v1::CODEC_ZFP_REVERSIBLE, 0}, bytes).code(), Code::kInvalidArgument);
  auto ints = Field<int32_t>(v1::DTYPE_INT32, {64});
  Status lossy = Validate({v1::CODEC_ZFP_ACCURACY, 1e-3}, ints);
  EXPECT_NE(lossy.message().find("use zfp-reversible"), std::string::npos) << lossy.ToString();
  auto floats = Field<float>(v1::DTYPE_FLOAT32, {64});
  EXPECT_EQ(Validate({v1::CODEC_ZFP_RATE, 0}, floats).code(), Code::kInvalidArgument);
  EXPECT_EQ(Validate({v1::CODEC_ZFP_PRECISION, 2.5}, floats).code(), Code::kInvalidArgument);
  std::vector<float> in(64, 1.0f), out(64);
  std::vector<uint64_t> buf(64);
  auto n = Compress({v1::CODEC_ZFP_REVERSIBLE, 0}, floats, in.data(), buf.data(), 512);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(Decompress({v1::CODEC_ZFP_REVERSIBLE, 0}, floats, buf.data(), 4, out.data()).code(),
            Code::kDataLoss);
  buf[0] ^= 1;  // the magic
  EXPECT_EQ(Decompress({v1::CODEC_ZFP_REVERSIBLE, 0}, floats, buf.data(), *n, out.data()).code(),
            Code::kDataLoss);
}

}  // namespace
}  // namespace adjsnap::compress
