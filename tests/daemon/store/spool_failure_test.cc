// A failing disk under the store, injected behind the disk tier's I/O seam (FaultySpoolIo):
// the write path marks a spool failed and never spins on it, a push that needs the disk fails
// within spool_failure_timeout naming the spool and the errno, another spool takes over, a
// failed spool comes back once a probe finds it writable, a read error loses that step once,
// and recovery and the scrubs move damaged files aside instead of deleting them. Every test
// ends with a push and a fetch, byte-exact, on the same store.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "faulty_spool_io.h"
#include "store/store.h"
#include "temp_dir.h"

namespace adjsnap {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
namespace fs = std::filesystem;

char Pattern(uint64_t step, size_t i) { return static_cast<char>(step * 37 + i % 253); }

bool WaitFor(const std::function<bool()>& done, milliseconds timeout) {
  auto until = steady_clock::now() + timeout;
  while (!done()) {
    if (steady_clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

// CPU time (user + system) of this process, every thread: the store's threads run here.
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// What the daemon's log (stderr) received while it lived; always stops capturing.
class CapturedLog {
 public:
  CapturedLog() { ::testing::internal::CaptureStderr(); }
  ~CapturedLog() { Take(); }
  const std::string& Take() {
    if (!taken_) text_ = ::testing::internal::GetCapturedStderr(), taken_ = true;
    return text_;
  }
  static size_t Lines(const std::string& text) {
    return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  }
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

 private:
  bool taken_ = false;
  std::string text_;
};

class SpoolFailureTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kHostBytes = 1 << 20;
  static constexpr uint64_t kStep = 64 << 10;

  void TearDown() override { Close(); }
  void Close() {
    store_.reset();
    disk_.reset();
    catalog_.reset();
  }
  // A store over `spools` spools (spool0, spool1, ...) whose I/O goes through io_. Reopening
  // keeps the catalog and the spools: a restart.
  void Open(int spools = 1, milliseconds timeout = milliseconds(2000), uint64_t scrub_rate = 0,
            uint64_t budget = 64ull << 20) {
    Close();
    catalog_ = std::move(Catalog::Open(dir_ + "/catalog").value());
    if (!host_) host_ = std::move(HostTier::Create(kHostBytes).value());
    DiskTierOptions d;
    for (int i = 0; i < spools; ++i) d.spools.push_back(Spool(i));
    d.budget_bytes = budget;
    d.io = &io_;
    d.probe_min = milliseconds(100);
    d.probe_max = milliseconds(1000);
    auto disk = DiskTier::Open(d);
    ASSERT_TRUE(disk.ok()) << disk.status().ToString();
    disk_ = std::move(disk).value();
    StoreOptions options = StoreOptions::From(DefaultConfig());
    options.epoch = catalog_->BeginEpoch().value();
    options.spool_failure_timeout = timeout;
    options.scrub_bytes_per_second = scrub_rate;
    auto store = Store::Open(catalog_.get(), host_.get(), disk_.get(), options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }
  std::string Spool(int i) const { return dir_ + "/spool" + std::to_string(i); }
  // Steps 0 and 1 of run `id` (of `steps`) are on disk and the host tier is full of steps that
  // can move only to a failed spool (EROFS): a fetch of step 0 waits `timeout` and fails
  // UNAVAILABLE saying `why` and naming EROFS; a fetch of step 1 is served once the spool comes
  // back within the bound (io_.Heal); then every step comes back exact.
  void ExpectReadWaitsForASpool(uint64_t id, uint64_t steps, milliseconds timeout,
                                const std::string& why) {
    auto fetch = [&](uint64_t step) {
      return std::async(std::launch::async, [this, id, step] { return FetchExact(id, step); });
    };
    const auto started = steady_clock::now();
    Status s = fetch(0).get();
    const auto waited = steady_clock::now() - started;
    EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find(why), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("EROFS"), std::string::npos) << s.ToString();
    EXPECT_GE(waited, timeout - milliseconds(100));
    EXPECT_LT(waited, timeout + milliseconds(3000));
    auto served = fetch(1);
    std::this_thread::sleep_for(milliseconds(300));
    io_.Heal();
    Status again = served.get();
    EXPECT_TRUE(again.ok()) << again.ToString();
    for (uint64_t k = 0; k < steps; ++k) EXPECT_TRUE(FetchExact(id, k).ok()) << k;
  }
  uint64_t OpenRun(const std::string& name, uint64_t steps, v1::Layers layers) {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_steps(steps);
    spec.set_bytes_per_step(kStep);
    spec.set_layers(layers);
    spec.set_keep(true);
    bool created = false;
    auto run = store_->OpenRun(spec, 0, &created);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? run->run_id() : 0;
  }
  Status Push(uint64_t id, uint64_t step) {
    auto promise = std::make_shared<std::promise<Result<Store::PushTicket>>>();
    store_->BeginPush(id, step, kStep,
                      [promise](Result<Store::PushTicket> t) { promise->set_value(std::move(t)); });
    ADJSNAP_ASSIGN_OR_RETURN(Store::PushTicket t, promise->get_future().get());
    char* p = static_cast<char*>(t.block->data());
    for (size_t i = 0; i < kStep; ++i) p[i] = Pattern(step, i);
    return store_->CommitPush(t);
  }
  Status FetchExact(uint64_t id, uint64_t step) {
    auto promise = std::make_shared<std::promise<Result<Store::FetchGrant>>>();
    store_->BeginFetch(id, step, kStep, /*backward=*/true, [promise](Result<Store::FetchGrant> g) {
      promise->set_value(std::move(g));
    });
    ADJSNAP_ASSIGN_OR_RETURN(Store::FetchGrant g, promise->get_future().get());
    const char* p = static_cast<const char*>(g.block->data());
    for (size_t i = 0; i < kStep; ++i) {
      if (p[i] != Pattern(step, i)) {
        return Status::Internal("step " + std::to_string(step) + " byte " + std::to_string(i) +
                                " is wrong");
      }
    }
    return Status::Ok();
  }
  v1::Tier TierOf(const std::string& run, uint64_t step) {
    auto where = store_->Locate(run, step);
    return where.ok() ? where->tier() : v1::TIER_UNSPECIFIED;
  }
  // The spool file of `step` of run `id` in spool `spool`, found by its name; "" if none.
  std::string FileOf(int spool, uint64_t id, uint64_t step, const std::string& under = "") {
    std::string dir = Spool(spool) + under + "/run-" + std::to_string(id);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::string name = e.path().filename();
      if (name.rfind("step-" + std::to_string(step) + "-", 0) == 0) return e.path();
    }
    return "";
  }
  static void FlipByte(const std::string& file, std::streamoff offset) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset);
    char c = 0;
    f.get(c);
    f.seekp(offset);
    f.put(static_cast<char>(c ^ 0x20));
  }
  // The round trip every test ends with: a new run's step pushed and fetched back exact.
  void ExpectRoundTrip(v1::Layers layers = v1::LAYERS_DISK) {
    std::string name = "round-trip-" + std::to_string(++round_trips_);
    uint64_t id = OpenRun(name, 1, layers);
    ASSERT_TRUE(Push(id, 0).ok());
    store_->WaitTieringIdle();
    if (layers == v1::LAYERS_DISK) {
      EXPECT_EQ(TierOf(name, 0), v1::TIER_DISK);
    }
    Status f = FetchExact(id, 0);
    EXPECT_TRUE(f.ok()) << f.ToString();
  }

  testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
  testing::FaultySpoolIo io_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<Store> store_;
  int round_trips_ = 0;
};

struct PersistentFault {
  testing::FaultySpoolIo::Op op;
  int err;
  const char* name;  // the errno's name, as the messages say it
};

class PersistentWriteFaultTest : public SpoolFailureTest,
                                 public ::testing::WithParamInterface<PersistentFault> {};

// A spool remounted read-only (EROFS at create), a device that answers EIO to every write, and
// one whose fdatasync fails: the first failed write takes the spool out of the rotation; a push
// that needs the disk waits spool_failure_timeout and fails UNAVAILABLE naming the spool and
// the errno, while adjsnapd sits idle (no write retried without a pause) and logs a few lines.
// The host tier keeps what it holds; once the device works, a probe brings the spool back by
// itself and the push goes through.
TEST_P(PersistentWriteFaultTest, APushThatNeedsTheDiskFailsWithinTheBoundWithoutSpinning) {
  const PersistentFault fault = GetParam();
  const milliseconds kTimeout(2000);
  ASSERT_NO_FATAL_FAILURE(Open(1, kTimeout));
  uint64_t id = OpenRun("r", 0, v1::LAYERS_DISK_HOST);
  io_.Fail(fault.op, fault.err);
  CapturedLog log;
  const uint64_t calls_before = io_.calls();
  const double cpu_before = CpuSeconds();
  const auto started = steady_clock::now();
  uint64_t t = 0;
  Status s;
  for (; t < 64 && s.ok(); ++t) s = Push(id, t);
  const double wall = std::chrono::duration<double>(steady_clock::now() - started).count();
  const double cpu = CpuSeconds() - cpu_before;
  const uint64_t calls = io_.calls() - calls_before;
  const std::string text = log.Take();
  --t;  // the step that failed
  ASSERT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(Spool(0)), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(fault.name), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("spool_failure_timeout"), std::string::npos) << s.ToString();
  EXPECT_GE(t, kHostBytes / kStep - 2);  // the host tier took what fit
  // Within the bound plus slack, and idle meanwhile: no spin on the failed spool.
  EXPECT_LT(wall, 2.0 + 3.0) << "waited " << wall << " s";
  EXPECT_LT(cpu, 0.2 * wall) << cpu << " s of CPU in " << wall << " s";
  EXPECT_LT(calls, 40u) << "I/O calls on the seam while waiting";
  EXPECT_LT(CapturedLog::Lines(text), 12u) << text;
  EXPECT_EQ(CapturedLog::Count(text, "failed and is out of the rotation"), 1u) << text;
  std::printf("[ figures  ] %s: failed after %.2f s, CPU %.1f%% of wall, %llu seam calls, %zu "
              "log lines\n",
              ::testing::UnitTest::GetInstance()->current_test_info()->name(), wall, 100.0 * cpu / wall, static_cast<unsigned long long>(calls),
              CapturedLog::Lines(text));
  std::vector<SpoolStatus> spools = disk_->SpoolStates();
  ASSERT_EQ(spools.size(), 1u);
  EXPECT_TRUE(spools[0].failed);
  EXPECT_EQ(spools[0].error, fault.err);
  EXPECT_NE(spools[0].reason.find(fault.name), std::string::npos) << spools[0].reason;
  EXPECT_EQ(store_->Counters().unavailable_pushes, 1u);
  EXPECT_EQ(store_->Counters().unavailable_pushes_fast, 0u);
  // The next pushes that need the disk fail at once, saying why, while no spool works.
  for (int i = 0; i < 3; ++i) {
    const auto t0 = steady_clock::now();
    Status fast = Push(id, t);
    EXPECT_LT(steady_clock::now() - t0, milliseconds(100));
    EXPECT_EQ(fast.code(), Code::kUnavailable) << fast.ToString();
    EXPECT_NE(fast.message().find("Failed at once: a push already waited"), std::string::npos)
        << fast.ToString();
    EXPECT_NE(fast.message().find(fault.name), std::string::npos) << fast.ToString();
  }
  EXPECT_EQ(store_->Counters().unavailable_pushes, 4u);
  EXPECT_EQ(store_->Counters().unavailable_pushes_fast, 3u);
  // The host tier still serves everything it holds.
  for (uint64_t k = 0; k < t; ++k) EXPECT_TRUE(FetchExact(id, k).ok()) << k;

  // The device works again: a probe (automatic, with backoff) puts the spool back.
  io_.Heal();
  ASSERT_TRUE(WaitFor([&] { return disk_->usable(); }, milliseconds(5000)));
  Status again = Push(id, t);
  EXPECT_TRUE(again.ok()) << again.ToString();
  store_->WaitTieringIdle();
  for (uint64_t k = t + 1; k-- > 0;) EXPECT_TRUE(FetchExact(id, k).ok()) << k;
  EXPECT_GT(store_->Counters().demotions, 0u);
  ExpectRoundTrip();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, PersistentWriteFaultTest,
    ::testing::Values(PersistentFault{testing::FaultySpoolIo::kOpenForWrite, EROFS, "EROFS"},
                      PersistentFault{testing::FaultySpoolIo::kWrite, EIO, "EIO"},
                      PersistentFault{testing::FaultySpoolIo::kSync, EIO, "EIO"}),
    [](const auto& info) {
      return std::string(info.param.op == testing::FaultySpoolIo::kOpenForWrite ? "ErofsOnCreate"
                         : info.param.op == testing::FaultySpoolIo::kWrite      ? "EioOnWrite"
                                                                                : "EioOnFdatasync");
    });

// A fetch of a disk step while the host tier is full and no spool works: no step can leave
// host memory to make room, which is the case of a push that needs the disk. So the read
// waits spool_failure_timeout for a spool to come back and then fails UNAVAILABLE naming the
// spool (it failed RESOURCE_EXHAUSTED at once; the soak found it); a spool that comes back
// within the bound serves it.
TEST_F(SpoolFailureTest, AFetchThatNeedsRoomWhileNoSpoolWorksWaitsForASpool) {
  const milliseconds kTimeout(1500);
  ASSERT_NO_FATAL_FAILURE(Open(1, kTimeout));
  uint64_t id = OpenRun("r", 0, v1::LAYERS_DISK_HOST);
  for (uint64_t t = 0; t < 4; ++t) ASSERT_TRUE(Push(id, t).ok()) << t;
  auto drained = std::make_shared<std::promise<Result<Store::DrainResult>>>();
  store_->Drain([drained](Result<Store::DrainResult> r) { drained->set_value(std::move(r)); });
  ASSERT_TRUE(drained->get_future().get().ok());
  ASSERT_EQ(TierOf("r", 0), v1::TIER_DISK);
  // The spool fails; the host tier fills with steps that could move to disk if one worked.
  io_.Fail(testing::FaultySpoolIo::kOpenForWrite, EROFS);
  uint64_t t = 4;
  while (Push(id, t).ok()) ++t;
  ASSERT_FALSE(disk_->usable());

  ExpectReadWaitsForASpool(id, t, kTimeout, "no spool of the disk tier works");
  ExpectRoundTrip();
}

// The same with one spool full and the other failed (a shared filesystem gone while the local
// disks are full): the room the read needs can only come from the failed spool, so the read
// waits spool_failure_timeout for it and then fails UNAVAILABLE naming it (it failed
// RESOURCE_EXHAUSTED at once; the GlusterFS brick-kill test found it); a spool back within the
// bound serves it.
TEST_F(SpoolFailureTest, AFetchThatNeedsRoomWhileTheWorkingSpoolsAreFullWaitsForTheFailedOne) {
  const milliseconds kTimeout(1500);
  ASSERT_NO_FATAL_FAILURE(Open(2, kTimeout, 0, /*budget=*/16 * (kStep + 4096)));
  uint64_t id = OpenRun("r", 0, v1::LAYERS_DISK_HOST);
  io_.Fail(testing::FaultySpoolIo::kOpenForWrite, EROFS, 0, Spool(1));
  uint64_t t = 0;
  while (Push(id, t).ok()) ++t;  // host memory, then spool0 fill; spool1 failed
  ASSERT_TRUE(disk_->usable());
  ASSERT_TRUE(disk_->SpoolStates()[1].failed);
  ASSERT_EQ(TierOf("r", 0), v1::TIER_DISK);

  ExpectReadWaitsForASpool(
      id, t, kTimeout, "the working spools are full and the others failed (EROFS on " + Spool(1));
}

// Two spools; one's device fails in the middle of a run. The run never notices: the demotion
// that failed is written to the other spool, every later one goes there, and every step comes
// back exact, the ones written to the failed spool before it failed included.
TEST_F(SpoolFailureTest, OneOfTwoSpoolsFailingMidRunTheRunCompletesOnTheOther) {
  ASSERT_NO_FATAL_FAILURE(Open(2));
  constexpr uint64_t kSteps = 48;
  uint64_t id = OpenRun("r", 0, v1::LAYERS_DISK_HOST);
  for (uint64_t t = 0; t < kSteps; ++t) {
    if (t == kSteps / 2) {
      store_->WaitTieringIdle();
      ASSERT_GT(disk_->SpoolStates()[0].used, 0u);  // spool0 holds steps of the first half
      io_.Fail(testing::FaultySpoolIo::kOpenForWrite, EIO, 0, Spool(0) + "/");
    }
    Status s = Push(id, t);
    ASSERT_TRUE(s.ok()) << t << ": " << s.ToString();
  }
  store_->WaitTieringIdle();
  std::vector<SpoolStatus> spools = disk_->SpoolStates();
  EXPECT_TRUE(spools[0].failed);
  EXPECT_FALSE(spools[1].failed);
  EXPECT_TRUE(disk_->usable());
  EXPECT_EQ(store_->Counters().unavailable_pushes, 0u);
  for (uint64_t t = kSteps; t-- > 0;) {
    Status f = FetchExact(id, t);
    EXPECT_TRUE(f.ok()) << t << ": " << f.ToString();
  }
  ExpectRoundTrip();
}

// A run whose layers keep it in host memory does not wait for a failed spool: with the host
// tier full its push is refused at once (RESOURCE_EXHAUSTED), as it would be with no disk tier.
TEST_F(SpoolFailureTest, AHostOnlyRunIsNotHeldBackByAFailedSpool) {
  ASSERT_NO_FATAL_FAILURE(Open(1, milliseconds(10000)));
  io_.Fail(testing::FaultySpoolIo::kOpenForWrite, EROFS);
  uint64_t disk = OpenRun("d", 2, v1::LAYERS_DISK);
  ASSERT_TRUE(Push(disk, 0).ok());
  ASSERT_TRUE(WaitFor([&] { return !disk_->usable(); }, milliseconds(5000)));
  ASSERT_TRUE(store_->DeleteRun("d").ok());
  uint64_t host = OpenRun("h", 0, v1::LAYERS_HOST);
  uint64_t t = 0;
  Status s;
  const auto started = steady_clock::now();
  for (; t < 64 && s.ok(); ++t) s = Push(host, t);
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.ToString();
  EXPECT_LT(steady_clock::now() - started, milliseconds(5000));  // not spool_failure_timeout
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  for (uint64_t k = 0; k + 1 < t; ++k) EXPECT_TRUE(FetchExact(host, k).ok()) << k;
  ASSERT_TRUE(store_->DeleteRun("h").ok());
  ExpectRoundTrip();
}

// EIO reading one step's file: that fetch fails DATA_LOSS naming the file and the errno, the
// step is marked lost (said once in the log, counted), its file moved to quarantine; the other
// steps and runs go on, and a second fetch of it is a plain DATA_LOSS.
TEST_F(SpoolFailureTest, EioOnReadLosesThatStepOnceAndCountsIt) {
  ASSERT_NO_FATAL_FAILURE(Open(1));
  uint64_t id = OpenRun("r", 4, v1::LAYERS_DISK);
  for (uint64_t t = 0; t < 3; ++t) ASSERT_TRUE(Push(id, t).ok());
  store_->WaitTieringIdle();
  const std::string file = FileOf(0, id, 1);
  ASSERT_FALSE(file.empty());
  io_.Fail(testing::FaultySpoolIo::kRead, EIO, 0, file);
  CapturedLog log;
  Status s = FetchExact(id, 1);
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(file + ": Input/output error (EIO)"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(TierOf("r", 1), v1::TIER_LOST);
  Status again = FetchExact(id, 1);
  EXPECT_EQ(again.code(), Code::kDataLoss) << again.ToString();
  EXPECT_EQ(store_->Counters().lost_snapshots, 1u);
  EXPECT_EQ(disk_->SpoolStates()[0].read_errors, 1u);
  EXPECT_FALSE(disk_->SpoolStates()[0].failed);  // one file, not the spool
  EXPECT_TRUE(WaitFor([&] { return !FileOf(0, id, 1, "/quarantine").empty(); },
                      milliseconds(5000)));
  EXPECT_FALSE(fs::exists(file));
  const std::string text = log.Take();
  EXPECT_EQ(CapturedLog::Count(text, "is lost"), 1u) << text;
  for (uint64_t t : {2u, 0u}) EXPECT_TRUE(FetchExact(id, t).ok()) << t;
  io_.Heal();
  ASSERT_TRUE(Push(id, 3).ok());
  store_->WaitTieringIdle();
  EXPECT_TRUE(FetchExact(id, 3).ok());
  ExpectRoundTrip();
}

// A restart after files were damaged behind adjsnapd's back: a file cut short, one deleted, one
// with a flipped byte, one zeroed. Each step is reported lost (at start, or by the scrub of
// recovered files before any fetch) and each file that is still there is moved to quarantine,
// never deleted; only the leftover of an interrupted write (.tmp) is removed. Until files of
// recorded steps were kept, the truncated file was the one a restart removed as an
// "interrupted write".
TEST_F(SpoolFailureTest, ARestartQuarantinesDamagedFilesAndDeletesOnlyInterruptedWrites) {
  ASSERT_NO_FATAL_FAILURE(Open(1));
  uint64_t id = OpenRun("r", 8, v1::LAYERS_DISK);
  for (uint64_t t = 0; t < 5; ++t) ASSERT_TRUE(Push(id, t).ok());
  store_->WaitTieringIdle();
  Close();
  fs::resize_file(FileOf(0, id, 1), kStep / 2);
  fs::remove(FileOf(0, id, 2));
  FlipByte(FileOf(0, id, 3), 1000);
  { std::ofstream(FileOf(0, id, 4), std::ios::binary) << std::string(kStep, '\0'); }
  const std::string leftover = Spool(0) + "/run-" + std::to_string(id) + "/step-7-e1-g99.tmp";
  { std::ofstream(leftover) << "a write a crash interrupted"; }
  CapturedLog log;
  ASSERT_NO_FATAL_FAILURE(Open(1));
  EXPECT_EQ(TierOf("r", 1), v1::TIER_LOST);
  EXPECT_EQ(TierOf("r", 2), v1::TIER_LOST);
  ASSERT_TRUE(WaitFor(
      [&] { return TierOf("r", 3) == v1::TIER_LOST && TierOf("r", 4) == v1::TIER_LOST; },
      milliseconds(5000)));
  for (uint64_t t : {1u, 3u, 4u}) {
    EXPECT_TRUE(WaitFor([&] { return !FileOf(0, id, t, "/quarantine").empty(); },
                        milliseconds(5000)))
        << t;
    EXPECT_TRUE(FileOf(0, id, t).empty()) << t;
  }
  EXPECT_EQ(fs::file_size(FileOf(0, id, 1, "/quarantine")), kStep / 2);  // as it was found
  EXPECT_FALSE(fs::exists(leftover));
  const std::string text = log.Take();
  EXPECT_NE(text.find("removed 1 spool file that no snapshot record names"), std::string::npos)
      << text;
  EXPECT_NE(text.find("step-7-e1-g99.tmp"), std::string::npos) << text;
  EXPECT_NE(text.find("quarantined the spool file of lost step 1"), std::string::npos) << text;
  EXPECT_EQ(store_->Counters().lost_snapshots, 4u);
  EXPECT_TRUE(FetchExact(id, 0).ok());
  for (uint64_t t = 1; t < 5; ++t) EXPECT_EQ(FetchExact(id, t).code(), Code::kDataLoss) << t;
  ExpectRoundTrip();
}

// scrub_rate on: a byte flipped behind adjsnapd's back in a spool file is found by the background
// scrub, before any fetch needs the step.
TEST_F(SpoolFailureTest, TheBackgroundScrubFindsDamageBeforeAnyFetch) {
  ASSERT_NO_FATAL_FAILURE(Open(1, milliseconds(2000), /*scrub_rate=*/16 << 20));
  uint64_t id = OpenRun("r", 4, v1::LAYERS_DISK);
  for (uint64_t t = 0; t < 3; ++t) ASSERT_TRUE(Push(id, t).ok());
  store_->WaitTieringIdle();
  FlipByte(FileOf(0, id, 1), 12345);
  ASSERT_TRUE(WaitFor([&] { return TierOf("r", 1) == v1::TIER_LOST; }, milliseconds(5000)));
  EXPECT_GE(store_->Counters().scrubbed, 2u);
  EXPECT_TRUE(WaitFor([&] { return !FileOf(0, id, 1, "/quarantine").empty(); },
                      milliseconds(5000)));
  for (uint64_t t : {2u, 0u}) EXPECT_TRUE(FetchExact(id, t).ok()) << t;
  ExpectRoundTrip();
}

// `adjsnap scrub RUN`: every file of the run verified now, the damaged ones named.
TEST_F(SpoolFailureTest, AScrubOnDemandNamesTheLostSteps) {
  ASSERT_NO_FATAL_FAILURE(Open(1));
  uint64_t id = OpenRun("r", 4, v1::LAYERS_DISK);
  for (uint64_t t = 0; t < 3; ++t) ASSERT_TRUE(Push(id, t).ok());
  store_->WaitTieringIdle();
  FlipByte(FileOf(0, id, 2), 7);
  auto promise = std::make_shared<std::promise<Result<Store::ScrubResult>>>();
  store_->ScrubRun("r", [promise](Result<Store::ScrubResult> r) { promise->set_value(r); });
  auto result = promise->get_future().get();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->verified, 2u);
  ASSERT_EQ(result->lost.size(), 1u);
  EXPECT_EQ(result->lost[0].first, 2u);
  EXPECT_EQ(TierOf("r", 2), v1::TIER_LOST);
  auto unknown = std::make_shared<std::promise<Result<Store::ScrubResult>>>();
  store_->ScrubRun("nope", [unknown](Result<Store::ScrubResult> r) { unknown->set_value(r); });
  EXPECT_EQ(unknown->get_future().get().status().code(), Code::kNotFound);
  for (uint64_t t : {1u, 0u}) EXPECT_TRUE(FetchExact(id, t).ok()) << t;
  ExpectRoundTrip();
}

}  // namespace
}  // namespace adjsnap
