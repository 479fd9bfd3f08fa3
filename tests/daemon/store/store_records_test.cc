// Record first, then the index: no catalog wait is made with the index's mutex held, so a held
// catalog writer stops no push nor fetch, and two changes of one step's record made while the
// writer is held both reach the catalog, in order, as a restart finds them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "adjsnap/checksum.h"
#include "store_fixture.h"

namespace adjsnap {
namespace {

using namespace std::chrono_literals;

// A bound that only a hang reaches: the answers below come in milliseconds.
constexpr auto kHang = 30s;

class StoreRecordsTest : public StoreTest {
 protected:
  // The first hash of a stored step blocks in StoreOptions.on_hash until Go().
  void HoldFirstHash() {
    on_hash_ = [this](const void*, uint64_t) {
      if (held_.exchange(false)) {
        entered_.set_value();
        go_future_.wait();
      }
    };
  }
  void AwaitHash() { ASSERT_EQ(entered_.get_future().wait_for(kHang), std::future_status::ready); }
  void Go() { go_.set_value(); }
  // Waits until the catalog's writer has been handed `n` writes since Open.
  bool AwaitQueued(uint64_t n) {
    auto until = std::chrono::steady_clock::now() + kHang;
    while (catalog_->writer_counts().queued < n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
  // The catalog's record of the step, as the next start reads it.
  v1::SnapshotRecord Recorded(uint64_t run_id, uint64_t step) {
    catalog_->Flush();
    std::vector<v1::RunRecord> runs;
    std::vector<v1::SnapshotRecord> snaps;
    EXPECT_TRUE(catalog_->LoadAll(&runs, &snaps).ok());
    for (const auto& s : snaps) {
      if (s.run_id() == run_id && s.step() == step) return s;
    }
    ADD_FAILURE() << "no record of step " << step << " of run " << run_id;
    return {};
  }

  std::atomic<bool> held_{true};
  std::promise<void> entered_;
  std::promise<void> go_;
  std::shared_future<void> go_future_ = go_.get_future().share();
};

// While the catalog's writer is held, a checksum is recorded and a corrupt disk step is found
// lost: each waits for its record (or does not wait at all) without the index's mutex, so a
// fetch and a push on the data plane are answered meanwhile. Before, the checksum thread held
// the mutex across its write, and every push and fetch waited for the writer with it.
TEST_F(StoreRecordsTest, AHeldCatalogWriterStopsNoPushNorFetch) {
  constexpr uint64_t kStep = 64 << 10;
  HoldFirstHash();
  held_ = false;  // not the disk step's (its demotion hashes it)
  Open();
  uint64_t disk = OpenRun("d", 1, kStep, v1::LAYERS_DISK);
  ASSERT_TRUE(Push(disk, 0, kStep).ok());
  store_->WaitTieringIdle();
  ASSERT_EQ(TierOf("d", 0), v1::TIER_DISK);
  ASSERT_TRUE(FlipSpoolByte(1000));  // behind the daemon's back
  uint64_t host = OpenRun("h", 4, kStep, v1::LAYERS_HOST);
  held_ = true;
  ASSERT_TRUE(Push(host, 0, kStep).ok());  // its checksum is computed after, and held
  AwaitHash();

  const uint64_t before = catalog_->writer_counts().queued;
  CatalogStall stall(*catalog_);
  Go();
  // The checksum's record is queued behind the held writer.
  bool queued = AwaitQueued(before + 2);
  if (!queued) stall.Release();
  ASSERT_TRUE(queued);

  auto lost = std::async(std::launch::async,
                         [&] { return Fetch(*store_, disk, 0, kStep).status(); });
  auto fetched = std::async(std::launch::async,
                            [&] { return Fetch(*store_, host, 0, kStep).status(); });
  auto reserved = std::async(std::launch::async, [&] { return Reserve(*store_, host, 1, kStep); });
  bool answered = lost.wait_for(kHang) == std::future_status::ready &&
                  fetched.wait_for(kHang) == std::future_status::ready &&
                  reserved.wait_for(kHang) == std::future_status::ready;
  if (!answered) stall.Release();  // the futures' destructors wait for their calls
  ASSERT_TRUE(answered) << "a push or fetch waited for the held catalog writer";
  EXPECT_EQ(lost.get().code(), Code::kDataLoss);
  EXPECT_TRUE(fetched.get().ok());
  auto ticket = reserved.get();
  ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
  EXPECT_EQ(TierOf("d", 0), v1::TIER_LOST);  // the index says so at once
  store_->AbortPush(*ticket);

  stall.Release();
  store_->WaitChecksumsIdle();
  EXPECT_EQ(Recorded(disk, 0).tier(), v1::TIER_LOST);
  v1::SnapshotRecord sum = Recorded(host, 0);
  EXPECT_EQ(sum.checksum_state(), v1::CHECKSUM_RECORDED);
  std::vector<char> bytes(kStep);
  for (size_t i = 0; i < kStep; ++i) bytes[i] = Pattern(0, i);
  EXPECT_EQ(sum.checksum(), Checksum(bytes.data(), kStep));
}

// A step's checksum and its demotion change its record one after the other while the writer
// is held: the demotion's record is built on the checksum's (it waits for it), never on the
// record before, so the catalog ends with the step on disk and a restart serves it exact.
TEST_F(StoreRecordsTest, AChecksumAndADemotionOfOneStepBothReachTheCatalog) {
  constexpr uint64_t kStep = 64 << 10;
  HoldFirstHash();
  Open();
  uint64_t id = OpenRun("d", 2, kStep, v1::LAYERS_DISK);
  ASSERT_TRUE(Push(id, 0, kStep).ok());
  AwaitHash();  // by the checksum thread or the demotion; the other waits for it

  const uint64_t before = catalog_->writer_counts().queued;
  CatalogStall stall(*catalog_);
  Go();
  bool queued = AwaitQueued(before + 2);  // the checksum's record, held
  if (!queued) stall.Release();
  ASSERT_TRUE(queued);
  auto tier = std::async(std::launch::async, [&] { return TierOf("d", 0); });
  bool answered = tier.wait_for(kHang) == std::future_status::ready;
  if (!answered) stall.Release();
  ASSERT_TRUE(answered) << "a look-up waited for the held catalog writer";
  EXPECT_EQ(tier.get(), v1::TIER_HOST);  // nothing applied before its record is written
  stall.Release();

  store_->WaitTieringIdle();
  ASSERT_EQ(TierOf("d", 0), v1::TIER_DISK);
  v1::SnapshotRecord r = Recorded(id, 0);
  EXPECT_EQ(r.tier(), v1::TIER_DISK);
  EXPECT_EQ(r.checksum_state(), v1::CHECKSUM_RECORDED);

  Open();  // a new daemon start over the same catalog
  EXPECT_EQ(TierOf("d", 0), v1::TIER_DISK);
  EXPECT_TRUE(FetchExact(id, 0, kStep).ok());
}

}  // namespace
}  // namespace adjsnap
