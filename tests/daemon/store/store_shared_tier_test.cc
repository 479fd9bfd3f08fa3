// Three levels of placement: host memory keeps a run's newest steps, the local spools the next
// ones, a shared spool (a parallel filesystem) the oldest; a failed shared filesystem leaves
// pushes to fail over to the local spools, byte-exact either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store_fixture.h"
#include "tiering/placement.h"

namespace adjsnap {
namespace {

constexpr uint64_t kStep = 64 << 10;
constexpr uint64_t kSteps = 48;  // 3 MiB: three times the 1 MiB host tier

class SharedTierTest : public StoreTest {
 protected:
  void SetUp() override {}  // each test opens its store with the spools it needs
  // The steps whose files lie in `spool` (a spool directory under the test's directory).
  std::set<uint64_t> StepsIn(const std::string& spool, uint64_t run_id) {
    std::set<uint64_t> steps;
    std::string dir = dir_ + "/" + spool + "/run-" + std::to_string(run_id);
    if (!std::filesystem::exists(dir)) return steps;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::string name = e.path().filename();  // step-<step>-e<epoch>-g<generation>
      if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos) {
        steps.insert(std::stoull(name.substr(5)));
      }
    }
    return steps;
  }
  std::set<uint64_t> Range(uint64_t from, uint64_t to) {
    std::set<uint64_t> r;
    for (uint64_t t = from; t < to; ++t) r.insert(t);
    return r;
  }
};

TEST_F(SharedTierTest, TheOldestStepsGoToTheSharedSpoolTheNextToTheLocalOnesTheNewestStay) {
  shared_bytes_ = 8 << 20;
  Open(/*disk_bytes=*/8 * kStep);  // the local spool holds 8 steps
  uint64_t id = OpenRun("three", kSteps, kStep, v1::LAYERS_DISK_HOST);
  for (uint64_t t = 0; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  const uint64_t j = store_->ListRuns()[0].host_boundary();
  ASSERT_GT(j, 8u);
  ASSERT_LT(j, kSteps);
  EXPECT_EQ(StepsIn("spool", id), Range(j - 8, j)) << "the newest of the disk range, local";
  EXPECT_EQ(StepsIn("shared", id), Range(0, j - 8)) << "the oldest, on the shared spool";
  for (uint64_t t = j; t < kSteps; ++t) EXPECT_EQ(TierOf("three", t), v1::TIER_HOST) << t;
  // The backward pass reads every step back exactly, from all three levels.
  for (uint64_t t = kSteps; t-- > 0;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
}

// N unknown: nothing tells which steps are the oldest of the disk range until the local spool
// fills. As it does, the run's oldest local steps move on to the shared spool, so the layout
// ends as with N declared: the oldest steps shared, the next local, the newest in host memory;
// every step reads back exact.
TEST_F(SharedTierTest, WithNUnknownTheOldestLocalStepsMoveOnToTheSharedSpoolAsLocalRoomRunsOut) {
  shared_bytes_ = 8 << 20;
  Open(/*disk_bytes=*/8 * kStep);  // the local spool holds 8 steps
  uint64_t id = OpenRun("open-ended", /*steps=*/0, kStep, v1::LAYERS_DISK_HOST);
  for (uint64_t t = 0; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  const std::set<uint64_t> local = StepsIn("spool", id);
  const std::set<uint64_t> shared = StepsIn("shared", id);
  std::set<uint64_t> host;
  for (uint64_t t = 0; t < kSteps; ++t) {
    if (TierOf("open-ended", t) == v1::TIER_HOST) host.insert(t);
  }
  ASSERT_FALSE(shared.empty());
  ASSERT_FALSE(host.empty());
  // Room for two demotions is kept free ahead of them (a quarter of the local spool).
  EXPECT_GE(local.size(), 6u) << "the local spool ends nearly full";
  EXPECT_LT(*shared.rbegin(), *local.begin()) << "every shared step is older than the local ones";
  EXPECT_LT(*local.rbegin(), *host.begin()) << "and every local one older than those in memory";
  EXPECT_EQ(shared.size() + local.size() + host.size(), kSteps) << "each step in one place";
  EXPECT_GT(store_->Counters().moves_to_shared, 0u);
  for (uint64_t t = kSteps; t-- > 0;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
}

// A local step whose file cannot be read (EIO) cannot move on: it stays where it is, is not
// copied over and over (one try per step until a spool's state changes), and the newer steps
// go to the shared spool instead; nothing is lost, and once the disk reads again every step
// comes back exact.
TEST_F(SharedTierTest, WithNUnknownALocalStepThatCannotBeReadStaysAndIsTriedOnce) {
  shared_bytes_ = 8 << 20;
  Open(/*disk_bytes=*/8 * kStep, &faulty_io_);
  faulty_io_.Fail(testing::FaultySpoolIo::kRead, EIO, 0, dir_ + "/spool/");
  uint64_t id = OpenRun("unreadable", /*steps=*/0, kStep, v1::LAYERS_DISK_HOST);
  for (uint64_t t = 0; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  const std::set<uint64_t> local = StepsIn("spool", id);
  EXPECT_EQ(local, Range(0, 8)) << "the oldest steps stay local";
  EXPECT_FALSE(StepsIn("shared", id).empty());
  EXPECT_LE(faulty_io_.failures(), 8u) << "each unreadable step tried once";
  EXPECT_EQ(store_->Counters().moves_to_shared, 0u);
  EXPECT_EQ(store_->Counters().lost_snapshots, 0u) << "a failed move loses nothing";
  faulty_io_.Heal();
  for (uint64_t t = kSteps; t-- > 0;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
}

// The shared filesystem fails (EIO) before the first step reaches it: it leaves the rotation,
// and the steps meant for it go to the local spool while that has room. Once that is full too
// a push fails fast, naming the failed spool and its errno; every step stored so far comes back
// exact. Once the shared spool is writable again and probed, the rest of the run goes in, its
// oldest remaining steps to the shared spool.
TEST_F(SharedTierTest, AFailedSharedFilesystemFailsOverThenFailsFastNamingIt) {
  shared_bytes_ = 8 << 20;
  Open(/*disk_bytes=*/8 * kStep, &faulty_io_);
  faulty_io_.Fail(testing::FaultySpoolIo::kWrite, EIO, 0, dir_ + "/shared");
  // Read-once: the backward pass below frees host memory as it goes, so steps on disk can come
  // back while the host tier was full.
  uint64_t id = OpenRun("failover", kSteps, kStep, v1::LAYERS_DISK_HOST, /*keep=*/false);
  uint64_t t = 0;
  Status refused;
  for (; t < kSteps && refused.ok(); ++t) refused = Push(id, t, kStep);
  ASSERT_FALSE(refused.ok()) << "the host tier and the local spool cannot hold the run";
  const uint64_t first_refused = t - 1;
  EXPECT_EQ(refused.code(), Code::kResourceExhausted) << refused.ToString();
  EXPECT_NE(refused.message().find(dir_ + "/shared"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("EIO on " + dir_ + "/shared"), std::string::npos)
      << refused.ToString();
  EXPECT_TRUE(disk_->SpoolStates()[1].failed);
  EXPECT_EQ(StepsIn("spool", id), Range(0, 8)) << "the oldest steps, failed over to local";
  for (uint64_t s = first_refused; s-- > 0;) {
    Status got = FetchExact(id, s, kStep);
    ASSERT_TRUE(got.ok()) << s << ": " << got.ToString();
  }

  faulty_io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  for (t = first_refused; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  EXPECT_FALSE(StepsIn("shared", id).empty()) << "the shared spool takes steps again";
  for (uint64_t s : StepsIn("spool", id)) EXPECT_GE(s, first_refused) << "read once, removed";
  for (t = kSteps; t-- > first_refused;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
}

// The backward pass reads the shared spool's steps ahead of it at most kSharedReads at a time,
// nearest step first: through a network filesystem's client more reads at once share its
// bandwidth and finish in no useful order. Reads there are made slow (5 ms against 1 ms of
// compute per step), so the read-ahead wants several at once; every step comes back exact.
TEST_F(SharedTierTest, ReadAheadFromTheSharedSpoolGoesNearestFirstAFewAtATime) {
  shared_bytes_ = 8 << 20;
  Open(/*disk_bytes=*/8 * kStep, &faulty_io_);
  uint64_t id = OpenRun("ahead", kSteps, kStep, v1::LAYERS_DISK_HOST, /*keep=*/false);
  for (uint64_t t = 0; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  const std::set<uint64_t> shared = StepsIn("shared", id);
  ASSERT_GE(shared.size(), 8u);
  faulty_io_.SlowReads(std::chrono::milliseconds(5), dir_ + "/shared/");
  for (uint64_t t = kSteps; t-- > 0;) {
    ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the adjoint step's compute
  }
  std::vector<uint64_t> order;  // the steps whose shared files were read, in the order begun
  for (const std::string& path : faulty_io_.slow_reads()) {
    std::string name = std::filesystem::path(path).filename();  // step-<step>-e<e>-g<g>
    order.push_back(std::stoull(name.substr(5)));
  }
  // The reads are begun nearest first, but two begun together run on two threads, and either
  // may reach the file first: a step's place in the order may differ from its place in the
  // newest-first list only within the reads in flight at once.
  const std::vector<uint64_t> newest_first(shared.rbegin(), shared.rend());
  ASSERT_EQ(std::multiset<uint64_t>(order.begin(), order.end()),
            std::multiset<uint64_t>(shared.begin(), shared.end()))
      << "each shared step read once";
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t wanted = static_cast<size_t>(
        std::find(newest_first.begin(), newest_first.end(), order[i]) - newest_first.begin());
    EXPECT_LT(i > wanted ? i - wanted : wanted - i, static_cast<size_t>(kSharedReads))
        << "step " << order[i] << " read " << i << "th, its place newest first is " << wanted;
  }
  EXPECT_GE(faulty_io_.most_slow_reads_at_once(), 1);
  EXPECT_LE(faulty_io_.most_slow_reads_at_once(), kSharedReads);
  EXPECT_GT(store_->Counters().prefetch_hits, 0u) << "read ahead, not only on demand";
}

// The shared filesystem's server goes away before the backward pass reaches the steps it holds
// (a GlusterFS brick killed: ENOTCONN). A fetch of such a step is UNAVAILABLE naming the file
// and the errno; the step stays recorded, never lost; read-ahead does not spin on it; and once
// a probe brings the spool back, every step comes back exact.
TEST_F(SharedTierTest, AStepOnAnUnreachableSharedSpoolIsUnavailableNotLostAndServedOnceBack) {
  shared_bytes_ = 8 << 20;
  Open(/*disk_bytes=*/8 * kStep, &faulty_io_);
  uint64_t id = OpenRun("brick", kSteps, kStep, v1::LAYERS_DISK_HOST, /*keep=*/false);
  for (uint64_t t = 0; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  const std::set<uint64_t> shared = StepsIn("shared", id);
  ASSERT_FALSE(shared.empty());
  const uint64_t newest_shared = *shared.rbegin();
  faulty_io_.Fail(testing::FaultySpoolIo::kRead, ENOTCONN, 0, dir_ + "/shared/");
  for (uint64_t t = kSteps; t-- > newest_shared + 1;) {
    ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
  }
  Status s = FetchExact(id, newest_shared, kStep);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("Transport endpoint is not connected (ENOTCONN)"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("stays recorded"), std::string::npos) << s.ToString();
  EXPECT_EQ(TierOf("brick", newest_shared), v1::TIER_DISK);
  EXPECT_TRUE(disk_->SpoolStates()[1].failed);
  const uint64_t calls = faulty_io_.calls();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LT(faulty_io_.calls() - calls, 20u) << "read-ahead retries an unreachable spool";

  faulty_io_.Heal();
  disk_->ProbeNow();
  ASSERT_FALSE(disk_->SpoolStates()[1].failed);
  for (uint64_t t = newest_shared + 1; t-- > 0;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
  EXPECT_EQ(store_->Counters().lost_snapshots, 0u);
}

// A run may name the spool class that takes its steps (RunSpec.spool_class, what RunAdjoint's
// kAdjsnapDisk and kAdjsnapSharedDisk levels set): "shared" puts every step on the shared spool
// though the local one has room for the newest, "local" keeps them off the shared spool while
// the local one has room, and neither moves a step on; every step reads back exact. A class
// the daemon lacks, a word that is not a class, a class without a Disk layer and a reopen
// with another class are refused, naming the field.
TEST_F(SharedTierTest, ARunThatNamesItsSpoolClassIsPlacedOnItWhileItHasRoom) {
  shared_bytes_ = 8 << 20;
  Open(/*disk_bytes=*/8 * kStep);  // the local spool holds 8 steps
  auto open = [&](const std::string& name, uint64_t steps, const std::string& cls,
                  v1::Layers layers = v1::LAYERS_DISK) -> Result<v1::RunInfo> {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_steps(steps);
    spec.set_bytes_per_step(kStep);
    spec.set_layers(layers);
    spec.set_keep(true);
    spec.set_spool_class(cls);
    bool created = false;
    return store_->OpenRun(spec, 0, &created);
  };
  auto shared = open("on-shared", 6, "shared");
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  auto local = open("on-local", 0, "local");  // N unknown: no step moves on to make room
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  for (uint64_t t = 0; t < 6; ++t) ASSERT_TRUE(Push(shared->run_id(), t, kStep).ok()) << t;
  for (uint64_t t = 0; t < 6; ++t) ASSERT_TRUE(Push(local->run_id(), t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  EXPECT_EQ(StepsIn("shared", shared->run_id()), Range(0, 6));
  EXPECT_TRUE(StepsIn("spool", shared->run_id()).empty());
  EXPECT_EQ(StepsIn("spool", local->run_id()), Range(0, 6));
  EXPECT_TRUE(StepsIn("shared", local->run_id()).empty());
  EXPECT_EQ(store_->Counters().moves_to_shared, 0u);
  // The local spool has room for 2 more: the next steps of the local run go to the shared
  // spool rather than fail (a preference, not a fence).
  for (uint64_t t = 6; t < 12; ++t) ASSERT_TRUE(Push(local->run_id(), t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  EXPECT_FALSE(StepsIn("shared", local->run_id()).empty());
  EXPECT_EQ(StepsIn("spool", local->run_id()).size() + StepsIn("shared", local->run_id()).size(),
            12u);
  for (uint64_t t = 6; t-- > 0;) ASSERT_TRUE(FetchExact(shared->run_id(), t, kStep).ok()) << t;
  for (uint64_t t = 12; t-- > 0;) ASSERT_TRUE(FetchExact(local->run_id(), t, kStep).ok()) << t;

  auto wrong = open("bad-class", 4, "nvme");
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("spool_class"), std::string::npos)
      << wrong.status().ToString();
  auto host_only = open("host-only", 4, "local", v1::LAYERS_HOST);
  EXPECT_EQ(host_only.status().code(), Code::kInvalidArgument);
  EXPECT_NE(host_only.status().message().find("no Disk layer"), std::string::npos)
      << host_only.status().ToString();
  auto other = open("on-shared", 6, "local");  // the name exists with the shared class
  EXPECT_EQ(other.status().code(), Code::kAlreadyExists);
  EXPECT_NE(other.status().message().find("spool_class"), std::string::npos)
      << other.status().ToString();
}

// Without shared spools, a run that asks for them is refused, naming what is missing.
TEST_F(SharedTierTest, ASpoolClassTheDaemonLacksIsRefusedNamingIt) {
  Open(/*disk_bytes=*/8 * kStep);  // local spools only
  v1::RunSpec spec;
  spec.set_name("wants-shared");
  spec.set_steps(4);
  spec.set_bytes_per_step(kStep);
  spec.set_layers(v1::LAYERS_DISK);
  spec.set_spool_class("shared");
  bool created = false;
  auto run = store_->OpenRun(spec, 0, &created);
  EXPECT_EQ(run.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(run.status().message().find("no shared spools"), std::string::npos)
      << run.status().ToString();
  EXPECT_TRUE(store_->ListRuns().empty());
}

}  // namespace
}  // namespace adjsnap
