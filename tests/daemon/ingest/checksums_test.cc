// The checksum owner alone (ingest/checksums.h): an index, a host tier for the blocks and a
// recorder in place of the catalog; no Store, no RocksDB, no spool.
#include "ingest/checksums.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "adjsnap/checksum.h"
#include "record_writer.h"

namespace adjsnap {
namespace {

using namespace std::chrono_literals;

class ChecksumsTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBytes = 64 << 10;

  void SetUp() override { tier_ = std::move(HostTier::Create(4 << 20).value()); }
  void TearDown() override { checksums_.reset(); }

  // Makes the owner; `record` fails with this status when not OK.
  void Make(Status record_result = Status::Ok()) {
    writer_.SetResult(record_result);
    checksums_ = std::make_unique<Checksums>(
        ix_, writer_.Writer(),
        [this](const void* data, uint64_t bytes) {
          if (on_hash_) on_hash_(data, bytes);
        },
        [this] { wakes_.fetch_add(1); });
  }
  // A stored copy of step `step` of run 1 whose checksum is pending: its raw bytes, all
  // `fill`, in a host block. Returns the block (the snapshot holds it too).
  std::shared_ptr<HostBlock> Stored(uint64_t step, uint64_t generation, char fill) {
    std::shared_ptr<HostBlock> block = std::move(tier_->Allocate(kBytes).value());
    std::memset(block->data(), fill, kBytes);
    IndexLock lock(ix_);
    StoreIndex::Snapshot& snap = ix_.runs[1].snapshots[step];
    snap.record.set_run_id(1);
    snap.record.set_step(step);
    snap.record.set_tier(v1::TIER_HOST);
    snap.record.set_checksum_state(v1::CHECKSUM_PENDING);
    snap.generation = generation;
    snap.block = block;
    return block;
  }
  void Queue(uint64_t step) {
    IndexLock lock(ix_);
    checksums_->Queue(ix_, 1, ix_.runs[1].snapshots.at(step), kBytes);
  }
  v1::SnapshotRecord Record(uint64_t step) {
    IndexLock lock(ix_);
    return ix_.runs[1].snapshots.at(step).record;
  }
  size_t Queued() {
    IndexLock lock(ix_);
    return ix_.checksums.jobs.size();
  }
  static uint64_t SumOf(char fill) {
    std::vector<char> bytes(kBytes, fill);
    return Checksum(bytes.data(), kBytes);
  }

  std::unique_ptr<HostTier> tier_;
  StoreIndex ix_;
  std::function<void(const void*, uint64_t)> on_hash_;
  testing::RecordWriter writer_;  // after ix_: its completions take ix_'s mutex
  std::atomic<int> wakes_{0};
  std::unique_ptr<Checksums> checksums_;
};

TEST_F(ChecksumsTest, AQueuedChecksumIsRecordedOnceAndItsBlockLetGo) {
  Make();
  std::weak_ptr<HostBlock> block = Stored(0, 1, 'a');
  Queue(0);
  checksums_->Start();
  checksums_->WaitIdle(ix_);
  v1::SnapshotRecord r = Record(0);
  EXPECT_EQ(r.checksum_state(), v1::CHECKSUM_RECORDED);
  EXPECT_EQ(r.checksum(), SumOf('a'));
  ASSERT_EQ(writer_.Records().size(), 1u);
  EXPECT_EQ(writer_.Records()[0].checksum(), SumOf('a'));
  EXPECT_EQ(checksums_->hashes(), 1u);
  EXPECT_GE(wakes_.load(), 1);  // the tiering policy is told
  EXPECT_EQ(block.use_count(), 1);  // only the snapshot holds it: the job let it go
}

TEST_F(ChecksumsTest, ChecksumOfAQueuedStepHashesItOnceAndTakesTheJob) {
  Make();  // no thread: the job stays queued
  std::shared_ptr<HostBlock> block = Stored(0, 1, 'b');
  Queue(0);
  EXPECT_EQ(checksums_->ChecksumOf(ix_, 1, 0, 1, *block, kBytes), SumOf('b'));
  EXPECT_EQ(Queued(), 0u);
  EXPECT_EQ(Record(0).checksum_state(), v1::CHECKSUM_RECORDED);
  // Asked again: the recorded one, no hash.
  EXPECT_EQ(checksums_->ChecksumOf(ix_, 1, 0, 1, *block, kBytes), SumOf('b'));
  EXPECT_EQ(checksums_->hashes(), 1u);
  // Another generation of the step (deleted and pushed again) is not this copy: 0.
  EXPECT_EQ(checksums_->ChecksumOf(ix_, 1, 0, 2, *block, kBytes), 0u);
}

TEST_F(ChecksumsTest, ChecksumOfAStepTheThreadIsHashingWaitsForThatHash) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> calls{0};
  on_hash_ = [&](const void*, uint64_t) {
    if (calls.fetch_add(1) == 0) {
      entered.set_value();
      released.wait();
    }
  };
  Make();
  std::shared_ptr<HostBlock> block = Stored(0, 1, 'c');
  Queue(0);
  checksums_->Start();
  ASSERT_EQ(entered.get_future().wait_for(10s), std::future_status::ready);
  auto asked = std::async(std::launch::async,
                          [&] { return checksums_->ChecksumOf(ix_, 1, 0, 1, *block, kBytes); });
  EXPECT_EQ(asked.wait_for(100ms), std::future_status::timeout);  // it waits for the thread
  release.set_value();
  EXPECT_EQ(asked.get(), SumOf('c'));
  checksums_->WaitIdle(ix_);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(checksums_->hashes(), 1u);
}

TEST_F(ChecksumsTest, ADeletedStepsJobIsPrunedAndItsBlockFreed) {
  Make();
  std::weak_ptr<HostBlock> block = Stored(0, 1, 'd');
  Queue(0);
  {
    IndexLock lock(ix_);
    ix_.runs[1].EraseSnapshot(ix_.runs[1].snapshots.find(0));
    EXPECT_FALSE(block.expired());  // the queued job holds it
    checksums_->Prune(ix_);
    EXPECT_TRUE(ix_.checksums.jobs.empty());
  }
  EXPECT_TRUE(block.expired());
  EXPECT_EQ(checksums_->hashes(), 0u);
}

TEST_F(ChecksumsTest, HeldBytesCountsABlockOnlyTheHashHoldsNow) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  on_hash_ = [&](const void*, uint64_t) {
    entered.set_value();
    released.wait();
  };
  Make();
  Stored(0, 1, 'e');
  Queue(0);
  checksums_->Start();
  ASSERT_EQ(entered.get_future().wait_for(10s), std::future_status::ready);
  {
    IndexLock lock(ix_);
    EXPECT_EQ(Checksums::HeldBytes(ix_), 0u);  // the snapshot still holds its block
    ix_.runs[1].EraseSnapshot(ix_.runs[1].snapshots.find(0));  // deleted while being hashed
    EXPECT_EQ(Checksums::HeldBytes(ix_), kBytes);
  }
  release.set_value();
  checksums_->WaitIdle(ix_);
  IndexLock lock(ix_);
  EXPECT_EQ(Checksums::HeldBytes(ix_), 0u);
  EXPECT_TRUE(writer_.Records().empty());  // nothing left to record it on
}

TEST_F(ChecksumsTest, ARecordTheCatalogRefusesLeavesTheChecksumPending) {
  Make(Status::Unavailable("the catalog is gone"));
  Stored(0, 1, 'f');
  Queue(0);
  checksums_->Start();
  checksums_->WaitIdle(ix_);
  EXPECT_EQ(writer_.Records().size(), 1u);
  EXPECT_EQ(Record(0).checksum_state(), v1::CHECKSUM_PENDING);
}

TEST_F(ChecksumsTest, TheThreadHoldsOffWhileAPushIsInFlight) {
  Make();
  Stored(0, 1, 'g');
  {
    IndexLock lock(ix_);
    ix_.runs[1].in_flight[7] = nullptr;  // a push waits for room
  }
  Queue(0);
  checksums_->Start();
  std::this_thread::sleep_for(10 * Checksums::kQuiet);
  EXPECT_EQ(checksums_->hashes(), 0u);
  EXPECT_EQ(Record(0).checksum_state(), v1::CHECKSUM_PENDING);
  {
    IndexLock lock(ix_);
    ix_.runs[1].in_flight.clear();
    Checksums::NoteDataPlaneActivity(ix_);
  }
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (Record(0).checksum_state() != v1::CHECKSUM_RECORDED &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(Record(0).checksum_state(), v1::CHECKSUM_RECORDED);
  EXPECT_EQ(checksums_->hashes(), 1u);
}

}  // namespace
}  // namespace adjsnap
