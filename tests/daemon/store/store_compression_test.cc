// The store with a codec: zfp on demotion and at ingest, bit-exact or within the tolerance,
// damage reported lost, and compressed copies waiting for a holder of the raw bytes.
#include "store_fixture.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "faulty_spool_io.h"
#include "adjsnap/checksum.h"
#include "tiering/placement.h"

namespace adjsnap {
namespace {

// A smooth float32 field, as a wavefield is: what zfp is for.
std::vector<float> WaveField(uint64_t step, size_t ny, size_t nx) {
  std::vector<float> v(ny * nx);
  for (size_t y = 0; y < ny; ++y) {
    for (size_t x = 0; x < nx; ++x) {
      v[y * nx + x] = std::sin(0.07f * x + 0.1f * step) * std::cos(0.05f * y);
    }
  }
  return v;
}

double WorstError(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  }
  return worst;
}

class CompressedStoreTest : public StoreTest {
 protected:
  static constexpr size_t kNy = 64, kNx = 256;
  static constexpr uint64_t kBytes = kNy * kNx * sizeof(float);

  uint64_t OpenCompressed(v1::Codec codec, double param, v1::Layers layers = v1::LAYERS_DISK,
                          bool at_ingest = false, uint64_t steps = 4) {
    v1::RunSpec spec;
    spec.set_name("z");
    spec.set_steps(steps);
    spec.set_bytes_per_step(kBytes);
    spec.set_dtype(v1::DTYPE_FLOAT32);
    spec.add_shape(kNy);
    spec.add_shape(kNx);
    spec.set_layers(layers);
    spec.set_keep(true);
    spec.set_codec(codec);
    spec.set_codec_param(param);
    spec.set_block_when_full(true);
    if (at_ingest) spec.set_compress_when(v1::COMPRESS_AT_INGEST);
    bool created = false;
    auto run = store_->OpenRun(spec, 0, &created);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? run->run_id() : 0;
  }
  void PushWave(uint64_t id, uint64_t step) {
    auto t = Reserve(*store_, id, step, kBytes);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    std::vector<float> v = WaveField(step, kNy, kNx);
    std::memcpy(t->block->data(), v.data(), kBytes);
    ASSERT_TRUE(store_->CommitPush(*t).ok());
  }
  std::vector<float> FetchFloats(uint64_t id, uint64_t step) {
    auto g = Fetch(*store_, id, step, kBytes);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    std::vector<float> v(kNy * kNx);
    if (g.ok()) std::memcpy(v.data(), g->block->data(), kBytes);
    return v;
  }
};

TEST_F(CompressedStoreTest, ReversibleDemotionIsBitExactAndTheDiskCountsStoredBytes) {
  uint64_t id = OpenCompressed(v1::CODEC_ZFP_REVERSIBLE, 0);
  for (uint64_t t = 0; t < 4; ++t) PushWave(id, t);
  store_->WaitTieringIdle();
  uint64_t stored = 0;
  for (uint64_t t = 0; t < 4; ++t) {
    auto where = store_->Locate("z", t);
    ASSERT_TRUE(where.ok());
    EXPECT_EQ(where->tier(), v1::TIER_DISK);
    EXPECT_EQ(where->codec(), v1::CODEC_ZFP_REVERSIBLE);
    EXPECT_LT(where->stored_bytes(), kBytes);
    stored += DiskTier::FileBytes(where->stored_bytes());
  }
  EXPECT_EQ(disk_->used(), stored);  // capacity is accounted in stored bytes
  for (uint64_t t = 4; t-- > 0;) {
    std::vector<float> want = WaveField(t, kNy, kNx);
    EXPECT_EQ(0, std::memcmp(FetchFloats(id, t).data(), want.data(), kBytes)) << t;
  }
}

TEST_F(CompressedStoreTest, AccuracyDemotionReadsBackWithinTheTolerance) {
  const double tol = 1e-4;
  uint64_t id = OpenCompressed(v1::CODEC_ZFP_ACCURACY, tol);
  PushWave(id, 2);
  store_->WaitTieringIdle();
  ASSERT_EQ(TierOf("z", 2), v1::TIER_DISK);
  std::vector<float> got = FetchFloats(id, 2), want = WaveField(2, kNy, kNx);
  EXPECT_LE(WorstError(got, want), tol);
}

TEST_F(CompressedStoreTest, ACorruptCompressedSnapshotIsReportedLost) {
  uint64_t id = OpenCompressed(v1::CODEC_ZFP_RATE, 8);
  PushWave(id, 1);
  store_->WaitTieringIdle();
  ASSERT_TRUE(FlipSpoolByte(500));
  Status s = Fetch(*store_, id, 1, kBytes).status();
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("compressed bytes"), std::string::npos) << s.ToString();
  EXPECT_EQ(TierOf("z", 1), v1::TIER_LOST);
}

TEST_F(CompressedStoreTest, AtIngestTheHostTierHoldsMoreStepsThanItsRawSize) {
  // 40 steps of 64 KiB = 2.5 MiB of raw fields through a 1 MiB host tier with no disk: only
  // compression makes room (pushes wait for it: block_when_full).
  Open(/*disk_bytes=*/0);
  constexpr uint64_t kCount = 40;
  const double tol = 1e-4;
  uint64_t id = OpenCompressed(v1::CODEC_ZFP_ACCURACY, tol, v1::LAYERS_HOST, /*at_ingest=*/true,
                               kCount);
  for (uint64_t t = 0; t < kCount; ++t) PushWave(id, t);
  store_->WaitTieringIdle();
  EXPECT_LT(tier_->used(), kHostBytes);
  auto where = store_->Locate("z", 5);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->tier(), v1::TIER_HOST);
  EXPECT_EQ(where->codec(), v1::CODEC_ZFP_ACCURACY);
  EXPECT_LT(where->stored_bytes(), kBytes / 4);
  // Every step decodes within the tolerance (decoding needs a raw block's room: deleting each
  // step after reading it leaves that room, as read-once would).
  for (uint64_t t = kCount; t-- > 0;) {
    ASSERT_LE(WorstError(FetchFloats(id, t), WaveField(t, kNy, kNx)), tol) << "step " << t;
    if (t == kCount - 1) {
      EXPECT_EQ(store_->Locate("z", t)->codec(), v1::CODEC_NONE);  // decoded: raw again
    }
    ASSERT_TRUE(store_->DeleteSnapshot("z", t).ok());
  }
}

TEST_F(CompressedStoreTest, AStepCompressedAtIngestGoesToDiskAsItIs) {
  const double tol = 1e-5;
  uint64_t id = OpenCompressed(v1::CODEC_ZFP_ACCURACY, tol, v1::LAYERS_DISK_HOST,
                               /*at_ingest=*/true, 4);
  for (uint64_t t = 0; t < 4; ++t) PushWave(id, t);
  store_->WaitTieringIdle();
  auto in_host = store_->Locate("z", 2);
  ASSERT_TRUE(in_host.ok());
  ASSERT_EQ(in_host->tier(), v1::TIER_HOST);
  ASSERT_EQ(in_host->codec(), v1::CODEC_ZFP_ACCURACY);
  std::promise<Result<Store::DrainResult>> drained;
  store_->Drain([&](Result<Store::DrainResult> r) { drained.set_value(std::move(r)); });
  auto r = drained.get_future().get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->moved, 4u);
  auto on_disk = store_->Locate("z", 2);
  ASSERT_TRUE(on_disk.ok());
  EXPECT_EQ(on_disk->tier(), v1::TIER_DISK);
  EXPECT_EQ(on_disk->codec(), v1::CODEC_ZFP_ACCURACY);
  EXPECT_EQ(on_disk->stored_bytes(), in_host->stored_bytes());  // written as it was
  std::vector<float> got = FetchFloats(id, 2), want = WaveField(2, kNy, kNx);
  EXPECT_LE(WorstError(got, want), tol);
}

// At-ingest compression swaps a step's raw block for its smaller copy once the store holds the
// raw block alone; with no room beside it, the copy waits and the policy holds back demotions
// of the run meanwhile. The last other holder of the raw bytes is outside the store (the data
// plane's push ticket or fetch lease), and its release frees no memory by itself: it must still
// reach a push that waits for room. (A compressed-at-ingest stream through a 2 MiB host tier
// hung here, its next push waiting for ever with every daemon thread idle.)
class PendingPackTest : public CompressedStoreTest {
 protected:
  void SetUp() override {
    // No timer may wake the tiering thread before the test's bound: only the release can.
    wait_warn_after_ = std::chrono::hours(1);
    Open();
  }
  // Fills the host tier but for one raw block, with steps of a run that never leaves it.
  void FillAllButOneBlock() {
    uint64_t filler = OpenRun("filler", 0, kBytes, v1::LAYERS_HOST);
    for (uint64_t t = 0; t + 1 < kHostBytes / kBytes; ++t) {
      ASSERT_TRUE(Push(filler, t, kBytes).ok()) << t;
    }
    store_->WaitChecksumsIdle();  // the checksum thread holds none of their blocks now
  }
  uint64_t OpenAtIngest() {
    return OpenCompressed(v1::CODEC_ZFP_REVERSIBLE, 0, v1::LAYERS_DISK_HOST, /*at_ingest=*/true);
  }
  // Step 0 is compressed, but its copy is not swapped in: still raw in host memory.
  void ExpectStepZeroWaitsForItsCopy() {
    store_->WaitTieringIdle();  // the compression is done
    auto where = store_->Locate("z", 0);
    ASSERT_TRUE(where.ok()) << where.status().ToString();
    EXPECT_EQ(where->tier(), v1::TIER_HOST);
    EXPECT_EQ(where->codec(), v1::CODEC_NONE);
  }
  // Pushes step 1, which must wait for room; `release` lets go of the outside holder.
  void ExpectAWaitingPushGrantedOnceReleased(uint64_t id, const std::function<void()>& release) {
    auto promise = std::make_shared<std::promise<Result<Store::PushTicket>>>();
    ASSERT_TRUE(store_->BeginPush(id, 1, kBytes, [promise](Result<Store::PushTicket> t) {
      promise->set_value(std::move(t));
    }));
    auto granted = promise->get_future();
    EXPECT_EQ(granted.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
    release();
    ASSERT_EQ(granted.wait_for(std::chrono::seconds(30)), std::future_status::ready)
        << "the push still waits for room after the raw bytes were let go";
    {
      Result<Store::PushTicket> t = granted.get();
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      std::vector<float> v = WaveField(1, kNy, kNx);
      std::memcpy(t->block->data(), v.data(), kBytes);
      ASSERT_TRUE(store_->CommitPush(*t).ok());
    }  // the ticket goes, as the data plane lets it go after the commit
    store_->WaitTieringIdle();
    for (uint64_t step : {1, 0}) {
      std::vector<float> want = WaveField(step, kNy, kNx);
      EXPECT_EQ(0, std::memcmp(FetchFloats(id, step).data(), want.data(), kBytes)) << step;
    }
  }
};

TEST_F(PendingPackTest, APushTicketHeldPastTheCommitStillLetsTheNextPushIn) {
  FillAllButOneBlock();
  uint64_t id = OpenAtIngest();
  auto t = Reserve(*store_, id, 0, kBytes);  // the last free block
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<float> v = WaveField(0, kNy, kNx);
  std::memcpy(t->block->data(), v.data(), kBytes);
  ASSERT_TRUE(store_->CommitPush(*t).ok());  // the data plane still holds the ticket
  ExpectStepZeroWaitsForItsCopy();
  ExpectAWaitingPushGrantedOnceReleased(id, [&] { t->block.reset(); });
}

TEST_F(PendingPackTest, AFetchLeaseHeldWhileTheStepCompressesStillLetsTheNextPushIn) {
  // The compression of step 0 waits, in its checksum, until the fetch has the raw bytes.
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool armed = false, entered = false, open = false;
  };
  auto gate = std::make_shared<Gate>();
  on_hash_ = [gate](const void*, uint64_t) {
    std::unique_lock<std::mutex> lock(gate->mu);
    if (!gate->armed) return;
    gate->armed = false;
    gate->entered = true;
    gate->cv.notify_all();
    gate->cv.wait(lock, [&] { return gate->open; });
  };
  Open();
  FillAllButOneBlock();
  uint64_t id = OpenAtIngest();
  {
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->armed = true;
  }
  PushWave(id, 0);
  {
    std::unique_lock<std::mutex> lock(gate->mu);
    gate->cv.wait(lock, [&] { return gate->entered; });
  }
  auto lease = Fetch(*store_, id, 0, kBytes);  // raw in host memory: answered at once
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  {
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->open = true;
  }
  gate->cv.notify_all();
  ExpectStepZeroWaitsForItsCopy();
  ExpectAWaitingPushGrantedOnceReleased(id, [&] { lease->block.reset(); });
}

}  // namespace
}  // namespace adjsnap
