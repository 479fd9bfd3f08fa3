// The nvCOMP codecs' parameters, and Bitcomp frames made and read on the CPU through nvCOMP's
// host coder (the GPU's batched coder is tested by tests/gpu on a device).
#include "adjsnap/nvcomp_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace adjsnap::compress {
namespace {

constexpr uint32_t kChunk = 64 << 10;

// A smooth 2-D wave with a sparse front, as a wavefield snapshot is, of `n` values.
template <typename T>
std::vector<T> Wave(size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    size_t x = i % 512, y = i / 512;
    v[i] = x + y < 300 ? static_cast<T>(std::sin(0.05 * x) * std::cos(0.03 * y)) : T(0);
  }
  return v;
}

template <typename T>
FieldSpec Field(v1::Dtype dtype, size_t n) {
  return FieldSpec{dtype, {}, n * sizeof(T)};
}

// A frame of `raw` made on the CPU, in a buffer of the largest size it may take.
struct Framed {
  std::vector<uint64_t> frame;
  Result<uint64_t> bytes;
};
Framed Frame(const CodecSpec& c, const FieldSpec& f, const void* raw) {
  std::vector<uint64_t> frame(MaxFramedBytes(f.bytes, kChunk) / 8 + 1);
  auto n = CompressFrameOnHost(c, f, raw, kChunk, frame.data(), frame.size() * 8);
  return {std::move(frame), std::move(n)};
}

// Frames `in` on the CPU and reads it back; the frame's size goes to *framed.
template <typename T>
std::vector<T> RoundTrip(const CodecSpec& c, v1::Dtype dtype, const std::vector<T>& in,
                         uint64_t* framed = nullptr) {
  FieldSpec f{dtype, {}, in.size() * sizeof(T)};
  auto [frame, n] = Frame(c, f, in.data());
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (!n.ok()) return {};
  if (framed) *framed = *n;
  auto layout = ReadFrame(frame.data(), *n, static_cast<uint16_t>(c.codec), f.bytes);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<T> out(in.size());
  Status s = DecompressFrameOnHost(c, f, frame.data(), *n, out.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

#define SKIP_WITHOUT_NVCOMP() \
  if (!NvcompBuiltIn()) GTEST_SKIP() << "adjsnapd was built without nvCOMP (ADJSNAP_WITH_NVCOMP)"

TEST(NvcompCodec, ParametersAreCheckedNamingTheCodec) {
  auto f32 = Field<float>(v1::DTYPE_FLOAT32, 1024);
  auto i32 = Field<int32_t>(v1::DTYPE_INT32, 1024);
  struct Case {
    CodecSpec codec;
    FieldSpec field;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {{v1::CODEC_BITCOMP, 3}, f32, "bitcomp is lossless and takes no parameter"},
           {{v1::CODEC_ANS, 1}, f32, "ans is lossless and takes no parameter"},
           {{v1::CODEC_BITCOMP_LOSSY, 1e-3}, i32, "needs float32 or float64 data, not DTYPE_INT32"},
           {{v1::CODEC_BITCOMP_LOSSY, 0}, f32, "error bound must be finite and > 0"},
           {{v1::CODEC_BITCOMP_LOSSY, -1}, f32, "error bound"},
           {{v1::CODEC_BITCOMP_LOSSY, std::nan("")}, f32, "error bound"},
           {{v1::CODEC_BITCOMP_LOSSY, INFINITY}, f32, "error bound"},
           {{v1::CODEC_BITCOMP_LOSSY, 1e-39}, f32, "a normal DTYPE_FLOAT32"},
           {{v1::CODEC_BITCOMP_LOSSY, 1e308}, Field<double>(v1::DTYPE_FLOAT64, 8), "normal"},
           {{v1::CODEC_ZFP_REVERSIBLE, 0}, f32, "is not an nvCOMP codec"},
       }) {
    Status s = ValidateGpuCodec(c.codec, c.field);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << CodecName(c.codec);
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
  Status good =
      ValidateGpuCodec({v1::CODEC_BITCOMP_LOSSY, 1e-39}, Field<double>(v1::DTYPE_FLOAT64, 8));
  if (NvcompBuiltIn()) {
    EXPECT_TRUE(good.ok()) << good.ToString();
  } else {
    EXPECT_EQ(good.code(), Code::kFailedPrecondition);
    EXPECT_NE(good.message().find("bitcomp-lossy 1e-39 needs nvCOMP"), std::string::npos)
        << good.message();
  }
}

TEST(NvcompCodec, ZfpRefusesTheNvcompCodecs) {
  Status s = Validate({v1::CODEC_BITCOMP, 0}, Field<float>(v1::DTYPE_FLOAT32, 64));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("bitcomp compresses on the GPU (nvCOMP), not with zfp"),
            std::string::npos)
      << s.message();
}

TEST(NvcompCodec, BitcompFramesComeBackBitExactWithEverySpecialValue) {
  SKIP_WITHOUT_NVCOMP();
  std::vector<float> f = Wave<float>(300000);  // 1.2 MB: 19 chunks, the last one short
  f[5] = std::numeric_limits<float>::quiet_NaN();
  f[6] = -std::numeric_limits<float>::infinity();
  f[7] = -0.0f;
  f[8] = std::numeric_limits<float>::denorm_min();
  uint64_t framed = 0;
  std::vector<float> back = RoundTrip<float>({v1::CODEC_BITCOMP, 0}, v1::DTYPE_FLOAT32, f, &framed);
  ASSERT_EQ(back.size(), f.size());
  EXPECT_EQ(std::memcmp(back.data(), f.data(), f.size() * sizeof(float)), 0);
  EXPECT_LT(framed, f.size() * sizeof(float));  // the zeros past the front shrink
  std::vector<int64_t> ints(100001);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int64_t>(i * i) - 77;
  EXPECT_EQ(RoundTrip<int64_t>({v1::CODEC_BITCOMP, 0}, v1::DTYPE_INT64, ints), ints);
  std::vector<uint8_t> bytes(200003, 0);  // opaque bytes of an odd size
  for (size_t i = 0; i < bytes.size(); i += 97) bytes[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(RoundTrip<uint8_t>({v1::CODEC_BITCOMP, 0}, v1::DTYPE_UNSPECIFIED, bytes), bytes);
}

template <typename T>
void ExpectWithinBound(v1::Dtype dtype, double bound) {
  std::vector<T> f = Wave<T>(262144);
  uint64_t lossy_bytes = 0, lossless_bytes = 0;
  std::vector<T> back = RoundTrip<T>({v1::CODEC_BITCOMP_LOSSY, bound}, dtype, f, &lossy_bytes);
  RoundTrip<T>({v1::CODEC_BITCOMP, 0}, dtype, f, &lossless_bytes);
  ASSERT_EQ(back.size(), f.size());
  double worst = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(back[i]) - static_cast<double>(f[i])));
  }
  EXPECT_LE(worst, bound) << v1::Dtype_Name(dtype);
  EXPECT_GT(worst, 0) << "a lossy codec that changed nothing";
  EXPECT_LT(lossy_bytes, lossless_bytes) << v1::Dtype_Name(dtype);
}

TEST(NvcompCodec, BitcompLossyKeepsEveryErrorWithinTheBound) {
  SKIP_WITHOUT_NVCOMP();
  ExpectWithinBound<float>(v1::DTYPE_FLOAT32, 1e-4);
  ExpectWithinBound<double>(v1::DTYPE_FLOAT64, 3e-6);
}

TEST(NvcompCodec, ChunksThatDoNotShrinkAreStoredRaw) {
  SKIP_WITHOUT_NVCOMP();
  std::vector<uint32_t> noise(3 * kChunk / 4);
  std::mt19937 rng(11);
  for (auto& v : noise) v = rng();
  FieldSpec f{v1::DTYPE_INT32, {}, noise.size() * 4};
  auto [frame, n] = Frame({v1::CODEC_BITCOMP, 0}, f, noise.data());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  auto layout = ReadFrame(frame.data(), *n, v1::CODEC_BITCOMP, f.bytes);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (const auto& c : layout->chunks) EXPECT_TRUE(c.stored_raw);
  EXPECT_GT(*n, f.bytes);  // only the head is added: the step as a whole is better stored raw
  EXPECT_LE(*n, MaxFramedBytes(f.bytes, kChunk));
  std::vector<uint32_t> back(noise.size());
  ASSERT_TRUE(DecompressFrameOnHost({v1::CODEC_BITCOMP, 0}, f, frame.data(), *n, back.data()).ok());
  EXPECT_EQ(back, noise);
}

TEST(NvcompCodec, AChunkWhoseBitcompHeaderDisagreesWithTheFrameIsDataLoss) {
  SKIP_WITHOUT_NVCOMP();
  std::vector<float> f = Wave<float>(2 * kChunk / 4);
  FieldSpec field{v1::DTYPE_FLOAT32, {}, f.size() * 4};
  auto [frame, n] = Frame({v1::CODEC_BITCOMP, 0}, field, f.data());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  auto layout = ReadFrame(frame.data(), *n, v1::CODEC_BITCOMP, field.bytes);
  ASSERT_TRUE(layout.ok());
  ASSERT_FALSE(layout->chunks[1].stored_raw);
  // The frame says lossless Bitcomp; the same chunk read as lossy is refused, not decoded.
  std::vector<float> back(f.size());
  Status wrong_mode =
      DecompressFrameOnHost({v1::CODEC_BITCOMP_LOSSY, 1e-3}, field, frame.data(), *n, back.data());
  EXPECT_EQ(wrong_mode.code(), Code::kDataLoss) << wrong_mode.ToString();
  // A chunk's first bytes (Bitcomp's header) overwritten.
  char* chunk = reinterpret_cast<char*>(frame.data()) + layout->chunks[1].offset;
  std::memset(chunk, 0xff, 16);
  Status s = DecompressFrameOnHost({v1::CODEC_BITCOMP, 0}, field, frame.data(), *n, back.data());
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("chunk 1 of 2"), std::string::npos) << s.message();
}

TEST(NvcompCodec, AnsIsRefusedOnTheCpuNamingWhereItRuns) {
  SKIP_WITHOUT_NVCOMP();
  std::vector<float> f = Wave<float>(1024);
  FieldSpec field{v1::DTYPE_FLOAT32, {}, f.size() * 4};
  auto n = Frame({v1::CODEC_ANS, 0}, field, f.data()).bytes;
  EXPECT_EQ(n.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("on a GPU only"), std::string::npos) << n.status().message();
}

}  // namespace
}  // namespace adjsnap::compress
