#include "store/store.h"

#include <gtest/gtest.h>

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
#include "snapd/checksum.h"
#include "temp_dir.h"
#include "tiering/placement.h"

namespace snapd {
namespace {

// Synchronous views of the store's asynchronous push and fetch, for tests.
Result<Store::PushTicket> Reserve(Store& store, uint64_t run_id, uint64_t step, uint64_t bytes,
                                  const Tenant& who = Tenant::Admin()) {
  auto promise = std::make_shared<std::promise<Result<Store::PushTicket>>>();
  store.BeginPush(
      run_id, step, bytes, [promise](Result<Store::PushTicket> t) { promise->set_value(t); },
      who);
  return promise->get_future().get();
}

Result<Store::FetchGrant> Fetch(Store& store, uint64_t run_id, uint64_t step, uint64_t bytes,
                                const Tenant& who = Tenant::Admin()) {
  auto promise = std::make_shared<std::promise<Result<Store::FetchGrant>>>();
  store.BeginFetch(
      run_id, step, bytes, /*backward=*/true,
      [promise](Result<Store::FetchGrant> g) { promise->set_value(g); }, who);
  return promise->get_future().get();
}

char Pattern(uint64_t step, size_t i) { return static_cast<char>(step * 31 + i % 251); }

class StoreTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kHostBytes = 1 << 20;

  void SetUp() override { Open(); }
  void TearDown() override {
    store_.reset();
    disk_.reset();
    catalog_.reset();
  }
  void Open(uint64_t disk_bytes = 64 << 20, SpoolIo* io = nullptr) {
    store_.reset();
    disk_.reset();
    catalog_.reset();
    catalog_ = std::move(Catalog::Open(dir_ + "/catalog").value());
    if (!tier_) tier_ = std::move(HostTier::Create(kHostBytes).value());
    if (disk_bytes) {
      disk_ = std::move(DiskTier::Open({{dir_ + "/spool"}, disk_bytes, 0.7, io}).value());
    }
    StoreOptions options = StoreOptions::From(DefaultConfig());
    options.epoch = catalog_->BeginEpoch().value();
    options.tenant_host_share = host_share_;
    options.on_hash = on_hash_;
    options.wait_warn_after = wait_warn_after_;
    store_ = std::move(Store::Open(catalog_.get(), tier_.get(), disk_.get(), options).value());
  }
  uint64_t OpenRun(const std::string& name, uint64_t steps, uint64_t bytes,
                   v1::Layers layers = v1::LAYERS_DEFAULT, bool keep = true) {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_steps(steps);
    spec.set_bytes_per_step(bytes);
    spec.set_layers(layers);
    spec.set_keep(keep);
    bool created = false;
    auto run = store_->OpenRun(spec, 0, &created);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? run->run_id() : 0;
  }
  // Pushes one step filled with Pattern(step, i) and commits it.
  Status Push(uint64_t id, uint64_t step, uint64_t bytes) {
    SNAPD_ASSIGN_OR_RETURN(Store::PushTicket t, Reserve(*store_, id, step, bytes));
    char* p = static_cast<char*>(t.block->data());
    for (size_t i = 0; i < bytes; ++i) p[i] = Pattern(step, i);
    return store_->CommitPush(t);
  }
  // Fetches one step and checks its bytes.
  Status FetchExact(uint64_t id, uint64_t step, uint64_t bytes) {
    SNAPD_ASSIGN_OR_RETURN(Store::FetchGrant g, Fetch(*store_, id, step, bytes));
    const char* p = static_cast<const char*>(g.block->data());
    for (size_t i = 0; i < bytes; ++i) {
      if (p[i] != Pattern(step, i)) {
        return Status::DataLoss("step " + std::to_string(step) + " byte " + std::to_string(i));
      }
    }
    store_->Consumed(id, step, g.generation);
    return Status::Ok();
  }
  v1::Tier TierOf(const std::string& run, uint64_t step) {
    auto where = store_->Locate(run, step);
    return where.ok() ? where->tier() : v1::TIER_UNSPECIFIED;
  }
  // Flips bits of byte `offset` of the (only) snapshot file in the spool; false if none.
  bool FlipSpoolByte(std::streamoff offset) {
    std::string file;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ + "/spool")) {
      if (e.is_regular_file()) file = e.path();
    }
    if (file.empty()) return false;
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset);
    char c = 0;
    f.get(c);
    f.seekp(offset);
    f.put(static_cast<char>(c ^ 0x20));
    return f.good();
  }
  bool OnDisk(const std::string& run, uint64_t step) {
    auto where = store_->Locate(run, step);
    return where.ok() && where->on_disk();
  }

  testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
  // For Open(..., &faulty_io_): a member, so it outlives the store and the quarantine jobs
  // its IoPool may still run when the test body returns.
  testing::FaultySpoolIo faulty_io_;
  std::unique_ptr<HostTier> tier_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<DiskTier> disk_;
  double host_share_ = 1.0;  // StoreOptions.tenant_host_share for Open()
  std::function<void(const void*, uint64_t)> on_hash_;  // StoreOptions.on_hash for Open()
  // StoreOptions.wait_warn_after for Open(): its deadline also wakes the tiering thread.
  std::chrono::milliseconds wait_warn_after_{10000};
  std::unique_ptr<Store> store_;
};

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
    SNAPD_ASSIGN_OR_RETURN(Store::PushTicket t, Reserve(*store_, id, step, 4096));
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
    spool_files += e.is_regular_file() && e.path().filename().string().find("tmp") ==
                                              std::string::npos;
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
// the file: tests/daemon/spool_failure_test.cc), the other run's steps come back exact.
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
// (the soak found `snapctl drain` chasing the new steps of 16 busy clients for ever).
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

}  // namespace
}  // namespace snapd
