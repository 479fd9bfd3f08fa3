// The tiering policy alone (tiering/tiering.h): made over the store's plumbing (a real host
// tier, a real spool in a temporary directory, a catalog there) with the index filled in as a
// commit would, and driven through its own calls. No Store, no data plane, no daemon.
#include "tiering/tiering.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "adjsnap/compress_pool.h"
#include "temp_dir.h"

namespace adjsnap {
namespace {

using namespace std::chrono_literals;

// The store's shared plumbing with what a Store would start in Open, and nothing else.
class Plumbing : public StoreState {
 public:
  Plumbing(Catalog* catalog, HostTier* host, DiskTier* disk, const StoreOptions& options)
      : StoreState(catalog, host, disk, options) {
    compress_ = std::make_unique<compress::CompressPool>(1);
    io_ = std::make_unique<IoPool>(2);
    populate_ = std::make_unique<IoPool>(1);
  }
  using StoreState::AllocateHost;
  using StoreState::DetachWaker;
  using StoreState::io_;
  using StoreState::populate_;
  using StoreState::ix_;
  using StoreState::StopWaking;
  using StoreState::Wake;
};

class TieringTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kStep = 256 << 10;
  static constexpr uint64_t kHostSteps = 4;  // the host tier holds this many steps

  void SetUp() override {
    catalog_ = std::move(Catalog::Open(dir_.path() + "/catalog").value());
    host_ = std::move(HostTier::Create(host_steps_ * kStep).value());
    DiskTierOptions d;
    d.spools = {dir_.path() + "/spool"};
    d.budget_bytes = 64 << 20;
    disk_ = std::move(DiskTier::Open(d).value());
    StoreOptions o = StoreOptions::From(DefaultConfig());
    o.io_threads = 2;
    plumbing_ = std::make_unique<Plumbing>(catalog_.get(), host_.get(), disk_.get(), o);
    tiering_ = std::make_unique<Tiering>(*plumbing_);
    tiering_->StartTiering();
  }
  void TearDown() override {  // in the order a Store stops
    {
      IndexLock lock(ix());
      ix().stopping = true;
    }
    plumbing_->StopWaking();
    tiering_->StopTiering();
    plumbing_->populate_.reset();
    plumbing_->io_.reset();
    plumbing_->DetachWaker();
    tiering_.reset();
    plumbing_.reset();
  }
  StoreIndex& ix() { return plumbing_->ix_; }

  // A run as OpenRun records it: N steps (0 = unknown), the oldest `host_boundary` on disk.
  void OpenRun(uint64_t id, v1::Layers layers, uint64_t steps = 0, uint64_t host_boundary = 0) {
    v1::RunRecord record;
    record.set_run_id(id);
    record.mutable_spec()->set_name("run-" + std::to_string(id));
    record.mutable_spec()->set_bytes_per_step(kStep);
    record.mutable_spec()->set_layers(layers);
    record.mutable_spec()->set_steps(steps);
    record.set_host_boundary(host_boundary);
    ASSERT_TRUE(catalog_->PutRun(record).ok());  // record first, then the index
    IndexLock lock(ix());
    ix().runs[id].record = record;
  }
  // A pushed step as CommitPush stores it: its `bytes` bytes, all `fill`, in a host block.
  // Call under ASSERT_NO_FATAL_FAILURE where the tier may be full.
  void Commit(uint64_t id, uint64_t step, char fill, uint64_t bytes = kStep) {
    StoreIndex::Run* run;
    {
      IndexLock lock(ix());
      run = &ix().runs.at(id);
    }
    auto block = plumbing_->AllocateHost(*run, bytes);
    ASSERT_TRUE(block.ok()) << block.status().ToString();
    std::memset((*block)->data(), fill, bytes);
    v1::SnapshotRecord record;
    record.set_run_id(id);
    record.set_step(step);
    record.set_tier(v1::TIER_HOST);
    record.set_raw_bytes(bytes);
    record.set_stored_bytes(bytes);
    record.set_checksum_state(v1::CHECKSUM_PENDING);
    ASSERT_TRUE(catalog_->PutSnapshot(record).ok());  // record first, then the index
    IndexLock lock(ix());
    StoreIndex::Snapshot& snap = run->snapshots[step];
    run->SetRecord(snap, record);
    snap.block = std::move(block).value();
    snap.generation = next_generation_++;
    run->stored_bytes += bytes;
    if (tiering_->DemotionWanted(ix(), *run, snap)) plumbing_->Wake();
  }
  // Step 0 of a new Disk-only run 1, all `fill`, once the tiering thread has written it out:
  // its record as the catalog holds it.
  v1::SnapshotRecord DemotedStep(char fill) {
    OpenRun(1, v1::LAYERS_DISK);
    Commit(1, 0, fill);
    tiering_->WaitTieringIdle();
    return Recorded(1, 0);
  }
  // The spool file of a step on disk.
  std::string SpoolFile(const v1::SnapshotRecord& r) const {
    return dir_.path() + "/spool/run-" + std::to_string(r.run_id()) + "/" + r.disk_name();
  }
  v1::Tier TierOf(uint64_t id, uint64_t step) {
    IndexLock lock(ix());
    return ix().runs.at(id).snapshots.at(step).record.tier();
  }
  std::string TiersOf(uint64_t id) {
    IndexLock lock(ix());
    std::string out;
    for (auto& [step, snap] : ix().runs.at(id).snapshots) {
      out += std::to_string(step) + ":" + std::to_string(snap.record.tier()) +
             (snap.block ? "b" : "") + (snap.writing ? "w" : "") + " ";
    }
    return out;
  }
  // What the catalog holds for the step (what a restart would find).
  v1::SnapshotRecord Recorded(uint64_t id, uint64_t step) {
    catalog_->Flush();  // records queued (a step marked lost) are written
    std::vector<v1::RunRecord> runs;
    std::vector<v1::SnapshotRecord> snaps;
    EXPECT_TRUE(catalog_->LoadAll(&runs, &snaps).ok());
    for (const auto& s : snaps) {
      if (s.run_id() == id && s.step() == step) return s;
    }
    ADD_FAILURE() << "no record of step " << step;
    return {};
  }
  // A fetch through the policy: its bytes, or the error it got.
  Result<std::vector<char>> Fetch(uint64_t id, uint64_t step) {
    std::promise<Result<StoreIndex::FetchGrant>> got;
    StoreIndex::FetchDone later = [&](Result<StoreIndex::FetchGrant> g) {
      got.set_value(std::move(g));
    };
    {
      IndexLock lock(ix());
      StoreIndex::Run& run = ix().runs.at(id);
      auto now = tiering_->AdmitFetch(ix(), run, run.snapshots.at(step), /*backward=*/true, later);
      if (now) later(std::move(*now));
    }
    auto future = got.get_future();
    if (future.wait_for(20s) != std::future_status::ready) return Status::Internal("no answer");
    Result<StoreIndex::FetchGrant> grant = future.get();
    if (!grant.ok()) return grant.status();
    const char* p = static_cast<const char*>(grant->block->data());
    return std::vector<char>(p, p + kStep);
  }

  uint64_t host_steps_ = kHostSteps;  // the host tier's size, for SetUp
  testing::TempDir dir_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<Plumbing> plumbing_;
  std::unique_ptr<Tiering> tiering_;
  uint64_t next_generation_ = 1;
};

TEST_F(TieringTest, AStepWhosePlaceIsDiskIsWrittenThereRecordedAndItsHostMemoryFreed) {
  v1::SnapshotRecord r = DemotedStep('a');
  EXPECT_EQ(TierOf(1, 0), v1::TIER_DISK);
  EXPECT_EQ(r.tier(), v1::TIER_DISK);
  EXPECT_FALSE(r.disk_name().empty());
  EXPECT_EQ(r.checksum_state(), v1::CHECKSUM_RECORDED);  // asked of the checksum owner
  EXPECT_GT(disk_->used(), 0u);
  EXPECT_EQ(host_->used(), 0u);
  auto bytes = Fetch(1, 0);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, std::vector<char>(kStep, 'a'));
}

TEST_F(TieringTest, APushThatFindsTheHostTierFullWaitsUntilTheOldestStepIsDemoted) {
  OpenRun(1, v1::LAYERS_DISK_HOST);  // N unknown: steps stay in host memory until room is needed
  for (uint64_t s = 0; s < kHostSteps; ++s) Commit(1, s, static_cast<char>('a' + s));
  tiering_->WaitTieringIdle();
  EXPECT_EQ(TierOf(1, 0), v1::TIER_HOST);  // nothing needed the room yet
  std::promise<Result<StoreIndex::PushTicket>> granted;
  StoreIndex::PushDone later = [&](Result<StoreIndex::PushTicket> t) {
    granted.set_value(std::move(t));
  };
  {
    IndexLock lock(ix());
    auto now = tiering_->AdmitPush(ix(), ix().runs.at(1), kHostSteps, kStep, later);
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    EXPECT_FALSE(now->has_value());  // parked
    EXPECT_EQ(ix().runs.at(1).in_flight.count(kHostSteps), 1u);
  }
  auto future = granted.get_future();
  ASSERT_EQ(future.wait_for(20s), std::future_status::ready);
  Result<StoreIndex::PushTicket> ticket = future.get();
  ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
  EXPECT_EQ(ticket->block->size(), kStep);
  // Reverse order: the oldest steps went (several demotions run at once; the first to finish
  // made the room), the newest stays.
  tiering_->WaitTieringIdle();
  EXPECT_EQ(TierOf(1, 0), v1::TIER_DISK) << TiersOf(1);
  EXPECT_EQ(TierOf(1, kHostSteps - 1), v1::TIER_HOST) << TiersOf(1);
  ticket->block.reset();
  {
    IndexLock lock(ix());
    ix().runs.at(1).in_flight.erase(kHostSteps);  // as AbortPush
  }
  auto bytes = Fetch(1, 0);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, std::vector<char>(kStep, 'a'));
}

TEST_F(TieringTest, ADrainEndsOnceEveryStepStoredWhenItBeganIsOnDisk) {
  OpenRun(1, v1::LAYERS_DISK_HOST);
  for (uint64_t s = 0; s < 3; ++s) Commit(1, s, 'd');
  std::promise<Result<StoreIndex::DrainResult>> drained;
  tiering_->StartDrain([&](Result<StoreIndex::DrainResult> r) { drained.set_value(r); });
  auto future = drained.get_future();
  ASSERT_EQ(future.wait_for(20s), std::future_status::ready);
  Result<StoreIndex::DrainResult> r = future.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->moved, 3u);
  EXPECT_EQ(r->moved_bytes, 3 * kStep);
  for (uint64_t s = 0; s < 3; ++s) EXPECT_EQ(Recorded(1, s).tier(), v1::TIER_DISK);
}

TEST_F(TieringTest, ASpoolFileDamagedOnDiskIsReportedLostNeverReturned) {
  v1::SnapshotRecord r = DemotedStep('x');
  ASSERT_EQ(TierOf(1, 0), v1::TIER_DISK);
  std::string path = SpoolFile(r);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekp(1000);
    f.put('y');  // one byte flipped under the store
  }
  auto bytes = Fetch(1, 0);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), Code::kDataLoss) << bytes.status().ToString();
  tiering_->WaitTieringIdle();
  EXPECT_EQ(TierOf(1, 0), v1::TIER_LOST);
  EXPECT_EQ(Recorded(1, 0).tier(), v1::TIER_LOST);  // a restart knows it too
  IndexLock lock(ix());
  EXPECT_NE(ix().runs.at(1).failure.find("is lost"), std::string::npos);
}

// A scrub of a step that goes (deleted, consumed by its fetch) while its file is being verified:
// its file is gone by the time it is read, which is no loss. The verdict is NOT_FOUND, not
// DATA_LOSS (`adjsnap scrub` reported such a step LOST and exited 1: the CI soak's scrub).
TEST_F(TieringTest, AStepThatGoesWhileItIsScrubbedIsNotReportedLost) {
  v1::SnapshotRecord r = DemotedStep('s');
  ASSERT_EQ(TierOf(1, 0), v1::TIER_DISK);
  std::promise<Status> verdict;
  {
    IndexLock lock(ix());
    // The store deletes the step and its file: here both happen while the verification runs
    // (its completion waits for the index's mutex, held here).
    tiering_->StartScrub(ix(), 1, 0, [&](Status s) { verdict.set_value(s); });
    ASSERT_EQ(::unlink(SpoolFile(r).c_str()), 0);
    StoreIndex::Run& run = ix().runs.at(1);
    run.EraseSnapshot(run.snapshots.find(0));
  }
  auto future = verdict.get_future();
  ASSERT_EQ(future.wait_for(20s), std::future_status::ready);
  Status s = future.get();
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
}

TEST_F(TieringTest, AFetchThatNeedsTheHostTierCompactedLeavesThatToTheTieringThread) {
  DemotedStep('f');
  ASSERT_EQ(TierOf(1, 0), v1::TIER_DISK);
  // Another run's host copies of half a step each fill the tier; every other one is deleted:
  // half the tier is free, in pieces too small for a step.
  OpenRun(2, v1::LAYERS_HOST);
  constexpr uint64_t kPieces = 2 * kHostSteps;
  for (uint64_t s = 0; s < kPieces; ++s) ASSERT_NO_FATAL_FAILURE(Commit(2, s, 'h', kStep / 2));
  {
    IndexLock lock(ix());
    StoreIndex::Run& run = ix().runs.at(2);
    for (uint64_t s = 0; s < kPieces; s += 2) run.EraseSnapshot(run.snapshots.find(s));
  }
  const HostTier::ArenaId arena = host_->ArenaFor(0);
  ASSERT_EQ(host_->used(), kHostSteps * kStep / 2);
  ASSERT_LT(host_->largest_free(arena), kStep);

  std::promise<Result<StoreIndex::FetchGrant>> got;
  StoreIndex::FetchDone later = [&](Result<StoreIndex::FetchGrant> g) {
    got.set_value(std::move(g));
  };
  {
    IndexLock lock(ix());
    StoreIndex::Run& run = ix().runs.at(1);
    auto now = tiering_->AdmitFetch(ix(), run, run.snapshots.at(0), /*backward=*/false, later);
    ASSERT_FALSE(now.has_value());
    // The caller's thread (the data plane's) moved no block: the read waits for the tiering
    // thread.
    EXPECT_EQ(ix().tiering.compactions, 0u);
    EXPECT_EQ(ix().tiering.parked_reads.count({1, 0}), 1u);
  }
  auto future = got.get_future();
  ASSERT_EQ(future.wait_for(20s), std::future_status::ready);
  Result<StoreIndex::FetchGrant> grant = future.get();
  ASSERT_TRUE(grant.ok()) << grant.status().ToString();
  EXPECT_EQ(std::memcmp(grant->block->data(), std::vector<char>(kStep, 'f').data(), kStep), 0);
  IndexLock lock(ix());
  EXPECT_GT(ix().tiering.compactions, 0u);  // the tiering thread made the room
}

TEST_F(TieringTest, WaitingNamesAParkedPushAndWhatItWaitsFor) {
  OpenRun(1, v1::LAYERS_HOST);  // no disk layer: room comes only from consumed steps
  {
    IndexLock lock(ix());
    ix().runs.at(1).record.mutable_spec()->set_block_when_full(true);
  }
  for (uint64_t s = 0; s < kHostSteps; ++s) Commit(1, s, 'w');
  StoreIndex::PushDone later = [](Result<StoreIndex::PushTicket>) {};
  IndexLock lock(ix());
  auto now = tiering_->AdmitPush(ix(), ix().runs.at(1), kHostSteps, kStep, later);
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  ASSERT_FALSE(now->has_value());
  std::vector<Tiering::WaitingRequest> waits = tiering_->Waiting(ix());
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].wait.step(), kHostSteps);
  EXPECT_EQ(waits[0].wait.kind(), "push");
  EXPECT_NE(waits[0].wait.waiting_for().find("host"), std::string::npos)
      << waits[0].wait.waiting_for();
  Tiering::WaitCounts counts = tiering_->WaitsOf(ix(), ix().runs.at(1));
  EXPECT_EQ(counts.pushes, 1u);
  EXPECT_EQ(counts.fetches, 0u);
}


// The steps of a run on disk in [from, bound), as DemotionClass walked them before Run::DiskSteps.
uint64_t WalkedDiskSteps(const StoreIndex::Run& run, uint64_t from, uint64_t bound) {
  uint64_t on_disk = 0;
  for (auto it = run.snapshots.lower_bound(from); it != run.snapshots.end() && it->first < bound;
       ++it) {
    on_disk += it->second.record.tier() == v1::TIER_DISK;
  }
  return on_disk;
}

// A host tier that never fills: steps read back stay there beside those not demoted.
class RoomyTieringTest : public TieringTest {
 protected:
  RoomyTieringTest() { host_steps_ = 64; }
};

// The count each demotion's placement asks for (Run::DiskSteps) follows the tiering's own
// changes of its steps, in a random order: pushes (demoted below the boundary by the tiering
// thread), reads back, steps lost, deleted and pushed again. After each, the count from every
// step, asked in a random order (the cursor moves both ways), equals the walk of the range.
TEST_F(RoomyTieringTest, TheDiskStepCountFollowsDemotionsReadsLossesAndDeletes) {
  constexpr uint64_t kSteps = 40, kBoundary = 32;
  OpenRun(1, v1::LAYERS_DISK_HOST, kSteps, kBoundary);
  std::mt19937 random(61);
  int pushes = 0, reads = 0, losses = 0, deletes = 0;
  std::vector<uint64_t> from(kSteps + 2);
  std::iota(from.begin(), from.end(), 0);
  for (int i = 0; i < 160; ++i) {
    const uint64_t step = random() % kSteps;
    const char fill = static_cast<char>('a' + step % 26);
    const unsigned op = random() % 3;
    v1::Tier tier = v1::TIER_UNSPECIFIED;
    {
      IndexLock lock(ix());
      auto& snapshots = ix().runs.at(1).snapshots;
      if (auto it = snapshots.find(step); it != snapshots.end()) tier = it->second.record.tier();
    }
    if (tier == v1::TIER_UNSPECIFIED) {
      ASSERT_NO_FATAL_FAILURE(Commit(1, step, fill));
      ++pushes;
    } else if (op == 0 && tier == v1::TIER_DISK) {
      auto bytes = Fetch(1, step);
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      EXPECT_EQ(*bytes, std::vector<char>(kStep, fill));
      ++reads;
    } else if (op == 1 && tier == v1::TIER_DISK) {
      IndexLock lock(ix());
      StoreIndex::Run& run = ix().runs.at(1);
      tiering_->LoseDiskStep(ix(), run, run.snapshots.at(step), "lost by the test");
      ++losses;
    } else {
      // As the store deletes a step: its file, then its place in the index.
      IndexLock lock(ix());
      StoreIndex::Run& run = ix().runs.at(1);
      auto it = run.snapshots.find(step);
      const v1::SnapshotRecord& r = it->second.record;
      if (r.tier() == v1::TIER_DISK) {
        disk_->Remove(r.spool(), r.run_id(), r.disk_name(), FileContentBytes(r));
      }
      run.EraseSnapshot(it);
      ++deletes;
    }
    tiering_->WaitTieringIdle();
    IndexLock lock(ix());
    const StoreIndex::Run& run = ix().runs.at(1);
    std::shuffle(from.begin(), from.end(), random);
    for (uint64_t f : from) {
      ASSERT_EQ(run.DiskSteps(f, kBoundary), WalkedDiskSteps(run, f, kBoundary))
          << "from step " << f << " after operation " << i;
    }
  }
  EXPECT_GT(pushes, 0);
  EXPECT_GT(reads, 0);
  EXPECT_GT(losses, 0);
  EXPECT_GT(deletes, 0);
}

}  // namespace
}  // namespace adjsnap
