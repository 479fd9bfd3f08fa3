// The device tier's placement and bookkeeping (client/src/device_pool.h), on the CPU: which
// steps stay in the GPU pool, which go to the daemon, and how slots are reused.
#include "device_pool.h"

#include <gtest/gtest.h>

#include <set>

namespace adjsnap::detail {
namespace {

std::shared_ptr<OpState> Done() {
  auto s = std::make_shared<OpState>();
  s->Complete(Status::Ok());
  return s;
}

TEST(DevicePoolBudget, BytesWinOverTheFraction) {
  EXPECT_EQ(DevicePoolBudget(0.7, 0, 1000), 700u);
  EXPECT_EQ(DevicePoolBudget(0.7, 123, 1000), 123u);
  double f = 0;
  uint64_t b = 0;
  ASSERT_TRUE(ParseDeviceMem("0.5", &f, &b).ok());
  EXPECT_EQ(f, 0.5);
  EXPECT_EQ(b, 0u);
  ASSERT_TRUE(ParseDeviceMem("8G", &f, &b).ok());
  EXPECT_EQ(b, uint64_t{8} << 30);
  EXPECT_EQ(ParseDeviceMem("1.5", &f, &b).code(), Code::kInvalidArgument);
  Status bad = ParseDeviceMem("lots", &f, &b);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("ADJSNAP_DEVICE_MEM 'lots'"), std::string::npos) << bad.ToString();
}

TEST(DevicePool, ADeclaredRunKeepsItsNewestStepsAndSendsTheOldestToTheDaemon) {
  DevicePool pool(10 * 4096);
  auto plan = pool.ReserveRun(/*steps=*/25, /*bytes_per_step=*/4000);  // slots of 4096
  EXPECT_EQ(plan.slots, 10u);
  EXPECT_EQ(plan.slot_bytes, 4096u);
  pool.AddRun(1, "r", plan, 25, /*keep=*/false, /*device_only=*/false);
  std::set<uint64_t> offsets;
  for (uint64_t t = 0; t < 25; ++t) {
    auto p = pool.Place(1, t, 4000);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->on_device, t >= 15) << "step " << t;
    if (!p->on_device) continue;
    EXPECT_FALSE(p->evict);
    EXPECT_TRUE(offsets.insert(p->offset).second) << "slot reused while held";
    EXPECT_EQ(p->offset % DevicePool::kSlotAlignment, 0u);
    EXPECT_LT(p->offset, pool.capacity());
    pool.Commit(1, t, p->offset, 4000, Done());
  }
  // The wrong size is refused before any copy; a step past N goes to the daemon to refuse.
  auto wrong = pool.Place(1, 24, 4096);
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("its steps are 4000 bytes"), std::string::npos)
      << wrong.status().ToString();
  EXPECT_FALSE(pool.Place(1, 25, 4000)->on_device);
  EXPECT_EQ(pool.HeldSteps(1).front(), 15u);
  EXPECT_EQ(pool.HeldSteps(1).size(), 10u);
  // The backward pass: a read-once fetch frees the slot for the next push.
  auto held = pool.Find(1, 24);
  ASSERT_TRUE(held);
  EXPECT_EQ(held->bytes, 4000u);
  EXPECT_FALSE(held->keep);
  auto copying = std::make_shared<OpState>();
  ASSERT_TRUE(pool.Drop(1, 24, copying));
  EXPECT_FALSE(pool.Find(1, 24));
  auto again = pool.Place(1, 24, 4000);
  ASSERT_TRUE(again.ok() && again->on_device);
  EXPECT_EQ(again->offset, held->offset);
  EXPECT_EQ(again->busy, copying);  // the caller waits for the copy out before refilling
}

TEST(DevicePool, RunsShareThePoolAndARunThatFitsNothingUsesTheDaemon) {
  DevicePool pool(8 * 4096);
  auto a = pool.ReserveRun(6, 4096);
  auto b = pool.ReserveRun(6, 4096);
  auto c = pool.ReserveRun(6, 4096);
  EXPECT_EQ(a.slots, 6u);
  EXPECT_EQ(b.slots, 2u);  // what was left
  EXPECT_EQ(c.slots, 0u);
  pool.AddRun(1, "a", a, 6, true, false);
  pool.AddRun(2, "b", b, 6, true, false);
  EXPECT_FALSE(pool.Place(2, 3, 4096)->on_device);
  EXPECT_TRUE(pool.Place(2, 4, 4096)->on_device);
  EXPECT_FALSE(pool.Place(3, 5, 4096)->on_device);  // not a pool run
  EXPECT_EQ(pool.reserved_bytes(), 8u * 4096);
  // Deleting a run returns its copies in flight and then its region.
  auto p = pool.Place(1, 0, 4096);
  auto filling = std::make_shared<OpState>();
  pool.Commit(1, 0, p->offset, 4096, filling);
  auto dropped = pool.DropRun("a");
  ASSERT_TRUE(dropped.found);
  ASSERT_EQ(dropped.busy.size(), 1u);
  EXPECT_EQ(dropped.busy[0], filling);
  pool.FreeRegion(dropped.plan);
  EXPECT_EQ(pool.reserved_bytes(), 2u * 4096);
  EXPECT_EQ(pool.ReserveRun(6, 4096).slots, 6u);
  EXPECT_FALSE(pool.DropRun("a").found);
}

TEST(DevicePool, WithAnUnknownStepCountThePoolKeepsTheNewestStepsPushed) {
  DevicePool pool(3 * 4096);
  auto plan = pool.ReserveRun(0, 4096);
  EXPECT_EQ(plan.slots, 3u);
  pool.AddRun(1, "open-ended", plan, 0, false, false);
  for (uint64_t t = 0; t < 7; ++t) {
    auto p = pool.Place(1, t, 4096);
    ASSERT_TRUE(p.ok() && p->on_device);
    if (t < 3) {
      EXPECT_FALSE(p->evict);
    } else {
      ASSERT_TRUE(p->evict);  // the oldest device step leaves for the daemon first
      EXPECT_EQ(p->evict->step, t - 3);
      EXPECT_EQ(p->evict->bytes, 4096u);
    }
    pool.Commit(1, t, p->offset, 4096, Done());
  }
  EXPECT_EQ(pool.HeldSteps(1), (std::vector<uint64_t>{4, 5, 6}));
  // A step pushed twice evicts nothing: the daemon refuses the duplicate.
  auto twice = pool.Place(1, 6, 4096);
  ASSERT_TRUE(twice.ok());
  EXPECT_FALSE(twice->on_device);
  EXPECT_EQ(pool.HeldSteps(1), (std::vector<uint64_t>{4, 5, 6}));
  // A step older than every held one goes to the daemon instead of evicting a newer one.
  EXPECT_FALSE(pool.Place(1, 2, 4096)->on_device);
}

TEST(DevicePool, DeviceOnlyRunsRefuseWhatDoesNotFit) {
  DevicePool pool(2 * 4096);
  auto plan = pool.ReserveRun(0, 4096);
  pool.AddRun(1, "device", plan, 0, true, /*device_only=*/true);
  for (uint64_t t = 0; t < 2; ++t) {
    auto p = pool.Place(1, t, 4096);
    ASSERT_TRUE(p.ok() && p->on_device);
    pool.Commit(1, t, p->offset, 4096, Done());
  }
  auto full = pool.Place(1, 2, 4096);
  EXPECT_EQ(full.status().code(), Code::kResourceExhausted);
  EXPECT_NE(full.status().message().find("layers Device"), std::string::npos) << full.status().ToString();
  // A failed push gives its slot back.
  ASSERT_TRUE(pool.Drop(1, 0, nullptr));
  auto p = pool.Place(1, 2, 4096);
  ASSERT_TRUE(p.ok() && p->on_device);
  pool.Undo(1, p->offset);
  EXPECT_TRUE(pool.Place(1, 2, 4096)->on_device);
}

TEST(JoinedCompletion, CompletesOnceEveryPartReportedWithTheFirstError) {
  auto state = std::make_shared<OpState>();
  JoinedCompletion join(state, 2);
  join.Done(Status::Ok());
  {
    MutexLock lock(state->mu);
    EXPECT_FALSE(state->completed);
  }
  join.Done(Status::NotFound("recorded nowhere"));
  EXPECT_EQ(state->WaitCompleted().code(), Code::kNotFound);
  auto both = std::make_shared<OpState>();
  JoinedCompletion failing(both, 2);
  failing.Done(Status::Internal("copy"));
  failing.Done(Status::AlreadyExists("record"));
  EXPECT_EQ(both->WaitCompleted().code(), Code::kInternal);  // the first error wins
}

}  // namespace
}  // namespace adjsnap::detail
