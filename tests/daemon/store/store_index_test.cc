// The index's own bookkeeping (store/store_index.h), on a bare run: Run::DiskSteps, the count of
// a run's steps on disk in [step, bound) that each demotion's placement asks for
// (Tiering::DemotionClass), kept as records change and snapshots go instead of walked.
#include "store/store_index.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>

namespace adjsnap {
namespace {

// What DemotionClass walked before the count was kept.
uint64_t Walked(const StoreIndex::Run& run, uint64_t step, uint64_t bound) {
  uint64_t on_disk = 0;
  for (auto it = run.snapshots.lower_bound(step); it != run.snapshots.end() && it->first < bound;
       ++it) {
    on_disk += it->second.record.tier() == v1::TIER_DISK;
  }
  return on_disk;
}

v1::SnapshotRecord RecordOf(uint64_t step, v1::Tier tier) {
  v1::SnapshotRecord r;
  r.set_step(step);
  r.set_tier(tier);
  return r;
}

constexpr v1::Tier kTiers[] = {v1::TIER_HOST, v1::TIER_DISK, v1::TIER_LOST};

// Random adds, changes of tier and erasures, with counts from anywhere and counts that walk up
// the steps as demotions do; the bound changes now and then. Every count equals the walk.
TEST(StoreIndex, DiskStepsEqualTheWalkOfTheRangeWhateverTheOrderOfChanges) {
  std::mt19937_64 random(61);
  constexpr uint64_t kSteps = 300;
  StoreIndex::Run run;
  uint64_t bound = 200;
  uint64_t pass = 0;  // where the next count of an ordered pass starts
  for (int i = 0; i < 40000; ++i) {
    const uint64_t step = random() % kSteps;
    switch (random() % 8) {
      case 0:
      case 1:  // a push, a demotion, a loss, a record rewritten with its tier
        run.SetRecord(run.snapshots[step], RecordOf(step, kTiers[random() % 3]));
        break;
      case 2:  // a delete, a read-once release
        if (auto it = run.snapshots.find(step); it != run.snapshots.end()) run.EraseSnapshot(it);
        break;
      case 3:  // a count from anywhere
        ASSERT_EQ(run.DiskSteps(step, bound), Walked(run, step, bound))
            << "from " << step << " below " << bound << " at operation " << i;
        break;
      default:  // the next demotion of a pass, which starts again once past the end
        pass = pass >= kSteps ? 0 : pass + random() % 4;
        ASSERT_EQ(run.DiskSteps(pass, bound), Walked(run, pass, bound))
            << "from " << pass << " below " << bound << " at operation " << i;
    }
    if (i % 10000 == 9999) bound = random() % (kSteps + 20);
  }
}

// A run copied (or moved) into another keeps its own count: the copy's cursor started afresh
// over the copy's snapshots, and changes to either leave the other's count true.
TEST(StoreIndex, DiskStepsOfACopiedOrMovedRunCountItsOwnSnapshots) {
  StoreIndex::Run run;
  for (uint64_t step = 0; step < 20; ++step) {
    run.SetRecord(run.snapshots[step], RecordOf(step, step % 2 ? v1::TIER_DISK : v1::TIER_HOST));
  }
  ASSERT_EQ(run.DiskSteps(4, 16), 6u);  // 5, 7, ..., 15: the cursor now stands at step 4
  StoreIndex::Run copy = run;
  copy.SetRecord(copy.snapshots.at(6), RecordOf(6, v1::TIER_DISK));
  copy.EraseSnapshot(copy.snapshots.find(5));
  EXPECT_EQ(run.DiskSteps(4, 16), 6u);
  EXPECT_EQ(copy.DiskSteps(4, 16), Walked(copy, 4, 16));
  EXPECT_EQ(copy.DiskSteps(4, 16), 6u);  // 6 came, 5 went
  StoreIndex::Run moved;
  moved = std::move(copy);
  moved.SetRecord(moved.snapshots.at(7), RecordOf(7, v1::TIER_LOST));
  EXPECT_EQ(moved.DiskSteps(0, 16), Walked(moved, 0, 16));
  EXPECT_EQ(moved.DiskSteps(4, 16), 5u);
  EXPECT_EQ(run.DiskSteps(0, 16), 8u);
}

}  // namespace
}  // namespace adjsnap
