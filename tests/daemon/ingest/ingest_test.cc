// The at-ingest compressor alone (ingest/ingest.h): an index, a host tier for the blocks, the
// real zfp codec and checksum owner, a recorder in place of the catalog, and I/O jobs the test
// runs when it chooses. No Store, no RocksDB, no spool.
#include "ingest/ingest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "adjsnap/checksum.h"
#include "record_writer.h"
#include "adjsnap/compress_pool.h"

namespace adjsnap {
namespace {

class IngestTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kValues = 16 << 10;
  static constexpr uint64_t kBytes = kValues * sizeof(float);

  void SetUp() override {
    tier_ = std::move(HostTier::Create(4 << 20).value());
    pool_ = std::make_unique<compress::CompressPool>(1);
    checksums_ = std::make_unique<Checksums>(
        ix_, writer_.Writer(), nullptr, [] {});
    ingest_ = std::make_unique<Ingest>(
        ix_, *checksums_,
        Ingest::Deps{
            .allocate = [this](const StoreIndex::Run&,
                               uint64_t bytes) -> Result<std::shared_ptr<HostBlock>> {
              if (!room_) return Status::ResourceExhausted("no room beside (test)");
              ADJSNAP_ASSIGN_OR_RETURN(std::unique_ptr<HostBlock> b, tier_->Allocate(bytes));
              return std::shared_ptr<HostBlock>(std::move(b));
            },
            .record = writer_.Writer(),
            .submit = [this](std::function<void()> job) { jobs_.push_back(std::move(job)); },
            .pack =
                [this](const compress::CodecSpec& codec, const compress::FieldSpec& field,
                       const void* data) {
                  return PackSnapshot(codec, field, data, pool_.get(), *checksums_);
                },
            .wake = [this] { ++wakes_; }});
  }

  // Step `step` of run 1 (float32, zfp-reversible at ingest), stored raw in a host block with
  // `values`; its compression started. Returns the block.
  std::shared_ptr<HostBlock> Pushed(uint64_t step, const std::vector<float>& values) {
    std::shared_ptr<HostBlock> block = std::move(tier_->Allocate(kBytes).value());
    std::memcpy(block->data(), values.data(), kBytes);
    IndexLock lock(ix_);
    StoreIndex::Run& run = ix_.runs[1];
    v1::RunSpec* spec = run.record.mutable_spec();
    spec->set_bytes_per_step(kBytes);
    spec->set_dtype(v1::DTYPE_FLOAT32);
    spec->set_codec(v1::CODEC_ZFP_REVERSIBLE);
    spec->set_compress_when(v1::COMPRESS_AT_INGEST);
    run.record.set_run_id(1);
    StoreIndex::Snapshot& snap = run.snapshots[step];
    snap.record.set_run_id(1);
    snap.record.set_step(step);
    snap.record.set_tier(v1::TIER_HOST);
    snap.record.set_raw_bytes(kBytes);
    snap.record.set_stored_bytes(kBytes);
    snap.record.set_checksum_state(v1::CHECKSUM_PENDING);
    snap.generation = step + 1;
    snap.block = block;
    run.stored_bytes += kBytes;
    ingest_->Start(ix_, run, snap);
    return block;
  }
  // Runs the queued compressions on a thread of their own (they take the index's mutex).
  void RunJobs() {
    std::vector<std::function<void()>> jobs;
    jobs.swap(jobs_);
    std::thread([&] {
      for (auto& job : jobs) job();
    }).join();
    writer_.Flush();  // a compressed copy is swapped in once its record is written
  }
  StoreIndex::Snapshot Snap(uint64_t step) {
    IndexLock lock(ix_);
    return ix_.runs[1].snapshots.at(step);
  }
  int InFlight() {
    IndexLock lock(ix_);
    return Ingest::InFlight(ix_);
  }
  size_t Pending() {
    IndexLock lock(ix_);
    return Ingest::Pending(ix_);
  }
  uint64_t RunBytes() {
    IndexLock lock(ix_);
    return ix_.runs[1].stored_bytes;
  }
  // A smooth field (compresses) and noise (does not).
  static std::vector<float> Smooth() {
    std::vector<float> v(kValues);
    for (uint64_t i = 0; i < kValues; ++i) v[i] = std::sin(0.001f * static_cast<float>(i));
    return v;
  }
  static std::vector<float> Noise() {
    std::mt19937 rng(7);
    std::vector<float> v(kValues);
    for (auto& x : v) {
      uint32_t bits = rng();
      std::memcpy(&x, &bits, sizeof(x));
    }
    return v;
  }
  // The compressed copy decoded, as a fetch would.
  std::vector<float> Decoded(uint64_t step) {
    StoreIndex::Snapshot snap = Snap(step);
    std::vector<float> out(kValues);
    IndexLock lock(ix_);
    Status s = DecodeSnapshot(snap.record, FieldOf(ix_.runs[1].record.spec()), snap.block->data(),
                              out.data(), pool_.get(), *checksums_);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

  std::unique_ptr<HostTier> tier_;
  std::unique_ptr<compress::CompressPool> pool_;
  StoreIndex ix_;
  testing::RecordWriter writer_;  // after ix_: its completions take ix_'s mutex
  std::unique_ptr<Checksums> checksums_;
  std::unique_ptr<Ingest> ingest_;
  std::vector<std::function<void()>> jobs_;
  bool room_ = true;
  int wakes_ = 0;
};

TEST_F(IngestTest, ACompressedCopyReplacesTheRawBlockAndIsRecorded) {
  const std::vector<float> values = Smooth();
  std::weak_ptr<HostBlock> raw = Pushed(0, values);
  EXPECT_EQ(InFlight(), 1);
  RunJobs();
  EXPECT_EQ(InFlight(), 0);
  EXPECT_EQ(Pending(), 0u);
  EXPECT_GE(wakes_, 1);
  StoreIndex::Snapshot snap = Snap(0);
  EXPECT_EQ(snap.record.codec(), v1::CODEC_ZFP_REVERSIBLE);
  EXPECT_LT(snap.record.stored_bytes(), kBytes);
  EXPECT_GE(snap.block->size(), snap.record.stored_bytes());  // to the next page
  EXPECT_LT(snap.block->size(), kBytes);
  EXPECT_EQ(RunBytes(), snap.record.stored_bytes());
  EXPECT_EQ(snap.record.checksum_state(), v1::CHECKSUM_RECORDED);
  EXPECT_EQ(snap.record.checksum(), Checksum(values.data(), kBytes));  // of the pushed bytes
  EXPECT_EQ(snap.record.stored_checksum(),
            Checksum(snap.block->data(), snap.record.stored_bytes()));
  ASSERT_FALSE(writer_.Records().empty());
  EXPECT_EQ(writer_.Records().back().codec(), v1::CODEC_ZFP_REVERSIBLE);  // the catalog was told
  EXPECT_TRUE(raw.expired());  // the raw block went back to the tier
  EXPECT_EQ(Decoded(0), values);
}

TEST_F(IngestTest, WithNoRoomBesideTheCopyWaitsForTheHolderOfTheRawBytes) {
  room_ = false;
  std::shared_ptr<HostBlock> held = Pushed(0, Smooth());  // a fetch still reads the raw bytes
  RunJobs();
  EXPECT_EQ(Pending(), 1u);
  EXPECT_EQ(Snap(0).record.codec(), v1::CODEC_NONE);
  {
    IndexLock lock(ix_);
    ingest_->RetryPending(ix_);
    EXPECT_EQ(Ingest::Pending(ix_), 1u);  // still held
  }
  const HostBlock* where = held.get();
  held.reset();
  {
    IndexLock lock(ix_);
    ingest_->RetryPending(ix_);
    EXPECT_EQ(Ingest::Pending(ix_), 0u);
  }
  writer_.Flush();  // swapped in once recorded
  StoreIndex::Snapshot snap = Snap(0);
  EXPECT_EQ(snap.record.codec(), v1::CODEC_ZFP_REVERSIBLE);
  EXPECT_EQ(snap.block.get(), where);  // written over the raw bytes, its tail freed
  EXPECT_LT(snap.block->size(), kBytes);
  EXPECT_EQ(Decoded(0), Smooth());
}

TEST_F(IngestTest, AStepDeletedWhileItCompressesIsLeftDeleted) {
  Pushed(0, Smooth());
  {
    IndexLock lock(ix_);
    ix_.runs[1].EraseSnapshot(ix_.runs[1].snapshots.find(0));
  }
  RunJobs();
  EXPECT_EQ(InFlight(), 0);
  EXPECT_EQ(Pending(), 0u);
  IndexLock lock(ix_);
  EXPECT_TRUE(ix_.runs[1].snapshots.empty());
}

TEST_F(IngestTest, AStepBeingWrittenToDiskIsLeftToTheDemotion) {
  Pushed(0, Smooth());
  {
    IndexLock lock(ix_);
    ix_.runs[1].snapshots.at(0).writing = true;
  }
  RunJobs();
  EXPECT_EQ(Snap(0).record.codec(), v1::CODEC_NONE);
  EXPECT_EQ(Snap(0).block->size(), kBytes);
  EXPECT_EQ(Pending(), 0u);
}

TEST_F(IngestTest, AFieldThatDoesNotShrinkStaysRaw) {
  Pushed(0, Noise());
  RunJobs();
  StoreIndex::Snapshot snap = Snap(0);
  EXPECT_EQ(snap.record.codec(), v1::CODEC_NONE);
  EXPECT_EQ(snap.record.stored_bytes(), kBytes);
  EXPECT_EQ(RunBytes(), kBytes);
  EXPECT_EQ(Pending(), 0u);
  // Its checksum was still taken (the compression asked for it first).
  EXPECT_EQ(snap.record.checksum_state(), v1::CHECKSUM_RECORDED);
}

TEST_F(IngestTest, ACatalogThatRefusesTheRecordLeavesTheStepRaw) {
  writer_.SetResult(Status::Unavailable("the catalog is gone (test)"));
  Pushed(0, Smooth());
  RunJobs();
  StoreIndex::Snapshot snap = Snap(0);
  EXPECT_EQ(snap.record.codec(), v1::CODEC_NONE);
  EXPECT_EQ(snap.block->size(), kBytes);
  EXPECT_EQ(RunBytes(), kBytes);
  EXPECT_EQ(std::memcmp(snap.block->data(), Smooth().data(), kBytes), 0);
}

}  // namespace
}  // namespace adjsnap
