// The store with an nvCOMP codec: libadjsnap pushes chunk frames (proto/adjsnap/chunk_frame.h),
// which adjsnapd checks at commit, stores, accounts, moves to disk and serves back exactly as they
// came, never decoding them. The frames here are made by hand: the store reads only their
// header and table, so no nvCOMP is needed (kernels/nvcomp_codec_test.cc tests the coder).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <vector>

#include "adjsnap/chunk_frame.h"
#include "store_fixture.h"

namespace adjsnap {
namespace {

constexpr uint64_t kRaw = 64 << 10;    // one step's raw bytes
constexpr uint32_t kChunk = 16 << 10;  // four chunks

// A well-formed frame of `codec` for a step of kRaw bytes: each chunk "compressed" to
// `stored` bytes of a pattern of (step, chunk). Its bytes differ from step to step.
std::vector<char> MakeFrame(v1::Codec codec, uint64_t step, uint64_t stored = kChunk / 4) {
  uint32_t chunks = compress::ChunkCount(kRaw, kChunk);
  auto layout = compress::LayOut(static_cast<uint16_t>(codec), kRaw, kChunk,
                                 std::vector<uint64_t>(chunks, stored));
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<char> frame(layout->framed_bytes);
  compress::WriteFrameHead(*layout, frame.data());
  compress::ZeroPadding(*layout, frame.data());
  for (uint32_t c = 0; c < chunks; ++c) {
    const auto& chunk = layout->chunks[c];
    for (uint32_t i = 0; i < chunk.stored_bytes; ++i) {
      frame[chunk.offset + i] = static_cast<char>(step * 7 + c * 13 + i % 241);
    }
  }
  return frame;
}

class FramedStoreTest : public StoreTest {
 protected:
  Result<v1::RunInfo> OpenNvcomp(v1::Codec codec, double param, v1::Layers layers,
                                 v1::Dtype dtype = v1::DTYPE_FLOAT32, bool at_ingest = false) {
    v1::RunSpec spec;
    spec.set_name("gpu");
    spec.set_steps(8);
    spec.set_bytes_per_step(kRaw);
    spec.set_dtype(dtype);
    spec.set_layers(layers);
    spec.set_keep(true);
    spec.set_codec(codec);
    spec.set_codec_param(param);
    if (at_ingest) spec.set_compress_when(v1::COMPRESS_AT_INGEST);
    bool created = false;
    return store_->OpenRun(spec, 0, &created);
  }
  // Pushes `bytes` as step `step` through a reservation, as the data plane does.
  Status PushBytes(uint64_t id, uint64_t step, const std::vector<char>& bytes) {
    ADJSNAP_ASSIGN_OR_RETURN(Store::PushTicket t, Reserve(*store_, id, step, bytes.size()));
    std::memcpy(t.block->data(), bytes.data(), bytes.size());
    return store_->CommitPush(t);
  }
  // Fetches a step: its bytes as served.
  Result<std::vector<char>> FetchBytes(uint64_t id, uint64_t step) {
    ADJSNAP_ASSIGN_OR_RETURN(Store::FetchGrant g, Fetch(*store_, id, step, kRaw));
    const char* p = static_cast<const char*>(g.block->data());
    return std::vector<char>(p, p + g.bytes);
  }
};

TEST_F(FramedStoreTest, AFrameIsStoredAsPushedWithItsCodecAndServedBackAsIs) {
  auto run = OpenNvcomp(v1::CODEC_BITCOMP, 0, v1::LAYERS_DISK_HOST);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  uint64_t id = run->run_id();
  std::vector<char> frame = MakeFrame(v1::CODEC_BITCOMP, 0);
  ASSERT_LT(frame.size(), kRaw);
  ASSERT_TRUE(PushBytes(id, 0, frame).ok());
  // A step that did not shrink comes raw, and is stored raw: it says so.
  std::vector<char> raw(kRaw, 'r');
  ASSERT_TRUE(PushBytes(id, 1, raw).ok());

  auto framed = store_->Locate("gpu", 0);
  ASSERT_TRUE(framed.ok());
  EXPECT_EQ(framed->codec(), v1::CODEC_BITCOMP);
  EXPECT_EQ(framed->stored_bytes(), frame.size());
  EXPECT_EQ(framed->raw_bytes(), kRaw);
  auto plain = store_->Locate("gpu", 1);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->codec(), v1::CODEC_NONE);
  EXPECT_EQ(plain->stored_bytes(), kRaw);
  // The tenant is charged what is stored: the frame, not a raw step.
  EXPECT_EQ(store_->TenantUsage(0).stored_bytes, frame.size() + kRaw);

  auto back = FetchBytes(id, 0);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, frame);
  auto back_raw = FetchBytes(id, 1);
  ASSERT_TRUE(back_raw.ok());
  EXPECT_EQ(*back_raw, raw);
}

TEST_F(FramedStoreTest, AFrameGoesToDiskAndComesBackUntouchedAndItsChecksumGuardsIt) {
  auto run = OpenNvcomp(v1::CODEC_BITCOMP_LOSSY, 1e-4, v1::LAYERS_DISK);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  uint64_t id = run->run_id();
  std::vector<char> frame = MakeFrame(v1::CODEC_BITCOMP_LOSSY, 3);
  ASSERT_TRUE(PushBytes(id, 3, frame).ok());
  std::promise<Result<Store::DrainResult>> drained;
  store_->Drain([&](Result<Store::DrainResult> r) { drained.set_value(std::move(r)); });
  auto r = drained.get_future().get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto on_disk = store_->Locate("gpu", 3);
  ASSERT_TRUE(on_disk.ok());
  ASSERT_EQ(on_disk->tier(), v1::TIER_DISK);
  EXPECT_EQ(on_disk->codec(), v1::CODEC_BITCOMP_LOSSY);
  EXPECT_EQ(on_disk->stored_bytes(), frame.size());  // written as it came, not re-coded
  EXPECT_EQ(on_disk->checksum(), Checksum(frame.data(), frame.size()));
  ASSERT_EQ(std::filesystem::file_size([&] {
              std::string f;
              for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/spool"))
                if (e.is_regular_file() && e.path().filename() != DiskTier::kMarker) f = e.path();
              return f;
            }()),
            DiskTier::FileBytes(frame.size()));

  auto back = FetchBytes(id, 3);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, frame);

  // A damaged file: the step is reported lost, never served.
  Open();  // a restart: the frame is read from its file again
  ASSERT_TRUE(FlipSpoolByte(100));
  auto damaged = Fetch(*store_, id, 3, kRaw);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), Code::kDataLoss) << damaged.status().ToString();
}

TEST_F(FramedStoreTest, ShortBytesThatAreNotAFrameOfTheRunsCodecAreRefusedByName) {
  auto run = OpenNvcomp(v1::CODEC_BITCOMP, 0, v1::LAYERS_HOST);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  uint64_t id = run->run_id();
  std::vector<char> junk(kRaw / 2, 'j');
  Status s = PushBytes(id, 0, junk);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not a chunk frame of codec bitcomp"), std::string::npos)
      << s.ToString();
  // A frame of another codec, and one cut short.
  std::vector<char> ans = MakeFrame(v1::CODEC_ANS, 0);
  s = PushBytes(id, 0, ans);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  std::vector<char> cut = MakeFrame(v1::CODEC_BITCOMP, 0);
  cut.resize(cut.size() - 100);
  s = PushBytes(id, 0, cut);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  // More than a raw step: refused before any room is taken.
  auto big = Reserve(*store_, id, 0, kRaw + 1);
  EXPECT_EQ(big.status().code(), Code::kInvalidArgument) << big.status().ToString();
  // None of them left a step or its room behind: the good frame goes in.
  EXPECT_EQ(store_->Locate("gpu", 0).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->TenantUsage(0).stored_bytes, 0u);
  ASSERT_TRUE(PushBytes(id, 0, MakeFrame(v1::CODEC_BITCOMP, 0)).ok());

  // A run without an nvCOMP codec takes raw steps only.
  uint64_t plain = OpenRun("plain", 4, kRaw, v1::LAYERS_HOST);
  auto short_push = Reserve(*store_, plain, 0, kRaw / 2);
  EXPECT_EQ(short_push.status().code(), Code::kInvalidArgument);
  EXPECT_NE(short_push.status().message().find("carries 32768 bytes"), std::string::npos)
      << short_push.status().ToString();
}

TEST_F(FramedStoreTest, AnNvcompRunsParameterIsCheckedWhenItOpensAndNoRunIsMade) {
  struct Case {
    v1::Codec codec;
    double param;
    v1::Dtype dtype;
    bool at_ingest;
    const char* says;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const Case& c : std::vector<Case>{
           {v1::CODEC_BITCOMP_LOSSY, 0, v1::DTYPE_FLOAT32, false, "error bound must be finite"},
           {v1::CODEC_BITCOMP_LOSSY, -1e-3, v1::DTYPE_FLOAT32, false, "> 0"},
           {v1::CODEC_BITCOMP_LOSSY, nan, v1::DTYPE_FLOAT64, false, "finite"},
           {v1::CODEC_BITCOMP_LOSSY, inf, v1::DTYPE_FLOAT32, false, "finite"},
           {v1::CODEC_BITCOMP_LOSSY, 1e-3, v1::DTYPE_INT32, false, "needs float32 or float64"},
           {v1::CODEC_BITCOMP, 1, v1::DTYPE_FLOAT32, false, "takes no parameter"},
           {v1::CODEC_ANS, 0, v1::DTYPE_UINT8, true, "compress_when at_ingest"},
       }) {
    auto run = OpenNvcomp(c.codec, c.param, v1::LAYERS_DISK_HOST, c.dtype, c.at_ingest);
    ASSERT_FALSE(run.ok()) << v1::Codec_Name(c.codec) << " " << c.param;
    EXPECT_EQ(run.status().code(), Code::kInvalidArgument);
    EXPECT_NE(run.status().message().find(c.says), std::string::npos) << run.status().ToString();
    EXPECT_NE(run.status().message().find("run 'gpu'"), std::string::npos);
    EXPECT_TRUE(store_->ListRuns().empty());
  }
  // And the ones that are right open, whether or not this build has nvCOMP: adjsnapd never codes.
  EXPECT_TRUE(OpenNvcomp(v1::CODEC_BITCOMP_LOSSY, 1e-4, v1::LAYERS_DISK_HOST).ok());
}

}  // namespace
}  // namespace adjsnap
