// The store through its front door: push, commit, fetch, delete, demotion and restart, drains,
// waits, faults on the spool, and the checksum owner as the store drives it.
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

TEST_F(StoreTest, AStepIsVisibleOnlyAfterCommit) {
  uint64_t id = OpenRun("r", 4, 4096);
  auto t = Reserve(*store_, id, 1, 4096);
  ASSERT_TRUE(t.ok());
  // Between reserve and commit Locate says the push is in flight, never that it is stored nor
  // that it never was; it is not listed and cannot be fetched.
  auto in_flight = store_->Locate("r", 1);
  ASSERT_TRUE(in_flight.ok()) << in_flight.status().ToString();
  EXPECT_EQ(in_flight->tier(), v1::TIER_IN_FLIGHT);
  v1::RunInfo info;
  EXPECT_TRUE(store_->ListSnapshots("r", &info)->empty());
  EXPECT_EQ(Reserve(*store_, id, 1, 4096).status().code(), Code::kAlreadyExists);
  ASSERT_TRUE(store_->CommitPush(*t).ok());
  auto stored = store_->Locate("r", 1);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->tier(), v1::TIER_HOST);
}

// The UCX thread commits pushes and releases consumed steps. Neither waits for the catalog:
// while its writer is held, a commit returns at once (its second half comes once the record is
// written, and the step is stored when the caller runs it), and another step is fetched and
// released meanwhile, its record deleted afterwards.
TEST_F(StoreTest, CommitsAndReleasesLeaveTheirRecordsToTheCatalogsWriter) {
  uint64_t id = OpenRun("r", 4, 4096, v1::LAYERS_DEFAULT, /*keep=*/false);
  ASSERT_TRUE(Push(id, 0, 4096).ok());
  auto t = Reserve(*store_, id, 1, 4096);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (size_t i = 0; i < 4096; ++i) static_cast<char*>(t->block->data())[i] = Pattern(1, i);

  CatalogStall stall(*catalog_);
  std::promise<Store::Install> recorded;
  std::thread::id caller = std::this_thread::get_id(), writer;
  store_->CommitPush(*t, [&](Store::Install install) {
    writer = std::this_thread::get_id();
    recorded.set_value(std::move(install));
  });
  std::future<Store::Install> second_half = recorded.get_future();
  EXPECT_EQ(second_half.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  EXPECT_EQ(TierOf("r", 1), v1::TIER_IN_FLIGHT);  // not stored before its record is written
  ASSERT_TRUE(FetchExact(id, 0, 4096).ok());      // served and released meanwhile
  EXPECT_EQ(TierOf("r", 0), v1::TIER_UNSPECIFIED);

  stall.Release();
  Store::Install install = second_half.get();
  EXPECT_NE(writer, caller);
  EXPECT_EQ(TierOf("r", 1), v1::TIER_IN_FLIGHT);  // written; stored once the caller installs
  Status s = install();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(TierOf("r", 1), v1::TIER_HOST);
  ASSERT_TRUE(FetchExact(id, 1, 4096).ok());
  catalog_->Flush();
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snaps;
  ASSERT_TRUE(catalog_->LoadAll(&runs, &snaps).ok());
  EXPECT_TRUE(snaps.empty()) << snaps.size() << " records of released steps remain";
}

// A run deleted while a commit's record is queued: the delete, queued after it, removes it
// too, and the commit is answered NOT_FOUND; no record of the run remains.
TEST_F(StoreTest, ARunDeletedWhileACommitIsRecordedKeepsNoRecordOfIt) {
  uint64_t id = OpenRun("r", 4, 4096);
  auto t = Reserve(*store_, id, 1, 4096);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  CatalogStall stall(*catalog_);
  std::promise<Store::Install> recorded;
  store_->CommitPush(*t, [&](Store::Install install) { recorded.set_value(std::move(install)); });
  uint64_t queued = catalog_->writer_counts().queued;
  std::thread deleter([&] { EXPECT_TRUE(store_->DeleteRun("r").ok()); });
  // The delete waits for its record, queued behind the commit's.
  while (catalog_->writer_counts().queued == queued) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stall.Release();
  deleter.join();
  Status s = recorded.get_future().get()();
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snaps;
  ASSERT_TRUE(catalog_->LoadAll(&runs, &snaps).ok());
  EXPECT_TRUE(runs.empty());
  EXPECT_TRUE(snaps.empty());
}

TEST_F(StoreTest, AnAbortedPushLeavesNoTraceAndFreesItsMemory) {
  uint64_t id = OpenRun("r", 4, 4096);
  {
    auto t = Reserve(*store_, id, 2, 4096);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(tier_->used(), 4096u);
    store_->AbortPush(*t);
  }
  EXPECT_EQ(tier_->used(), 0u);
  EXPECT_EQ(store_->Locate("r", 2).status().code(), Code::kNotFound);
  EXPECT_TRUE(Reserve(*store_, id, 2, 4096).ok());  // the step can be pushed again
}

TEST_F(StoreTest, RecordsTheChecksumOfTheStoredBytes) {
  uint64_t id = OpenRun("r", 1, 10000);
  auto t = Reserve(*store_, id, 0, 10000);
  ASSERT_TRUE(t.ok());
  std::memset(t->block->data(), 0x5a, 10000);
  ASSERT_TRUE(store_->CommitPush(*t).ok());
  store_->WaitChecksumsIdle();
  auto where = store_->Locate("r", 0);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->checksum_state(), v1::CHECKSUM_RECORDED);
  EXPECT_EQ(where->checksum(), Checksum(t->block->data(), 10000));
}

// The checksum thread holds off while a push is in flight (its reads would slow the copy):
// a committed step stays `pending` until the data plane is quiet, or for at most kMaxDelay.
TEST_F(StoreTest, ChecksumsWaitForTheDataPlaneToBeQuietButNotForever) {
  constexpr uint64_t kStep = 64 << 10;  // four steps fit the host tier: none is demoted
  uint64_t id = OpenRun("r", 8, kStep);
  auto state = [&](uint64_t step) {
    auto where = store_->Locate("r", step);
    // -1: no such step stored (none, or a push still in flight)
    return where.ok() && where->tier() != v1::TIER_IN_FLIGHT
               ? static_cast<int>(where->checksum_state())
               : -1;
  };
  auto recorded_within = [&](uint64_t step, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (state(step) != v1::CHECKSUM_RECORDED && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return state(step) == v1::CHECKSUM_RECORDED;
  };
  ASSERT_TRUE(Push(id, 0, kStep).ok());
  auto in_flight = Reserve(*store_, id, 1, kStep);  // a push being copied
  ASSERT_TRUE(in_flight.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(state(0), v1::CHECKSUM_PENDING) << "hashed while a push was in flight";
  ASSERT_TRUE(store_->CommitPush(*in_flight).ok());
  EXPECT_TRUE(recorded_within(0, std::chrono::seconds(10)));  // quiet now
  EXPECT_TRUE(recorded_within(1, std::chrono::seconds(10)));
  std::vector<char> bytes(kStep);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = Pattern(0, i);
  EXPECT_EQ(store_->Locate("r", 0)->checksum(), Checksum(bytes.data(), bytes.size()));

  // A node whose pushes never pause still gets its checksums, after kMaxDelay (10 s).
  auto endless = Reserve(*store_, id, 2, kStep);
  ASSERT_TRUE(endless.ok());
  ASSERT_TRUE(Push(id, 3, kStep).ok());
  EXPECT_TRUE(recorded_within(3, std::chrono::seconds(30)));
  EXPECT_EQ(state(2), -1);  // still in flight: not a step yet
  store_->AbortPush(*endless);
}

TEST_F(StoreTest, HostStepsFromAnEarlierStartAreLost) {
  uint64_t id = OpenRun("r", 2, 4096);
  ASSERT_TRUE(Push(id, 0, 4096).ok());
  Open();  // a new daemon start over the same catalog
  auto where = store_->Locate("r", 0);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->tier(), v1::TIER_LOST);
  EXPECT_EQ(Fetch(*store_, id, 0, 4096).status().code(), Code::kDataLoss);
  EXPECT_EQ(store_->Counters().lost_snapshots, 1u);
  ASSERT_TRUE(store_->DeleteRun("r").ok());
  EXPECT_EQ(store_->Counters().lost_snapshots, 0u);
}

TEST_F(StoreTest, DeletingARunDuringAFetchKeepsTheFetchedBytes) {
  uint64_t id = OpenRun("r", 1, 4096);
  ASSERT_TRUE(Push(id, 0, 4096).ok());
  store_->WaitChecksumsIdle();  // the checksum job holds its own reference until done
  auto grant = Fetch(*store_, id, 0, 4096);
  ASSERT_TRUE(grant.ok());
  ASSERT_EQ(*store_->DeleteRun("r"), 4096u);
  EXPECT_EQ(static_cast<char*>(grant->block->data())[100], Pattern(0, 100));
  EXPECT_EQ(tier_->used(), 4096u);  // still held by the fetch
  grant = Result<Store::FetchGrant>(Status::Aborted("released"));
  EXPECT_EQ(tier_->used(), 0u);
}

TEST_F(StoreTest, ADeletedStepFreesItsMemoryAndCanBePushedAgain) {
  uint64_t id = OpenRun("r", 2, 4096);
  ASSERT_TRUE(Push(id, 1, 4096).ok());
  store_->WaitChecksumsIdle();
  EXPECT_EQ(*store_->DeleteSnapshot("r", 1), 4096u);
  EXPECT_EQ(tier_->used(), 0u);
  EXPECT_EQ(store_->Locate("r", 1).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->DeleteSnapshot("r", 1).status().code(), Code::kNotFound);
  EXPECT_TRUE(Push(id, 1, 4096).ok());
}

// overwrite: a push of a stored step replaces it in the same request (the checkpoint slot a
// schedule reuses), on either tier; a fetch of the old copy in flight keeps its bytes; without
// overwrite the push is refused, and overwrite with a Device layer is refused at open.
TEST_F(StoreTest, AnOverwriteRunReplacesAStoredStepWithOnePush) {
  auto open = [&](const std::string& name, v1::Layers layers, bool overwrite) {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_steps(2);
    spec.set_bytes_per_step(4096);
    spec.set_layers(layers);
    spec.set_keep(true);
    spec.set_overwrite(overwrite);
    bool created = false;
    return store_->OpenRun(spec, 0, &created);
  };
  auto push_filled = [&](uint64_t id, uint64_t step, char fill) -> Status {
    ADJSNAP_ASSIGN_OR_RETURN(Store::PushTicket t, Reserve(*store_, id, step, 4096));
    std::memset(t.block->data(), fill, 4096);
    return store_->CommitPush(t);
  };
  auto first_byte = [&](uint64_t id, uint64_t step) {
    auto g = Fetch(*store_, id, step, 4096);
    return g.ok() ? static_cast<char*>(g->block->data())[0] : '?';
  };
  for (v1::Layers layers : {v1::LAYERS_HOST, v1::LAYERS_DISK}) {
    SCOPED_TRACE(LayersName(layers));
    std::string name = layers == v1::LAYERS_HOST ? "host-slots" : "disk-slots";
    auto run = open(name, layers, true);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    uint64_t id = run->run_id();
    ASSERT_TRUE(push_filled(id, 0, 'a').ok());
    store_->WaitTieringIdle();
    EXPECT_EQ(OnDisk(name, 0), layers == v1::LAYERS_DISK);
    auto old = Fetch(*store_, id, 0, 4096);  // a fetch of the old copy, in flight
    ASSERT_TRUE(old.ok());
    ASSERT_TRUE(push_filled(id, 0, 'b').ok());
    EXPECT_EQ(static_cast<char*>(old->block->data())[0], 'a');
    old = Result<Store::FetchGrant>(Status::Aborted("released"));
    store_->WaitTieringIdle();
    EXPECT_EQ(first_byte(id, 0), 'b');
    v1::RunInfo info;
    auto listed = store_->ListSnapshots(name, &info);
    ASSERT_TRUE(listed.ok());
    EXPECT_EQ(listed->size(), 1u);  // one copy of the step, not two
    EXPECT_EQ(info.stored_bytes(), 4096u);
    ASSERT_TRUE(push_filled(id, 0, 'c').ok());  // and again
    store_->WaitTieringIdle();
    EXPECT_EQ(first_byte(id, 0), 'c');
    Status wrong_size = Reserve(*store_, id, 0, 100).status();  // refused: the copy stays
    EXPECT_EQ(wrong_size.code(), Code::kInvalidArgument) << wrong_size.ToString();
    ASSERT_TRUE(store_->CloseRun(name).ok());
    Status closed = push_filled(id, 0, 'd');
    EXPECT_EQ(closed.code(), Code::kFailedPrecondition) << closed.ToString();
    EXPECT_EQ(first_byte(id, 0), 'c');
  }
  size_t spool_files = 0;  // the disk run's one step: the replaced copies' files are gone
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/spool")) {
    spool_files += e.is_regular_file() && e.path().filename() != DiskTier::kMarker &&
                   e.path().filename().string().find("tmp") == std::string::npos;
  }
  EXPECT_EQ(spool_files, 1u);

  auto plain = open("plain", v1::LAYERS_HOST, false);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(push_filled(plain->run_id(), 0, 'a').ok());
  Status again = push_filled(plain->run_id(), 0, 'b');
  EXPECT_EQ(again.code(), Code::kAlreadyExists) << again.ToString();
  EXPECT_EQ(first_byte(plain->run_id(), 0), 'a');

  auto reopened = open("plain", v1::LAYERS_HOST, true);
  EXPECT_EQ(reopened.status().code(), Code::kAlreadyExists);
  EXPECT_NE(reopened.status().message().find("overwrite"), std::string::npos)
      << reopened.status().ToString();
  auto device = open("device", v1::LAYERS_HOST_DEVICE, true);
  EXPECT_EQ(device.status().code(), Code::kInvalidArgument);
  EXPECT_NE(device.status().message().find("overwrite with layers HostDevice"),
            std::string::npos)
      << device.status().ToString();
}

TEST_F(StoreTest, DeclaredRunsPlaceTheOldestStepsOnDiskAndTheNewestInHost) {
  constexpr uint64_t kStep = 64 << 10, kSteps = 48;  // 3 MiB through a 1 MiB host tier
  uint64_t id = OpenRun("r", kSteps, kStep);
  uint64_t j = store_->ListRuns()[0].host_boundary();
  EXPECT_EQ(j, kSteps - (kHostBytes / kStep - kStagingBlocks));
  for (uint64_t t = 0; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  for (uint64_t t = 0; t < kSteps; ++t) {
    EXPECT_EQ(TierOf("r", t), t < j ? v1::TIER_DISK : v1::TIER_HOST) << "step " << t;
  }
  for (uint64_t t = kSteps; t-- > 0;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
}

// Runs sharing the host tier plan their resident steps against each other: a second declared
// run keeps in host only what the first has not planned to keep there, and both runs' steps
// come back exact.
TEST_F(StoreTest, DeclaredRunsSharingTheHostTierGetBoundariesComputedAgainstEachOther) {
  constexpr uint64_t kStep = 64 << 10;  // 16 blocks in the 1 MiB host tier
  uint64_t a = OpenRun("a", 8, kStep);   // all 8 resident: 512 KiB planned
  uint64_t b = OpenRun("b", 16, kStep);  // the other 512 KiB, less two staging blocks: 6
  auto runs = store_->ListRuns();
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& r : runs) {
    EXPECT_EQ(r.host_boundary(), r.spec().name() == "a" ? 0u : 16u - 6u) << r.spec().name();
  }
  for (uint64_t t = 0; t < 8; ++t) ASSERT_TRUE(Push(a, t, kStep).ok()) << t;
  for (uint64_t t = 0; t < 16; ++t) ASSERT_TRUE(Push(b, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  for (uint64_t t = 16; t-- > 0;) ASSERT_TRUE(FetchExact(b, t, kStep).ok()) << t;
  for (uint64_t t = 8; t-- > 0;) ASSERT_TRUE(FetchExact(a, t, kStep).ok()) << t;
}

TEST_F(StoreTest, WithoutADeclaredCountAFullHostTierDemotesItsOldestSteps) {
  constexpr uint64_t kStep = 64 << 10, kSteps = 40;
  uint64_t id = OpenRun("r", 0, kStep);
  for (uint64_t t = 0; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitTieringIdle();
  // Host-resident steps form one suffix: every disk step is older than every host step.
  uint64_t lowest_host = kSteps;
  for (uint64_t t = kSteps; t-- > 0;) {
    if (TierOf("r", t) == v1::TIER_HOST) lowest_host = t;
  }
  ASSERT_LT(lowest_host, kSteps);
  ASSERT_GT(lowest_host, 0u);
  for (uint64_t t = 0; t < kSteps; ++t) {
    EXPECT_EQ(TierOf("r", t), t < lowest_host ? v1::TIER_DISK : v1::TIER_HOST) << t;
  }
  for (uint64_t t = kSteps; t-- > 0;) ASSERT_TRUE(FetchExact(id, t, kStep).ok()) << t;
}

TEST_F(StoreTest, ReadOnceReleasesAFetchedStepUnlessTheRunKeepsIt) {
  uint64_t once = OpenRun("once", 2, 4096, v1::LAYERS_DEFAULT, /*keep=*/false);
  uint64_t kept = OpenRun("kept", 2, 4096, v1::LAYERS_DEFAULT, /*keep=*/true);
  ASSERT_TRUE(Push(once, 1, 4096).ok());
  ASSERT_TRUE(Push(kept, 1, 4096).ok());
  ASSERT_TRUE(FetchExact(once, 1, 4096).ok());
  ASSERT_TRUE(FetchExact(kept, 1, 4096).ok());
  Status again = Fetch(*store_, once, 1, 4096).status();
  EXPECT_EQ(again.code(), Code::kNotFound);
  EXPECT_NE(again.message().find("read once and released"), std::string::npos) << again.ToString();
  EXPECT_TRUE(FetchExact(kept, 1, 4096).ok());
  EXPECT_EQ(store_->Counters().released, 1u);
}

TEST_F(StoreTest, DiskStepsSurviveARestartAndHostStepsAreLost) {
  constexpr uint64_t kStep = 64 << 10, kSteps = 24;
  uint64_t id = OpenRun("r", kSteps, kStep);
  uint64_t j = store_->ListRuns()[0].host_boundary();
  ASSERT_GT(j, 0u);
  for (uint64_t t = 0; t < kSteps; ++t) ASSERT_TRUE(Push(id, t, kStep).ok());
  store_->WaitTieringIdle();
  Open();
  // The run's stored bytes count the recovered disk steps only.
  EXPECT_EQ(store_->ListRuns()[0].stored_bytes(), j * kStep);
  for (uint64_t t = 0; t < kSteps; ++t) {
    if (t < j) {
      EXPECT_TRUE(FetchExact(id, t, kStep).ok()) << t;
    } else {
      EXPECT_EQ(Fetch(*store_, id, t, kStep).status().code(), Code::kDataLoss) << t;
    }
  }
}

TEST_F(StoreTest, ACorruptDiskFileIsReportedLostNeverReturned) {
  constexpr uint64_t kStep = 64 << 10;
  uint64_t id = OpenRun("r", 1, kStep, v1::LAYERS_DISK);
  ASSERT_TRUE(Push(id, 0, kStep).ok());
  store_->WaitTieringIdle();
  ASSERT_EQ(TierOf("r", 0), v1::TIER_DISK);
  ASSERT_TRUE(FlipSpoolByte(1000));  // behind the daemon's back
  Status s = Fetch(*store_, id, 0, kStep).status();
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  EXPECT_EQ(TierOf("r", 0), v1::TIER_LOST);
}

// Through the disk tier's I/O seam: a disk that fails a read (EIO) fails that fetch with the
// file and the cause, never with wrong bytes: the step is lost (a read error is a verdict on
// the file: tests/daemon/store/spool_failure_test.cc), the other run's steps come back exact.
TEST_F(StoreTest, AnEioOnADiskReadFailsThatFetchOnlyNamingTheCause) {
  testing::FaultySpoolIo& io = faulty_io_;
  Open(64 << 20, &io);
  constexpr uint64_t kStep = 64 << 10;
  uint64_t on_disk = OpenRun("on-disk", 2, kStep, v1::LAYERS_DISK);
  uint64_t in_host = OpenRun("in-host", 2, kStep, v1::LAYERS_HOST);
  for (uint64_t t = 0; t < 2; ++t) {
    ASSERT_TRUE(Push(on_disk, t, kStep).ok());
    ASSERT_TRUE(Push(in_host, t, kStep).ok());
  }
  store_->WaitTieringIdle();
  ASSERT_EQ(TierOf("on-disk", 1), v1::TIER_DISK);
  // Step 1's file only: the read-ahead the fetch starts (step 0) reads a good file.
  io.Fail(testing::FaultySpoolIo::kRead, EIO, 0,
          dir_ + "/spool/run-" + std::to_string(on_disk) + "/step-1-");
  Status s = FetchExact(on_disk, 1, kStep);
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("Input/output error (EIO)"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("run-" + std::to_string(on_disk)), std::string::npos) << s.ToString();
  for (uint64_t t = 2; t-- > 0;) EXPECT_TRUE(FetchExact(in_host, t, kStep).ok()) << t;
  EXPECT_GT(io.failures(), 0u);
  io.Heal();
  EXPECT_EQ(TierOf("on-disk", 1), v1::TIER_LOST);
  Status other = FetchExact(on_disk, 0, kStep);
  EXPECT_TRUE(other.ok()) << other.ToString();
}

TEST_F(StoreTest, AFullDiskFailsThePushThatNeedsItAndLosesNothingStored) {
  constexpr uint64_t kStep = 64 << 10;
  Open(/*disk_bytes=*/4 * kStep);
  uint64_t id = OpenRun("r", 0, kStep, v1::LAYERS_DEFAULT, /*keep=*/false);
  uint64_t t = 0;
  Status s;
  for (; t < 64; ++t) {
    s = Push(id, t, kStep);
    if (!s.ok()) break;
  }
  ASSERT_EQ(s.code(), Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("disk tier is full"), std::string::npos) << s.ToString();
  // Host (16 blocks) and disk (4 files) hold what fits; all of it reads back.
  EXPECT_EQ(t, kHostBytes / kStep + 4);
  for (uint64_t k = t; k-- > 0;) {
    Status f = FetchExact(id, k, kStep);
    EXPECT_TRUE(f.ok()) << k << ": " << f.ToString();
  }
}

TEST_F(StoreTest, ABlockingRunWaitsForRoomInsteadOfFailing) {
  constexpr uint64_t kStep = 64 << 10;
  Open(/*disk_bytes=*/0);  // host only: nothing can be demoted
  v1::RunSpec spec;
  spec.set_name("r");
  spec.set_bytes_per_step(kStep);
  spec.set_block_when_full(true);
  bool created = false;
  uint64_t id = store_->OpenRun(spec, 0, &created)->run_id();
  for (uint64_t t = 0; t < kHostBytes / kStep; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  auto promise = std::make_shared<std::promise<Result<Store::PushTicket>>>();
  bool waits = store_->BeginPush(id, 99, kStep, [promise](Result<Store::PushTicket> t) {
    promise->set_value(std::move(t));
  });
  ASSERT_TRUE(waits);  // parked, not refused
  auto granted = promise->get_future();
  EXPECT_EQ(granted.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  ASSERT_TRUE(store_->DeleteSnapshot("r", 0).ok());  // room appears
  ASSERT_EQ(granted.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Result<Store::PushTicket> t = granted.get();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(store_->CommitPush(*t).ok());
}

// The room a deleted step leaves comes free only when the last holder of its bytes lets go (here
// a fetch still reading them, as a lease would): that release, outside the store, must still
// reach the push that waits for the room.
TEST_F(StoreTest, AWaitingPushGetsTheRoomOfABlockReleasedOutsideTheStore) {
  constexpr uint64_t kStep = 64 << 10;
  Open(/*disk_bytes=*/0);
  v1::RunSpec spec;
  spec.set_name("r");
  spec.set_bytes_per_step(kStep);
  spec.set_block_when_full(true);
  spec.set_keep(true);
  bool created = false;
  uint64_t id = store_->OpenRun(spec, 0, &created)->run_id();
  for (uint64_t t = 0; t < kHostBytes / kStep; ++t) ASSERT_TRUE(Push(id, t, kStep).ok()) << t;
  store_->WaitChecksumsIdle();  // the checksum thread holds no block now
  auto reading = Fetch(*store_, id, 0, kStep);
  ASSERT_TRUE(reading.ok()) << reading.status().ToString();
  ASSERT_TRUE(store_->DeleteSnapshot("r", 0).ok());  // the store lets go; the reader does not
  auto promise = std::make_shared<std::promise<Result<Store::PushTicket>>>();
  ASSERT_TRUE(store_->BeginPush(id, 99, kStep, [promise](Result<Store::PushTicket> t) {
    promise->set_value(std::move(t));
  }));
  auto granted = promise->get_future();
  EXPECT_EQ(granted.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  reading->block.reset();  // the last reference: the block goes back to the tier
  ASSERT_EQ(granted.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Result<Store::PushTicket> t = granted.get();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(store_->CommitPush(*t).ok());
}

TEST_F(StoreTest, APrefetchHintReadsDiskStepsIntoHostMemory) {
  constexpr uint64_t kStep = 64 << 10;
  uint64_t id = OpenRun("r", 4, kStep, v1::LAYERS_DISK);
  for (uint64_t t = 0; t < 4; ++t) ASSERT_TRUE(Push(id, t, kStep).ok());
  store_->WaitTieringIdle();
  ASSERT_EQ(TierOf("r", 2), v1::TIER_DISK);
  EXPECT_EQ(*store_->Prefetch("r", {1, 2, 7}), 2u);  // 7 was never stored: skipped
  store_->WaitTieringIdle();
  EXPECT_EQ(TierOf("r", 2), v1::TIER_HOST);
  EXPECT_TRUE(OnDisk("r", 2));  // the durable copy stays
  EXPECT_EQ(TierOf("r", 3), v1::TIER_DISK);
  ASSERT_TRUE(FetchExact(id, 2, kStep).ok());
  EXPECT_EQ(store_->Counters().prefetch_hits, 1u);
  EXPECT_EQ(store_->Prefetch("nope", {1}).status().code(), Code::kNotFound);
}

// Which steps the store hashed, by their first byte (Pattern(step, 0)); the first hash of
// `held_step` blocks until Release.
struct HashLog {
  explicit HashLog(uint64_t held_step) : held(Pattern(held_step, 0)) {}
  void OnHash(const void* data, uint64_t) {
    char first = *static_cast<const char*>(data);
    std::shared_future<void> wait;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (++counts[first] == 1 && first == held) {
        entered.set_value();
        wait = released;
      } else if (first != held) {
        other.notify_all();
      }
    }
    if (wait.valid()) wait.wait();
  }
  int Count(uint64_t step) {
    std::lock_guard<std::mutex> lock(mu);
    return counts[Pattern(step, 0)];
  }
  // Waits until `step` was hashed at least once.
  bool WaitHashed(uint64_t step) {
    std::unique_lock<std::mutex> lock(mu);
    return other.wait_for(lock, std::chrono::seconds(10),
                          [&] { return counts[Pattern(step, 0)] > 0; });
  }
  const char held;
  std::mutex mu;
  std::map<char, int> counts;
  std::condition_variable other;
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
};

// A demotion asks the checksum owner for the step's checksum: one being computed by the checksum
// thread is waited for, one still queued is computed once by the demotion and the queued job
// dropped. Each block is hashed once; the reads back verify through the same owner.
TEST_F(StoreTest, ADemotionNeverHashesAStepTheChecksumThreadHashesOrHasQueued) {
  auto log = std::make_shared<HashLog>(/*held_step=*/0);
  on_hash_ = [log](const void* data, uint64_t bytes) { log->OnHash(data, bytes); };
  Open();
  constexpr uint64_t kStep = 16 << 10;
  uint64_t id = OpenRun("r", 0, kStep);  // N unknown: both steps stay in host memory
  ASSERT_TRUE(Push(id, 0, kStep).ok());
  auto entered = log->entered.get_future();
  ASSERT_EQ(entered.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  // The checksum thread is hashing step 0 now; step 1's checksum waits in its queue.
  ASSERT_TRUE(Push(id, 1, kStep).ok());
  std::promise<Result<Store::DrainResult>> drained;
  store_->Drain([&](Result<Store::DrainResult> r) { drained.set_value(r); });
  // Step 1's demotion takes its queued checksum and computes it; step 0's waits.
  ASSERT_TRUE(log->WaitHashed(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  log->release.set_value();
  auto done = drained.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Result<Store::DrainResult> r = done.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->moved, 2u);
  store_->WaitChecksumsIdle();
  EXPECT_EQ(log->Count(0), 1);
  EXPECT_EQ(log->Count(1), 1);
  EXPECT_EQ(store_->hashes(), 2u);
  std::vector<char> bytes(kStep);
  for (uint64_t step : {0, 1}) {
    for (size_t i = 0; i < kStep; ++i) bytes[i] = Pattern(step, i);
    auto where = store_->Locate("r", step);
    ASSERT_TRUE(where.ok());
    EXPECT_TRUE(where->on_disk());
    EXPECT_EQ(where->checksum_state(), v1::CHECKSUM_RECORDED);
    EXPECT_EQ(where->checksum(), Checksum(bytes.data(), kStep)) << "step " << step;
  }
  ASSERT_TRUE(FetchExact(id, 0, kStep).ok());
  ASSERT_TRUE(FetchExact(id, 1, kStep).ok());
  EXPECT_EQ(store_->hashes(), 4u);  // each read from disk verified once
}

// A drain ends once the steps stored when it began are on disk, though a job keeps pushing
// (the soak found `adjsnap drain` chasing the new steps of 16 busy clients for ever).
TEST_F(StoreTest, ADrainWhilePushesGoOnEndsOnceTheStepsStoredBeforeItAreOnDisk) {
  constexpr uint64_t kStep = 16 << 10;
  uint64_t before = OpenRun("before", 0, kStep);
  for (uint64_t t = 0; t < 4; ++t) ASSERT_TRUE(Push(before, t, kStep).ok()) << t;
  uint64_t busy = OpenRun("busy", 0, kStep);
  auto drained = std::make_shared<std::promise<Result<Store::DrainResult>>>();
  store_->Drain([drained](Result<Store::DrainResult> r) { drained->set_value(std::move(r)); });
  auto done = drained->get_future();
  // A running job's pushes go on until the drain answers (its old steps deleted, so the tiers
  // never fill), at most 20 s.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  uint64_t t = 0;
  for (; done.wait_for(std::chrono::seconds(0)) != std::future_status::ready &&
         std::chrono::steady_clock::now() < until;
       ++t) {
    ASSERT_TRUE(Push(busy, t, kStep).ok()) << t;
    if (t >= 16) {
      ASSERT_TRUE(store_->DeleteSnapshot("busy", t - 16).ok()) << t;
    }
  }
  ASSERT_EQ(done.wait_for(std::chrono::seconds(0)), std::future_status::ready)
      << "the drain did not end in 20 s while " << t << " steps were pushed";
  Result<Store::DrainResult> r = done.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->moved, 4u);
  for (uint64_t step = 0; step < 4; ++step) EXPECT_EQ(TierOf("before", step), v1::TIER_DISK);
  for (uint64_t step = 0; step < 4; ++step) ASSERT_TRUE(FetchExact(before, step, kStep).ok());
}

// A fetch of a disk step while every byte of the host tier is reserved by pushes still being
// copied: nothing can move to disk yet, but the commits will bring steps that can. The read
// waits for them instead of failing RESOURCE_EXHAUSTED at once (the soak found it: 16
// clients each copying a push).
TEST_F(StoreTest, AReadWaitsForRoomThatReservedPushesWillMake) {
  constexpr uint64_t kStep = kHostBytes / 4;
  uint64_t old_run = OpenRun("old", 0, kStep);
  ASSERT_TRUE(Push(old_run, 0, kStep).ok());
  auto drained = std::make_shared<std::promise<Result<Store::DrainResult>>>();
  store_->Drain([drained](Result<Store::DrainResult> r) { drained->set_value(std::move(r)); });
  ASSERT_TRUE(drained->get_future().get().ok());
  ASSERT_EQ(TierOf("old", 0), v1::TIER_DISK);
  store_->WaitTieringIdle();
  uint64_t busy = OpenRun("busy", 0, kStep);
  std::vector<Store::PushTicket> tickets;
  for (uint64_t t = 0; t < 4; ++t) {
    auto ticket = Reserve(*store_, busy, t, kStep);
    ASSERT_TRUE(ticket.ok()) << t << ": " << ticket.status().ToString();
    tickets.push_back(*ticket);
  }
  auto fetched = std::async(std::launch::async, [&] { return FetchExact(old_run, 0, kStep); });
  if (fetched.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready) {
    for (Store::PushTicket& t : tickets) store_->AbortPush(t);
    FAIL() << "the read did not wait: " << fetched.get().ToString();
  }
  for (Store::PushTicket& t : tickets) {
    char* p = static_cast<char*>(t.block->data());
    for (size_t i = 0; i < kStep; ++i) p[i] = Pattern(t.step, i);
    ASSERT_TRUE(store_->CommitPush(t).ok());
  }
  tickets.clear();  // the leases go: the committed steps may move to disk
  ASSERT_EQ(fetched.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status s = fetched.get();
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (uint64_t t = 0; t < 4; ++t) EXPECT_TRUE(FetchExact(busy, t, kStep).ok()) << t;
}

}  // namespace
}  // namespace adjsnap
