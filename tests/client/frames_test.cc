// Chunk frames end to end, on the CPU: a solver's steps compressed with nvCOMP's Bitcomp host
// coder (the bitstream the GPU coder makes), pushed through libadjsnap to a real adjsnapd, spilled
// to its disk tier, fetched back in reverse order and decoded, bit-exact or within the bound;
// `adjsnap ls` says what each step is, `adjsnap dump` decodes the frames it writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "adjsnap/chunk_frame.h"
#include "adjsnap/client.h"
#include "adjsnap/nvcomp_codec.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

constexpr uint64_t kNy = 256, kNx = 512;  // 512 KiB of float32 per step
constexpr uint64_t kRaw = kNy * kNx * sizeof(float);
constexpr uint32_t kChunk = 64 << 10;
constexpr uint64_t kSteps = 40;  // 20 MiB raw: more than the 8 MiB host tier holds

// An acoustic wavefield's front: a ring that widens with the step, zero outside it (about a
// quarter of the field is nonzero), as the measurements had.
std::vector<float> Wave(uint64_t step) {
  std::vector<float> v(kNy * kNx, 0.0f);
  double r0 = 20.0 + 3.0 * static_cast<double>(step);
  for (uint64_t y = 0; y < kNy; ++y) {
    for (uint64_t x = 0; x < kNx; ++x) {
      double r = std::hypot(double(y) - kNy / 2.0, double(x) - kNx / 2.0);
      if (std::fabs(r - r0) < 30) v[y * kNx + x] = static_cast<float>(std::sin(0.7 * (r - r0)));
    }
  }
  return v;
}

class FramesTest : public AdjsnapTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    if (!compress::NvcompBuiltIn()) {
      GTEST_SKIP() << "needs nvCOMP's host coder to make frames (docs/install.md, \"nvCOMP\")";
    }
    ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("8M")));
    client_ = Connect(/*map_host_tier=*/GetParam());
    ASSERT_NE(client_, nullptr);
  }
  RunInfo Open(const std::string& name, Codec codec, double bound) {
    RunSpec spec = Spec(name, kSteps, kRaw);
    spec.dtype = Dtype::kFloat32;
    spec.shape = {kNy, kNx};
    spec.layers = "DiskHost";
    spec.keep = true;
    spec.codec = codec;
    spec.codec_param = bound;
    return OpenRun(*client_, spec);
  }
  compress::CodecSpec CodecOf(Codec codec, double bound) const {
    return {static_cast<v1::Codec>(codec), bound};
  }
  compress::FieldSpec Field() const { return {v1::DTYPE_FLOAT32, {kNy, kNx}, kRaw}; }
  int AdjsnapCli(std::vector<std::string> args, std::string* out, std::string* err = nullptr) {
    args.insert(args.begin(), {ADJSNAP_BINARY, "--socket", daemon().socket()});
    return RunProgram(args, out, err);
  }
  // Pushes every step as its frame (raw where the frame would not be smaller); the frames'
  // total size.
  uint64_t PushAll(uint64_t run_id, Codec codec, double bound) {
    uint64_t framed = 0;
    std::vector<char> frame(compress::MaxFramedBytes(kRaw, kChunk) + 8);
    for (uint64_t t = 0; t < kSteps; ++t) {
      std::vector<float> v = Wave(t);
      auto n = compress::CompressFrameOnHost(CodecOf(codec, bound), Field(), v.data(), kChunk,
                                             frame.data(), frame.size());
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (!n.ok()) return 0;
      const void* data = *n < kRaw ? static_cast<const void*>(frame.data()) : v.data();
      uint64_t bytes = std::min<uint64_t>(*n, kRaw);
      auto h = client_->Push(run_id, t, data, bytes);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      if (!h.ok()) return 0;
      Status stored = h->WaitStored();
      EXPECT_TRUE(stored.ok()) << stored.ToString();
      framed += bytes;
    }
    return framed;
  }
  // Fetches every step in reverse order and decodes it; the largest error against the field
  // pushed (0 for a bit-exact run).
  double FetchAllBackward(uint64_t run_id, Codec codec, double bound, uint64_t* frames) {
    double worst = 0;
    std::vector<char> buf(kRaw);
    std::vector<float> got(kNy * kNx);
    for (uint64_t t = kSteps; t-- > 0;) {
      auto h = client_->FetchAsync(run_id, t, buf.data(), kRaw);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      if (!h.ok()) return INFINITY;
      Status s = h->Wait();
      EXPECT_TRUE(s.ok()) << "step " << t << ": " << s.ToString();
      if (!s.ok()) return INFINITY;
      if (uint64_t n = h->frame_bytes(); n != 0) {
        ++*frames;
        Status decoded = compress::DecompressFrameOnHost(CodecOf(codec, bound), Field(), buf.data(),
                                                         n, got.data());
        EXPECT_TRUE(decoded.ok()) << decoded.ToString();
      } else {
        std::memcpy(got.data(), buf.data(), kRaw);
      }
      std::vector<float> want = Wave(t);
      for (size_t i = 0; i < want.size(); ++i) {
        if (codec == Codec::kBitcomp && std::memcmp(&got[i], &want[i], 4) != 0) return INFINITY;
        worst = std::max(worst, std::fabs(double(got[i]) - double(want[i])));
      }
    }
    return worst;
  }

  Client* client_ = nullptr;
};

TEST_P(FramesTest, LosslessFramesComeBackBitExactThroughTheDiskTierAndDumpDecodesThem) {
  RunInfo run = Open("lossless", Codec::kBitcomp, 0);
  ASSERT_NE(run.run_id, 0u);
  uint64_t framed = PushAll(run.run_id, Codec::kBitcomp, 0);
  ASSERT_GT(framed, 0u);
  EXPECT_LT(framed, kSteps * kRaw / 2) << "the sparse wavefield should more than halve";
  // The host tier holds a fraction of the run: the oldest frames went to disk as they were.
  auto list = client_->ListSnapshots("lossless");
  ASSERT_TRUE(list.ok());
  uint64_t on_disk = 0, stored = 0;
  for (const auto& l : *list) {
    on_disk += l.on_disk;
    stored += l.stored_bytes;
    EXPECT_EQ(l.codec, Codec::kBitcomp) << "step " << l.step;
  }
  EXPECT_GT(on_disk, 0u);
  EXPECT_EQ(stored, framed);  // accounted as stored, not raw

  std::string out;
  ASSERT_EQ(AdjsnapCli({"ls", "lossless"}, &out), 0) << out;
  EXPECT_NE(out.find("codec bitcomp before the push"), std::string::npos) << out;
  EXPECT_NE(out.find("bitcomp"), out.rfind("bitcomp")) << "each step names its codec: " << out;

  // dump: every step decoded to its raw bytes, checked against the frame's checksum first.
  std::string to = dir() + "/dump";
  ASSERT_EQ(AdjsnapCli({"dump", "lossless", "--to", to, "--format", "raw", "--steps", "0:3"}, &out), 0)
      << out;
  for (uint64_t t = 0; t < 3; ++t) {
    char name[64];
    std::snprintf(name, sizeof name, "/step-%08llu.raw", static_cast<unsigned long long>(t));
    std::ifstream f(to + name, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
    std::vector<float> want = Wave(t);
    ASSERT_EQ(bytes.size(), kRaw) << name;
    EXPECT_EQ(std::memcmp(bytes.data(), want.data(), kRaw), 0) << name;
  }

  uint64_t frames = 0;
  EXPECT_EQ(FetchAllBackward(run.run_id, Codec::kBitcomp, 0, &frames), 0.0);
  EXPECT_EQ(frames, kSteps);
}

TEST_P(FramesTest, LossyFramesStayWithinTheirBound) {
  const double bound = 1e-4;  // the field's largest value is 1
  RunInfo run = Open("lossy", Codec::kBitcompLossy, bound);
  ASSERT_NE(run.run_id, 0u);
  uint64_t framed = PushAll(run.run_id, Codec::kBitcompLossy, bound);
  ASSERT_GT(framed, 0u);
  uint64_t frames = 0;
  double worst = FetchAllBackward(run.run_id, Codec::kBitcompLossy, bound, &frames);
  EXPECT_LE(worst, bound);
  EXPECT_GT(frames, 0u);
}

TEST_P(FramesTest, BytesThatAreNotAFrameAreRefusedByNameAndTheDaemonServesOn) {
  RunInfo run = Open("junk", Codec::kBitcomp, 0);
  ASSERT_NE(run.run_id, 0u);
  std::vector<char> junk(kRaw / 3, 'j');
  auto h = client_->Push(run.run_id, 0, junk.data(), junk.size());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  Status s = h->WaitStored();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not a chunk frame of codec bitcomp"), std::string::npos)
      << s.ToString();
  // More than a raw step, to a framed run: refused by libadjsnap, naming the sizes.
  std::vector<char> big(kRaw + 8);
  EXPECT_EQ(client_->Push(run.run_id, 0, big.data(), big.size()).status().code(),
            Code::kInvalidArgument);
  // The step is free: its real frame goes in.
  std::vector<float> v = Wave(0);
  std::vector<char> frame(compress::MaxFramedBytes(kRaw, kChunk) + 8);
  auto n = compress::CompressFrameOnHost(CodecOf(Codec::kBitcomp, 0), Field(), v.data(), kChunk,
                                         frame.data(), frame.size());
  ASSERT_TRUE(n.ok() && *n < kRaw);
  auto good = client_->Push(run.run_id, 0, frame.data(), *n);
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good->WaitStored().ok());
  ExpectRoundTrip();
}

// An ans frame has no CPU decoder: dump refuses it by name before it writes a file. The frame
// is made by hand (ans codes on a GPU only); adjsnapd takes it, since it never decodes a frame.
TEST_P(FramesTest, DumpRefusesWhatItCannotDecodeAndWritesNothing) {
  RunSpec spec = Spec("ans-run", 2, kRaw);
  spec.dtype = Dtype::kUint8;
  spec.layers = "Host";
  spec.keep = true;
  spec.codec = Codec::kAns;
  RunInfo run = OpenRun(*client_, spec);
  ASSERT_NE(run.run_id, 0u);
  uint32_t chunks = compress::ChunkCount(kRaw, kChunk);
  auto layout =
      compress::LayOut(v1::CODEC_ANS, kRaw, kChunk, std::vector<uint64_t>(chunks, kChunk / 8));
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<char> frame(layout->framed_bytes, 'a');
  compress::WriteFrameHead(*layout, frame.data());
  compress::ZeroPadding(*layout, frame.data());
  auto h = client_->Push(run.run_id, 1, frame.data(), frame.size());
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->WaitStored().ok());
  std::vector<char> raw(kRaw, 'r');  // a step that did not shrink, stored raw
  h = client_->Push(run.run_id, 0, raw.data(), raw.size());
  ASSERT_TRUE(h.ok() && h->WaitStored().ok());

  std::string out, err, to = dir() + "/ans-dump";
  EXPECT_NE(AdjsnapCli({"dump", "ans-run", "--to", to}, &out, &err), 0);
  EXPECT_NE(err.find("step 1 of run 'ans-run' is stored as a chunk frame of codec ans"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("no CPU decoder for ans"), std::string::npos) << err;
  EXPECT_NE(err.find("nothing was written"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(to + "/manifest.json"));
  EXPECT_FALSE(std::filesystem::exists(to + "/step-00000000.npy"));
  // The raw step alone dumps.
  EXPECT_EQ(AdjsnapCli({"dump", "ans-run", "--to", to, "--steps", "0:1"}, &out, &err), 0) << err;
  // And the frame comes back to a client as it went.
  std::vector<char> back(kRaw);
  auto f = client_->FetchAsync(run.run_id, 1, back.data(), kRaw);
  ASSERT_TRUE(f.ok() && f->Wait().ok());
  ASSERT_EQ(f->frame_bytes(), frame.size());
  EXPECT_EQ(std::memcmp(back.data(), frame.data(), frame.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, FramesTest, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "mapped" : "copied"; });

}  // namespace
}  // namespace adjsnap::testing
