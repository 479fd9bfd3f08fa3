// Runs as the store opens and checks them: codecs and layers the node can serve, device
// steps, run specs, tenancy, host shares and quotas.
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
#include <set>
#include <thread>

#include "faulty_spool_io.h"
#include "adjsnap/checksum.h"
#include "adjsnap/zfp_codec.h"
#include "store_fixture.h"
#include "tiering/placement.h"

namespace adjsnap {
namespace {

TEST_F(StoreTest, ACodecNeedsADiskLayerAndDataZfpCanCode) {
  v1::RunSpec spec;
  spec.set_name("c");
  spec.set_bytes_per_step(4096);
  spec.set_codec(v1::CODEC_ZFP_REVERSIBLE);
  spec.set_layers(v1::LAYERS_HOST);
  bool created = false;
  Status s = store_->OpenRun(spec, 0, &created).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("never do"), std::string::npos) << s.ToString();
  spec.set_layers(v1::LAYERS_DISK_HOST);  // opaque bytes: nothing for zfp
  s = store_->OpenRun(spec, 0, &created).status();
  EXPECT_NE(s.message().find("needs dtype float32"), std::string::npos) << s.ToString();
}

// A stop drops every client's session; a stop slower than orphan_grace (a drain on a loaded
// node) must not then delete the runs of clients that wait to reconnect. The soak saw four runs
// go during a 21 s stop, and their clients' pushes fail with NOT_FOUND after the restart.
TEST_F(StoreTest, AStopSlowerThanTheOrphanGraceRemovesNoRun) {
  v1::RunSpec spec;
  spec.set_name("live");
  spec.set_bytes_per_step(4096);
  spec.set_layers(v1::LAYERS_DISK_HOST);
  bool created = false;
  ASSERT_TRUE(store_->OpenRun(spec, 0, &created, 0, /*session_id=*/7).ok());
  ASSERT_TRUE(Push(store_->RunId("live").value(), 0, 4096).ok());
  store_->EndSession(7, /*died=*/true);
  store_->BeginStop();
  store_->RemoveOrphans(std::chrono::seconds(0));
  EXPECT_EQ(store_->ListRuns().size(), 1u) << "a stopping adjsnapd removed a run as an orphan";
  // Not stopping, the same orphan goes (the test above would pass on a sweep that never runs).
  Open();
  spec.set_name("orphan");
  ASSERT_TRUE(store_->OpenRun(spec, 0, &created, 0, /*session_id=*/8).ok());
  store_->EndSession(8, /*died=*/true);
  store_->RemoveOrphans(std::chrono::seconds(0));
  for (const auto& run : store_->ListRuns()) EXPECT_NE(run.spec().name(), "orphan");
}

// After a restart no session is counted as a run's client: a client that reconnects opens a new
// session and goes on pushing and fetching without opening its run again. Its push or fetch
// counts it, so that its death still orphans the run. The soak's disk filled with the runs of
// clients killed after a restart, which nothing removed.
TEST_F(StoreTest, APushOrFetchAfterARestartCountsItsSessionAsTheRunsClient) {
  v1::RunSpec spec;
  spec.set_bytes_per_step(4096);
  spec.set_layers(v1::LAYERS_DISK_HOST);
  bool created = false;
  for (const char* name : {"pushed", "fetched", "idle"}) {
    spec.set_name(name);
    ASSERT_TRUE(store_->OpenRun(spec, 0, &created, 0, /*session_id=*/1).ok());
    ASSERT_TRUE(Push(store_->RunId(name).value(), 0, 4096).ok());
  }
  Open();  // a restart: the runs come back with no session
  Tenant pusher = Tenant::User(0);
  pusher.session_id = 21;
  auto ticket = Reserve(*store_, store_->RunId("pushed").value(), 1, 4096, pusher);
  ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
  ASSERT_TRUE(store_->CommitPush(*ticket).ok());
  Tenant fetcher = Tenant::User(0);
  fetcher.session_id = 22;
  // Its step was in host memory, lost in this restart with no drain: the fetch says so, and
  // still counts the session.
  EXPECT_EQ(Fetch(*store_, store_->RunId("fetched").value(), 0, 4096, fetcher).status().code(),
            Code::kDataLoss);
  // Both clients die; the run nobody touched is not an orphan of anyone (it stays).
  store_->EndSession(21, /*died=*/true);
  store_->EndSession(22, /*died=*/true);
  store_->RemoveOrphans(std::chrono::seconds(0));
  std::set<std::string> left;
  for (const auto& run : store_->ListRuns()) left.insert(run.spec().name());
  EXPECT_EQ(left, std::set<std::string>{"idle"});
}

// A clean stop records which runs had clients (alive, or dead within orphan_grace); the next
// start gives them orphan_grace to come back. A reconnected client's AttachSession takes its
// runs back; a run none comes back to goes; a run whose client closed cleanly, and a kept run,
// stay. A crash records nothing: the restart above (Open alone) orphans no run.
TEST_F(StoreTest, RunsWithClientsAtAStopAwaitThemAtTheNextStart) {
  v1::RunSpec spec;
  spec.set_bytes_per_step(4096);
  spec.set_layers(v1::LAYERS_DISK_HOST);
  bool created = false;
  uint64_t session = 0;
  for (const char* name : {"returns", "never", "died", "closed", "kept"}) {
    spec.set_name(name);
    spec.set_keep(std::string(name) == "kept");
    ASSERT_TRUE(store_->OpenRun(spec, 0, &created, 0, ++session).ok());
    ASSERT_TRUE(Push(store_->RunId(name).value(), 0, 4096).ok());
  }
  store_->EndSession(3, /*died=*/true);   // "died": an orphan within its grace at the stop
  store_->EndSession(4, /*died=*/false);  // "closed": its client closed its session
  store_->BeginStop();
  Open();
  const uint64_t returns = store_->RunId("returns").value();
  Tenant stranger = Tenant::User(1000);
  stranger.session_id = 40;
  EXPECT_EQ(store_->AttachSession({store_->RunId("never").value()}, stranger), 0u)
      << "another uid's session attached to a run it cannot see";
  Tenant back = Tenant::User(0);
  back.session_id = 41;
  EXPECT_EQ(store_->AttachSession({returns, 987654321}, back), 1u);  // the unknown id is skipped
  store_->RemoveOrphans(std::chrono::seconds(0));
  auto names = [&] {
    std::set<std::string> left;
    for (const auto& run : store_->ListRuns()) left.insert(run.spec().name());
    return left;
  };
  EXPECT_EQ(names(), (std::set<std::string>{"returns", "closed", "kept"}));
  // The client that came back dies: its run goes as any orphan does.
  store_->EndSession(41, /*died=*/true);
  store_->RemoveOrphans(std::chrono::seconds(0));
  EXPECT_EQ(names(), (std::set<std::string>{"closed", "kept"}));
  // Each stop writes the record again: nothing awaits a client now, so the next start orphans
  // nothing.
  store_->BeginStop();
  Open();
  store_->RemoveOrphans(std::chrono::seconds(0));
  EXPECT_EQ(names(), (std::set<std::string>{"closed", "kept"}));
  // A run awaiting its client at the start, whose client came back and then closed cleanly,
  // is no longer awaited after a crash (no stop to write the record again).
  spec.set_name("again");
  spec.set_keep(false);
  ASSERT_TRUE(store_->OpenRun(spec, 0, &created, 0, /*session_id=*/50).ok());
  store_->BeginStop();
  Open();
  back.session_id = 51;
  EXPECT_EQ(store_->AttachSession({store_->RunId("again").value()}, back), 1u);
  store_->EndSession(51, /*died=*/false);
  Open();  // a crash
  store_->RemoveOrphans(std::chrono::seconds(0));
  EXPECT_EQ(names(), (std::set<std::string>{"again", "closed", "kept"}));
}

TEST_F(StoreTest, RejectsLayersTheNodeCannotServe) {
  v1::RunSpec spec;
  spec.set_name("gpu");
  spec.set_bytes_per_step(4096);
  spec.set_layers(v1::LAYERS_DISK_HOST);
  bool created = false;
  Status s = store_->OpenRun(spec, 0, &created, /*device_steps=*/4).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("no device tier"), std::string::npos) << s.ToString();
  Open(/*disk_bytes=*/0);
  spec.set_layers(v1::LAYERS_DISK);
  s = store_->OpenRun(spec, 0, &created).status();
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("need a disk tier"), std::string::npos) << s.ToString();
}

// Three tiers: the client's GPU pool keeps [k, N); the daemon splits [0, k) between disk and
// host exactly as it splits a run without a device layer.
TEST_F(StoreTest, DeviceStepsAreLeftOutOfTheHostAndDiskSplit) {
  constexpr uint64_t kSteps = 40, kBytes = 64 << 10, kDevice = 12;
  v1::RunSpec spec;
  spec.set_name("three-tiers");
  spec.set_steps(kSteps);
  spec.set_bytes_per_step(kBytes);
  spec.set_layers(v1::LAYERS_DISK_HOST_DEVICE);
  bool created = false;
  auto run = store_->OpenRun(spec, 0, &created, kDevice);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  uint64_t host_slots = kHostBytes / kBytes - kStagingBlocks;  // 14
  EXPECT_EQ(run->device_boundary(), kSteps - kDevice);
  EXPECT_EQ(run->host_boundary(), kSteps - kDevice - host_slots);
  EXPECT_EQ(run->host_boundary(), HostBoundary(v1::LAYERS_DISK_HOST_DEVICE, kSteps - kDevice,
                                               kBytes, kHostBytes));
  uint64_t id = run->run_id();
  for (uint64_t t = 0; t < kSteps; ++t) {
    if (t >= run->device_boundary()) {
      ASSERT_TRUE(store_->HoldDeviceStep(id, t, kBytes, /*session_id=*/7, true).ok());
    } else {
      ASSERT_TRUE(Push(id, t, kBytes).ok()) << t;
    }
  }
  store_->WaitTieringIdle();
  auto list = store_->ListSnapshots("three-tiers", &*run);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), kSteps);
  EXPECT_EQ(run->snapshots(), kSteps);
  for (uint64_t t = 0; t < kSteps; ++t) {
    v1::Tier want = t >= run->device_boundary() ? v1::TIER_DEVICE
                    : t >= run->host_boundary() ? v1::TIER_HOST
                                                : v1::TIER_DISK;
    EXPECT_EQ((*list)[t].step(), t);
    EXPECT_EQ((*list)[t].tier(), want) << "step " << t;
  }
  EXPECT_EQ((*list)[kSteps - 1].device_session(), 7u);
}

// A HostDevice run of 4 steps of 4096 bytes whose creating client keeps the newest 2.
uint64_t OpenDeviceRun(Store& store, const std::string& name) {
  v1::RunSpec spec;
  spec.set_name(name);
  spec.set_steps(4);
  spec.set_bytes_per_step(4096);
  spec.set_layers(v1::LAYERS_HOST_DEVICE);
  bool created = false;
  auto run = store.OpenRun(spec, 0, &created, /*device_steps=*/2);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  return run.ok() ? run->run_id() : 0;
}

TEST_F(StoreTest, ADeviceStepIsRecordedOnceAndNeverServedByTheDaemon) {
  uint64_t id = OpenDeviceRun(*store_, "device");
  ASSERT_TRUE(store_->HoldDeviceStep(id, 3, 4096, 5, true).ok());
  EXPECT_EQ(store_->HoldDeviceStep(id, 3, 4096, 5, true).code(), Code::kAlreadyExists);
  EXPECT_EQ(Reserve(*store_, id, 3, 4096).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(store_->HoldDeviceStep(id, 2, 100, 5, true).code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->HoldDeviceStep(id, 9, 4096, 5, true).code(), Code::kOutOfRange);
  ASSERT_TRUE(Push(id, 1, 4096).ok());
  EXPECT_EQ(store_->HoldDeviceStep(id, 1, 4096, 5, true).code(), Code::kAlreadyExists);
  Status fetch = Fetch(*store_, id, 3, 4096).status();
  EXPECT_EQ(fetch.code(), Code::kFailedPrecondition);
  EXPECT_NE(fetch.message().find("GPU memory of session 5"), std::string::npos) << fetch.ToString();
  // Only the holding session forgets it; then the step may be pushed to the daemon.
  EXPECT_EQ(store_->HoldDeviceStep(id, 3, 4096, 6, false).code(), Code::kNotFound);
  ASSERT_TRUE(store_->HoldDeviceStep(id, 3, 4096, 5, false).ok());
  EXPECT_EQ(store_->Locate("device", 3).status().code(), Code::kNotFound);
  ASSERT_TRUE(Push(id, 3, 4096).ok());
  EXPECT_EQ(store_->Locate("device", 3)->tier(), v1::TIER_HOST);
  // A run without a device layer takes no device steps.
  uint64_t plain = OpenRun("plain", 4, 4096, v1::LAYERS_HOST);
  EXPECT_EQ(store_->HoldDeviceStep(plain, 0, 4096, 5, true).code(), Code::kFailedPrecondition);
}

TEST_F(StoreTest, DeviceStepsOfAnEndedSessionAreLostAndSaySo) {
  uint64_t id = OpenDeviceRun(*store_, "device");
  ASSERT_TRUE(store_->HoldDeviceStep(id, 2, 4096, 5, true).ok());
  ASSERT_TRUE(store_->HoldDeviceStep(id, 3, 4096, 8, true).ok());
  store_->EndSession(5);
  EXPECT_EQ(store_->Locate("device", 2)->tier(), v1::TIER_LOST);
  EXPECT_EQ(store_->Locate("device", 3)->tier(), v1::TIER_DEVICE);  // another session's
  Status fetch = Fetch(*store_, id, 2, 4096).status();
  EXPECT_EQ(fetch.code(), Code::kDataLoss);
  EXPECT_NE(fetch.message().find("which ended"), std::string::npos) << fetch.ToString();
  // Deleting the lost step frees the step number.
  ASSERT_TRUE(store_->DeleteSnapshot("device", 2).ok());
  EXPECT_EQ(store_->Locate("device", 2).status().code(), Code::kNotFound);
}

TEST(RunSpecValidation, NamesTheProblem) {
  v1::RunSpec s;
  s.set_name("x");
  s.set_bytes_per_step(6);
  s.set_dtype(v1::DTYPE_FLOAT32);
  Status st = ValidateRunSpec(s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("not a multiple"), std::string::npos) << st.message();
  s.set_bytes_per_step(8);
  s.add_shape(3);
  EXPECT_NE(ValidateRunSpec(s).message().find("shape holds 12 bytes"), std::string::npos);
  s.clear_shape();
  EXPECT_TRUE(ValidateRunSpec(s).ok());
}

// Tenancy inside the store: what one uid sees of another's runs, by name and by id.
TEST_F(StoreTest, ATenantSeesOnlyItsOwnRuns) {
  const Tenant a = Tenant::User(1001), b = Tenant::User(1002);
  v1::RunSpec spec;
  spec.set_name("mine");
  spec.set_steps(4);
  spec.set_bytes_per_step(4096);
  spec.set_keep(true);
  bool created = false;
  auto run = store_->OpenRun(spec, a.uid, &created);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  uint64_t id = run->run_id();
  auto pushed = Reserve(*store_, id, 0, 4096, a);
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  ASSERT_TRUE(store_->CommitPush(*pushed).ok());

  EXPECT_EQ(store_->Locate("mine", 0, b).status().code(), Code::kNotFound);
  EXPECT_TRUE(store_->ListRuns(b).empty());
  EXPECT_EQ(store_->ListSnapshots("mine", &*run, b).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->DeleteSnapshot("mine", 0, b).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->DeleteRun("mine", b).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->CloseRun("mine", b).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->Prefetch("mine", {0}, b).status().code(), Code::kNotFound);
  EXPECT_EQ(Reserve(*store_, id, 1, 4096, b).status().code(), Code::kNotFound);
  EXPECT_EQ(Fetch(*store_, id, 0, 4096, b).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->Locate("1001:mine", 0, b).status().code(), Code::kNotFound);

  // Names are per user: B's "mine" is a run of its own, and says nothing about A's.
  auto bs = store_->OpenRun(spec, b.uid, &created);
  ASSERT_TRUE(bs.ok()) << bs.status().ToString();
  EXPECT_TRUE(created);
  EXPECT_NE(bs->run_id(), id);
  EXPECT_EQ(store_->Locate("mine", 0, b).status().code(), Code::kNotFound);  // B pushed nothing
  EXPECT_EQ(store_->ListRuns(b).size(), 1u);

  // The owner still sees its run byte for byte; an admin sees both and names each as UID:name
  // (a plain name that two users hold is ambiguous, and says so).
  EXPECT_EQ(store_->ListRuns(a).size(), 1u);
  EXPECT_EQ(store_->ListRuns(Tenant::Admin()).size(), 2u);
  EXPECT_TRUE(store_->Locate("mine", 0, a).ok());
  Status ambiguous = store_->Locate("mine", 0, Tenant::Admin()).status();
  EXPECT_EQ(ambiguous.code(), Code::kInvalidArgument);
  EXPECT_NE(ambiguous.message().find("name one as UID:mine"), std::string::npos)
      << ambiguous.ToString();
  EXPECT_TRUE(store_->Locate("1001:mine", 0, Tenant::Admin()).ok());
  EXPECT_TRUE(Fetch(*store_, id, 0, 4096).ok());  // as an admin
  EXPECT_TRUE(store_->DeleteRun("1002:mine", Tenant::Admin()).ok());
  EXPECT_TRUE(store_->Locate("mine", 0, Tenant::Admin()).ok());  // one left: A's
  EXPECT_TRUE(store_->DeleteRun("mine", a).ok());
}

// A tenant above its share of the host tier has its own oldest steps written out first, even
// when another tenant's steps are older.
TEST_F(StoreTest, ATenantAboveItsHostShareMovesToDiskFirst) {
  host_share_ = 0.5;
  Open();
  const Tenant a = Tenant::User(1001), b = Tenant::User(1002);
  constexpr uint64_t kStep = 64 << 10;
  auto open = [&](const Tenant& who, const char* name) {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_bytes_per_step(kStep);  // steps unknown: they stay in host until room is needed
    spec.set_keep(true);
    bool created = false;
    auto run = store_->OpenRun(spec, who.uid, &created);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? run->run_id() : 0;
  };
  auto push = [&](const Tenant& who, uint64_t id, uint64_t step) {
    Result<Store::PushTicket> ticket = Reserve(*store_, id, step, kStep, who);
    ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
    std::memset(ticket->block->data(), static_cast<int>(step), kStep);
    ASSERT_TRUE(store_->CommitPush(*ticket).ok());
  };
  uint64_t bs = open(b, "b-run"), as = open(a, "a-run");
  for (uint64_t t = 0; t < 2; ++t) push(b, bs, t);   // B's are the oldest steps
  for (uint64_t t = 0; t < 11; ++t) push(a, as, t);  // A: 704 KiB, over its 512 KiB share
  for (uint64_t t = 2; t < 6; ++t) push(b, bs, t);   // B needs room
  store_->WaitTieringIdle();
  EXPECT_EQ(TierOf("1002:b-run", 0), v1::TIER_HOST);
  EXPECT_EQ(TierOf("1002:b-run", 1), v1::TIER_HOST);
  EXPECT_EQ(TierOf("1001:a-run", 0), v1::TIER_DISK);
}

TEST_F(StoreTest, AQuotaBoundsATenantsBytesIncludingPushesInFlight) {
  const Tenant a = Tenant::User(1001), b = Tenant::User(1002);
  store_->SetQuota(a.uid, 3 * 4096);
  auto open = [&](const std::string& name, const Tenant& who) {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_steps(8);
    spec.set_bytes_per_step(4096);
    bool created = false;
    return store_->OpenRun(spec, who.uid, &created).value().run_id();
  };
  uint64_t ra = open("a-run", a), rb = open("b-run", b);
  auto push = [&](uint64_t id, uint64_t step, const Tenant& who) -> Result<Store::PushTicket> {
    return Reserve(*store_, id, step, 4096, who);
  };
  ASSERT_TRUE(store_->CommitPush(push(ra, 0, a).value()).ok());
  auto in_flight_1 = push(ra, 1, a);
  auto in_flight_2 = push(ra, 2, a);
  ASSERT_TRUE(in_flight_1.ok() && in_flight_2.ok());
  auto over = push(ra, 3, a);  // 1 stored + 2 in flight + 1 > 3 steps
  ASSERT_EQ(over.status().code(), Code::kResourceExhausted);
  EXPECT_NE(over.status().message().find("quota"), std::string::npos) << over.status().message();
  EXPECT_NE(over.status().message().find("1001"), std::string::npos);
  store_->AbortPush(*in_flight_2);
  auto again = push(ra, 3, a);  // room again once a push in flight went away
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(store_->CommitPush(*again).ok());
  EXPECT_TRUE(store_->CommitPush(*in_flight_1).ok());
  for (uint64_t t = 0; t < 6; ++t) {  // b has no quota
    auto tb = push(rb, t, b);
    ASSERT_TRUE(tb.ok()) << tb.status().ToString();
    EXPECT_TRUE(store_->CommitPush(*tb).ok());
  }
  EXPECT_EQ(push(ra, 4, a).status().code(), Code::kResourceExhausted);
  EXPECT_EQ(store_->TenantUsage(a.uid).quota, 3u * 4096);
  EXPECT_EQ(store_->TenantUsage(a.uid).runs, 1u);
  store_->SetQuota(a.uid, 0);  // no limit
  auto unlimited = push(ra, 4, a);
  ASSERT_TRUE(unlimited.ok());
  EXPECT_TRUE(store_->CommitPush(*unlimited).ok());
}

// A delete leaves the index at once and the catalog through its writer, with no lock held
// across RocksDB; what it answers still holds: the run's spool files go once its records have,
// and a restart finds neither the run nor its steps.
TEST_F(StoreTest, ARunDeletedWithStepsOnDiskLeavesNoFileAndIsGoneAfterARestart) {
  auto spool_files = [&] {
    size_t n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/spool")) {
      n += e.is_regular_file() && e.path().filename() != DiskTier::kMarker;
    }
    return n;
  };
  uint64_t id = OpenRun("r", 4, 4096, v1::LAYERS_DISK);
  for (uint64_t t = 0; t < 4; ++t) ASSERT_TRUE(Push(id, t, 4096).ok()) << t;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((!OnDisk("r", 0) || !OnDisk("r", 3)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(OnDisk("r", 0) && OnDisk("r", 3));
  ASSERT_EQ(spool_files(), 4u);
  auto freed = store_->DeleteRun("r");
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_EQ(*freed, 4u * 4096);
  EXPECT_EQ(store_->Locate("r", 0).status().code(), Code::kNotFound);
  while (spool_files() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(spool_files(), 0u);
  Open();  // a restart: the catalog as the delete left it
  EXPECT_TRUE(store_->ListRuns(Tenant::Admin()).empty());
  EXPECT_EQ(store_->Locate("r", 0).status().code(), Code::kNotFound);
}

// A push to an `overwrite` run replaces the stored step without waiting on the catalog: the
// new bytes are served, and after a restart the catalog holds the new step, not the old one.
TEST_F(StoreTest, AnOverwritingPushIsRecordedBehindTheDeleteOfTheStepItReplaces) {
  v1::RunSpec spec;
  spec.set_name("o");
  spec.set_steps(2);
  spec.set_bytes_per_step(4096);
  spec.set_layers(v1::LAYERS_HOST);
  spec.set_keep(true);
  spec.set_overwrite(true);
  bool created = false;
  auto run = store_->OpenRun(spec, 0, &created);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const uint64_t id = run->run_id();
  ASSERT_TRUE(Push(id, 1, 4096).ok());
  // The same step again, with another step's pattern: what a fetch returns tells which.
  auto t = Reserve(*store_, id, 1, 4096);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  char* p = static_cast<char*>(t->block->data());
  for (size_t i = 0; i < 4096; ++i) p[i] = Pattern(0, i);
  ASSERT_TRUE(store_->CommitPush(*t).ok());
  auto g = Fetch(*store_, id, 1, 4096);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(std::memcmp(g->block->data(), p, 4096), 0);
  const uint64_t expected = Checksum(p, 4096);
  g = Result<Store::FetchGrant>(Status::Aborted("released"));
  t = Result<Store::PushTicket>(Status::Aborted("released"));
  // Its checksum recorded (the checksum thread's), so the record tells the two copies apart.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto recorded = [&] {
    auto where = store_->Locate("o", 1);
    return where.ok() && where->checksum_state() == v1::CHECKSUM_RECORDED;
  };
  while (!recorded() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(recorded());
  EXPECT_EQ(store_->Locate("o", 1)->checksum(), expected);
  // Host-tier steps do not survive a restart, but their records do: the new one.
  Open();
  auto after = store_->Locate("o", 1);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->checksum(), expected);
}

}  // namespace
}  // namespace adjsnap
