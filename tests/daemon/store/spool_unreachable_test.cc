// A shared spool whose servers go away under the store, injected behind the disk tier's I/O seam:
// a read failing ESTALE, ETIMEDOUT or EHOSTDOWN, a read that hangs, a restart while the spool's
// files cannot be looked at. The step is UNAVAILABLE naming the step and the spool, never lost;
// the store serves the other runs and spools meanwhile; the catalog keeps the step on disk; and
// once the spool answers, every step comes back exact.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <set>
#include <string>
#include <thread>

#include "store_fixture.h"

namespace adjsnap {
namespace {

using testing::FaultySpoolIo;

constexpr uint64_t kStep = 64 << 10;
constexpr uint64_t kSteps = 48;  // 3 MiB: three times the 1 MiB host tier

class SpoolUnreachableTest : public StoreTest {
 protected:
  void SetUp() override {}  // each test opens its store with the spools it needs
  // A call left hanging by a failed assertion must not hold the store's I/O threads as they
  // are joined.
  void TearDown() override {
    faulty_io_.Heal();
    StoreTest::TearDown();
  }
  // Opens the store over a local spool of 8 steps and a shared one, and run `name` with its
  // oldest steps in the shared spool; returns its id.
  uint64_t OpenWithSharedSteps(const std::string& name) {
    shared_bytes_ = 8 << 20;
    Open(/*disk_bytes=*/8 * kStep, &faulty_io_);
    uint64_t id = OpenRun(name, kSteps, kStep, v1::LAYERS_DISK_HOST, /*keep=*/false);
    for (uint64_t t = 0; t < kSteps; ++t) EXPECT_TRUE(Push(id, t, kStep).ok()) << t;
    store_->WaitTieringIdle();
    return id;
  }
  // The steps whose files lie in the shared spool.
  std::set<uint64_t> SharedSteps(uint64_t run_id) {
    std::set<uint64_t> steps;
    std::string dir = dir_ + "/shared/run-" + std::to_string(run_id);
    if (!std::filesystem::exists(dir)) return steps;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::string name = e.path().filename();  // step-<step>-e<epoch>-g<generation>
      if (name.rfind("step-", 0) == 0) steps.insert(std::stoull(name.substr(5)));
    }
    return steps;
  }
  std::string Shared() const { return dir_ + "/shared"; }
};

class SharedReadErrorTest : public SpoolUnreachableTest,
                            public ::testing::WithParamInterface<int> {};

TEST_P(SharedReadErrorTest, AFetchIsUnavailableNamingTheStepAndTheSpoolThenServedExact) {
  const int err = GetParam();
  const uint64_t id = OpenWithSharedSteps("r");
  const std::set<uint64_t> shared = SharedSteps(id);
  ASSERT_FALSE(shared.empty());
  const uint64_t newest = *shared.rbegin();
  faulty_io_.Add(FaultySpoolIo::kRead, err, Shared() + "/");
  for (uint64_t t = kSteps; t-- > newest + 1;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
  Status s = FetchExact(id, newest, kStep);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  // The step as the solver knows it: by its run's name, not the catalog's run id.
  EXPECT_NE(s.message().find("step " + std::to_string(newest) + " of run 'r' is unavailable"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("spool " + Shared() + " failed"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("(" + ErrnoName(err) + ")"), std::string::npos) << s.ToString();
  EXPECT_EQ(TierOf("r", newest), v1::TIER_DISK);
  EXPECT_EQ(store_->Counters().lost_snapshots, 0u);
  // Another run goes on meanwhile, pushed and fetched.
  uint64_t other = OpenRun("other", 4, kStep, v1::LAYERS_HOST);
  for (uint64_t t = 0; t < 4; ++t) ASSERT_TRUE(Push(other, t, kStep).ok()) << t;
  for (uint64_t t = 4; t-- > 0;) ASSERT_TRUE(FetchExact(other, t, kStep).ok()) << t;
  faulty_io_.Heal();
  ASSERT_EQ(disk_->ProbeNow(), 1);
  for (uint64_t t = newest + 1; t-- > 0;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
  EXPECT_EQ(store_->Counters().lost_snapshots, 0u);
}

INSTANTIATE_TEST_SUITE_P(Errno, SharedReadErrorTest,
                         ::testing::Values(ESTALE, ETIMEDOUT, EHOSTDOWN),
                         [](const auto& p) { return ErrnoName(p.param); });

// A read of the shared spool that hangs in the kernel holds up the fetches of that step only:
// the run's local steps, another run's pushes and fetches, and the store's views answer while
// it is blocked. When it returns ETIMEDOUT, the waiting fetch is answered UNAVAILABLE naming
// the step; the step stays on disk and is served exact once the spool answers.
TEST_F(SpoolUnreachableTest, AHungSharedReadHoldsUpOnlyTheFetchesOfItsStep) {
  const uint64_t id = OpenWithSharedSteps("r");
  const std::set<uint64_t> shared = SharedSteps(id);
  ASSERT_FALSE(shared.empty());
  const uint64_t newest = *shared.rbegin();
  faulty_io_.Hang(FaultySpoolIo::kRead, Shared() + "/");
  std::promise<Result<Store::FetchGrant>> answer;
  store_->BeginFetch(
      id, newest, kStep, /*backward=*/true,
      [&answer](Result<Store::FetchGrant> g) { answer.set_value(std::move(g)); }, Tenant::Admin());
  std::future<Result<Store::FetchGrant>> hung = answer.get_future();
  ASSERT_TRUE(faulty_io_.AwaitHung(1));
  // The run's steps above it (host memory, the local spool) are served meanwhile.
  for (uint64_t t = kSteps; t-- > newest + 1;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
  uint64_t other = OpenRun("other", 4, kStep, v1::LAYERS_HOST);
  for (uint64_t t = 0; t < 4; ++t) ASSERT_TRUE(Push(other, t, kStep).ok()) << t;
  for (uint64_t t = 4; t-- > 0;) ASSERT_TRUE(FetchExact(other, t, kStep).ok()) << t;
  EXPECT_EQ(store_->ListRuns().size(), 2u);
  EXPECT_EQ(hung.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_GE(faulty_io_.hung(), 1);

  // The server stays away until Heal: a read that comes after the hung ones end (a read-ahead
  // of the step, started once the spool's state changed) times out too, rather than reading
  // the file and moving the step to host memory before the check below.
  faulty_io_.Add(FaultySpoolIo::kRead, ETIMEDOUT, Shared() + "/");
  faulty_io_.Release(ETIMEDOUT);
  ASSERT_EQ(hung.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  Result<Store::FetchGrant> g = hung.get();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnavailable) << g.status().ToString();
  EXPECT_NE(g.status().message().find("step " + std::to_string(newest) + " of run '"),
            std::string::npos)
      << g.status().ToString();
  EXPECT_NE(g.status().message().find("(ETIMEDOUT)"), std::string::npos) << g.status().ToString();
  EXPECT_EQ(TierOf("r", newest), v1::TIER_DISK);
  faulty_io_.Heal();
  ASSERT_EQ(disk_->ProbeNow(), 1);
  for (uint64_t t = newest + 1; t-- > 0;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
  EXPECT_EQ(store_->Counters().lost_snapshots, 0u);
}

// adjsnapd restarted while the shared spool's servers answer ESTALE for its files: its steps
// are recovered unread (on disk, not lost, nothing quarantined or removed), a fetch of one is
// UNAVAILABLE, and once the spool answers every step on disk comes back exact.
TEST_F(SpoolUnreachableTest, ARestartWhileTheSharedFilesAreOutOfReachLosesNone) {
  const uint64_t id = OpenWithSharedSteps("r");
  const std::set<uint64_t> shared = SharedSteps(id);
  ASSERT_FALSE(shared.empty());
  std::set<uint64_t> on_disk;
  for (uint64_t t = 0; t < kSteps; ++t) {
    if (OnDisk("r", t)) on_disk.insert(t);
  }
  faulty_io_.Add(FaultySpoolIo::kStat, ESTALE, Shared() + "/run-");
  faulty_io_.Add(FaultySpoolIo::kOpenForRead, ESTALE, Shared() + "/run-");
  Open(/*disk_bytes=*/8 * kStep, &faulty_io_);  // the restart
  ASSERT_TRUE(disk_->SpoolStates()[1].failed);
  EXPECT_EQ(disk_->SpoolStates()[1].error, ESTALE);
  // Those in host memory alone may be lost (no drain before this stop); none of those on disk.
  const uint64_t lost = store_->Counters().lost_snapshots;
  EXPECT_LE(lost, kSteps - on_disk.size());
  for (uint64_t t : on_disk) EXPECT_EQ(TierOf("r", t), v1::TIER_DISK) << t;
  EXPECT_EQ(SharedSteps(id), shared) << "a file out of reach was moved or removed";
  Status s = FetchExact(id, *shared.rbegin(), kStep);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  faulty_io_.Heal();
  ASSERT_EQ(disk_->ProbeNow(), 1);
  for (auto t = on_disk.rbegin(); t != on_disk.rend(); ++t) {
    ASSERT_TRUE(FetchExact(id, *t, kStep).ok()) << *t;
  }
  EXPECT_EQ(store_->Counters().lost_snapshots, lost);
}

}  // namespace
}  // namespace adjsnap
