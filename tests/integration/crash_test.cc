// kill -9 while adjsnapd is writing: demotions to the disk tier, zfp-compressed spills, and moves
// of a run's oldest local steps to a shared spool, cut at random moments. After every restart
// on the same state directory each step reads back byte-exact or is reported lost (DATA_LOSS,
// TIER_LOST), never with wrong bytes, and no file a cut write or move left stays in a spool; and
// the background scrub of recovered spool files finds a corrupted one without any fetch.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

constexpr uint64_t kRawStep = (512 << 10) + 40;  // not a page multiple: padded spool files
constexpr uint64_t kRows = 256, kCols = 512;     // the compressed runs' float32 fields
constexpr uint64_t kFieldStep = kRows * kCols * sizeof(float);
constexpr uint64_t kSteps = 48;  // about 3x the 8 MiB host tier
constexpr const char* kHostMem = "8M";

// How a run reaches the disk tier.
enum class Mode {
  kPlaced,      // declared step count: steps below host_boundary are demoted as they arrive
  kFullHost,    // no step count: a full host tier demotes its oldest steps
  kZfpDemoted,  // declared, zfp reversible: compressed on their way to disk
};
constexpr Mode kModes[] = {Mode::kPlaced, Mode::kFullHost, Mode::kZfpDemoted};

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kPlaced:
      return "placed";
    case Mode::kFullHost:
      return "full-host";
    case Mode::kZfpDemoted:
      return "zfp-on-demotion";
  }
  return "?";
}

RunSpec SpecFor(Mode mode, const std::string& name) {
  RunSpec spec = Spec(name, mode == Mode::kFullHost ? 0 : kSteps, kRawStep);
  spec.keep = true;  // verification reads each step; nothing is released by it
  if (mode == Mode::kZfpDemoted) {
    spec.bytes_per_step = kFieldStep;
    spec.dtype = Dtype::kFloat32;
    spec.shape = {kRows, kCols};
    spec.codec = Codec::kZfpReversible;
    spec.compress_at_ingest = false;  // on demotion
  }
  return spec;
}

// What step `step` of a run holds: the byte pattern, or for zfp a smooth float field (what
// zfp is for; arbitrary bit patterns would include NaNs).
void Fill(Mode mode, std::vector<char>* buf, uint64_t seed, uint64_t step) {
  if (mode != Mode::kZfpDemoted) {
    buf->resize(kRawStep);
    FillPattern(buf->data(), buf->size(), seed, step);
    return;
  }
  buf->resize(kFieldStep);
  auto* f = reinterpret_cast<float*>(buf->data());
  const double phase = static_cast<double>(seed % 1000) * 0.001 + 0.05 * static_cast<double>(step);
  for (uint64_t r = 0; r < kRows; ++r) {
    for (uint64_t c = 0; c < kCols; ++c) {
      f[r * kCols + c] = static_cast<float>(std::sin(0.02 * static_cast<double>(r) + phase) *
                                            std::cos(0.013 * static_cast<double>(c) - phase));
    }
  }
}

// Pushes steps 0..kSteps-1, two buffers in flight, until a push fails (adjsnapd was killed) or
// all are stored. Returns which steps the daemon acknowledged as stored.
std::vector<bool> PushUntilFailure(Client& c, Mode mode, uint64_t run_id, uint64_t seed) {
  std::vector<std::vector<char>> bufs(2);
  std::vector<PushHandle> handles;
  std::vector<bool> acked(kSteps, false);
  for (uint64_t t = 0; t < kSteps; ++t) {
    if (t >= 2 && !handles[t - 2].WaitReleased().ok()) break;
    std::vector<char>& b = bufs[t % 2];
    Fill(mode, &b, seed, t);
    auto h = c.Push(run_id, t, b.data(), b.size());
    if (!h.ok()) break;
    handles.push_back(*h);
  }
  for (uint64_t t = 0; t < handles.size(); ++t) acked[t] = handles[t].WaitStored().ok();
  return acked;
}

// Polls until every step below `boundary` has a durable copy on disk, for up to 60 s.
bool WaitOnDisk(Client& c, const std::string& run, uint64_t boundary) {
  return WaitUntil(
      [&] {
        auto list = c.ListSnapshots(run);
        if (!list.ok()) return false;
        uint64_t on_disk = 0;
        for (const auto& l : *list) on_disk += l.step < boundary && l.on_disk;
        return on_disk == boundary;
      },
      std::chrono::seconds(60));
}

struct Outcomes {
  uint64_t exact = 0;         // read back byte-exact
  uint64_t lost = 0;          // acknowledged, reported lost (a host-tier copy, or a cut write)
  uint64_t never_stored = 0;  // not acknowledged and not in the catalog
  uint64_t unacked_kept = 0;  // not acknowledged, yet stored whole (the reply was cut)
  uint64_t disk_cut = 0;      // acknowledged, bound for disk, lost: the kill hit its write
};

class KillDuringWrites : public AdjsnapTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartDaemon(ThreeLevels())); }
  // A local spool of 15 steps and a shared one beside it (a directory here): a run's disk range
  // of 32 steps spans both, and a run without N moves its oldest local steps to the shared one
  // as the local one fills, so the kills land in moves too.
  DaemonOptions ThreeLevels() const {
    return Options(kHostMem,
                   {"--spool-dirs", dir() + "/local", "--disk-mem", "8M", "--shared-spool-dirs",
                    dir() + "/shared", "--shared-disk-mem", "256M"});
  }
  // Snapshot files left in the spools' run directories (not in quarantine/, where lost steps'
  // files are kept on purpose).
  std::vector<std::string> SpoolFiles() const {
    std::vector<std::string> files;
    for (const char* spool : {"/local", "/shared"}) {
      std::error_code ec;
      for (const auto& run : std::filesystem::directory_iterator(dir() + spool, ec)) {
        if (run.path().filename().string().rfind("run-", 0) != 0) continue;
        for (const auto& f : std::filesystem::directory_iterator(run.path(), ec)) {
          files.push_back(f.path().string());
        }
      }
    }
    return files;
  }

  // Every step of the run after a restart: exact or lost; a step never acknowledged may also
  // be absent. Wrong bytes, another error code, or an acknowledged step missing fail.
  void Verify(Mode mode, const RunSpec& spec, uint64_t run_id, uint64_t host_boundary,
              uint64_t seed, const std::vector<bool>& acked, Outcomes* out) {
    Client* c = Connect();
    ASSERT_NE(c, nullptr);
    auto again = c->OpenRun(spec);  // attaches to the recovered run
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    ASSERT_FALSE(again->created);
    ASSERT_EQ(again->run_id, run_id);
    std::vector<char> want, got;
    for (uint64_t t = 0; t < kSteps; ++t) {
      SCOPED_TRACE("step " + std::to_string(t));
      Fill(mode, &want, seed, t);
      got.assign(want.size(), 0);
      Status s = c->Fetch(run_id, t, got.data(), got.size());
      if (s.ok()) {
        ASSERT_TRUE(got == want) << "wrong bytes after a restart\n" << daemon().Log();
        ++(acked[t] ? out->exact : out->unacked_kept);
        continue;
      }
      if (s.code() == Code::kNotFound) {
        ASSERT_FALSE(acked[t]) << "an acknowledged step vanished: " << s.ToString();
        ++out->never_stored;
        continue;
      }
      ASSERT_EQ(s.code(), Code::kDataLoss) << s.ToString() << "\n" << daemon().Log();
      EXPECT_NE(s.message().find("lost"), std::string::npos) << s.ToString();
      auto where = c->Locate(spec.name, t);
      ASSERT_TRUE(where.ok()) << where.status().ToString();
      EXPECT_EQ(where->tier, Tier::kLost);
      ++out->lost;
      // Bound for disk: with a declared count, below the host boundary; without one, every
      // step but the newest that fit in host memory.
      const bool disk_bound = mode == Mode::kFullHost ? t + 16 < kSteps : t < host_boundary;
      if (acked[t] && disk_bound) ++out->disk_cut;
    }
  }
};

TEST_F(KillDuringWrites, EveryStepIsExactOrReportedLostNeverWrong) {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("ADJSNAP_CRASH_SEED")) seed = std::strtoull(s, nullptr, 10);
  int kills = 60;
  if (const char* k = std::getenv("ADJSNAP_CRASH_KILLS")) kills = std::atoi(k);
  std::printf("kill -9 during writes: seed %llu (ADJSNAP_CRASH_SEED=%llu repeats it), %d kills\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed), kills);
  RecordProperty("seed", std::to_string(seed));
  // The push the kill interrupts must fail, marking where the run stopped, rather than wait for
  // the next start (libadjsnap reconnects for 60 s by default; restart_test covers that).
  setenv("ADJSNAP_RECONNECT_TIMEOUT", "0", 1);
  std::mt19937_64 rng(seed);
  const auto started = std::chrono::steady_clock::now();

  // How long a whole run takes to push and reach disk here, per mode, measured without a
  // kill (and checked exact): the kills are drawn across one and a half times that window, so
  // they land in pushes, in demotions and compressions, and now and then after all of it.
  std::chrono::microseconds window[std::size(kModes)];
  for (size_t m = 0; m < std::size(kModes); ++m) {
    Mode mode = kModes[m];
    SCOPED_TRACE(ModeName(mode));
    Client* c = Connect();
    ASSERT_NE(c, nullptr);
    RunSpec spec = SpecFor(mode, std::string("calibrate-") + ModeName(mode));
    RunInfo run = OpenRun(*c, spec);
    ASSERT_NE(run.run_id, 0u);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<bool> acked = PushUntilFailure(*c, mode, run.run_id, seed);
    ASSERT_EQ(std::count(acked.begin(), acked.end(), true), static_cast<long>(kSteps));
    ASSERT_TRUE(WaitOnDisk(*c, spec.name, run.host_boundary ? run.host_boundary : kSteps - 16))
        << daemon().Log();
    window[m] = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - t0);
    if (mode == Mode::kFullHost) {
      // Without N its first steps went to the local spool and moved on as it filled: step 0's
      // file ends in the shared one (so the kills below can land in moves).
      EXPECT_TRUE(WaitUntil(
          [&] {
            for (const std::string& f : SpoolFiles()) {
              if (f.rfind(dir() + "/shared/", 0) == 0 && f.find("/step-0-") != std::string::npos)
                return true;
            }
            return false;
          },
          std::chrono::seconds(10)))
          << "step 0 of a run without N did not move to the shared spool\n"
          << daemon().Log();
    }
    std::vector<char> want, got;
    for (uint64_t t = 0; t < kSteps; ++t) {
      Fill(mode, &want, seed, t);
      got.assign(want.size(), 0);
      ASSERT_TRUE(c->Fetch(run.run_id, t, got.data(), got.size()).ok());
      ASSERT_TRUE(got == want) << "step " << t;
    }
    ASSERT_TRUE(c->DeleteRun(spec.name).ok());
    std::printf("  %s: a run of %llu steps reaches disk in %.0f ms\n", ModeName(mode),
                static_cast<unsigned long long>(kSteps), window[m].count() / 1000.0);
  }
  ReleaseClients();
  // Deleted, those runs leave nothing behind: no file a move or demotion made stays unnamed.
  std::vector<std::string> left;
  EXPECT_TRUE(WaitUntil(
      [&] {
        left = SpoolFiles();
        return left.empty();
      },
      std::chrono::seconds(10)))
      << left.size() << " files left in the spools after the runs were deleted, the first "
      << left.front();

  Outcomes total;
  for (int k = 0; k < kills; ++k) {
    const Mode mode = kModes[k % std::size(kModes)];
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int64_t>(
        0, window[k % std::size(kModes)].count() * 3 / 2)(rng));
    const uint64_t run_seed = rng();
    SCOPED_TRACE("kill " + std::to_string(k) + " (" + ModeName(mode) + ", after " +
                 std::to_string(delay.count() / 1000) + " ms)");
    Client* c = Connect();
    ASSERT_NE(c, nullptr);
    RunSpec spec = SpecFor(mode, "crash-" + std::to_string(k));
    RunInfo run = OpenRun(*c, spec);
    ASSERT_NE(run.run_id, 0u);
    const pid_t pid = daemon().pid();
    std::thread killer([pid, delay] {
      std::this_thread::sleep_for(delay);
      kill(pid, SIGKILL);  // reaped by KillDaemon below
    });
    std::vector<bool> acked = PushUntilFailure(*c, mode, run.run_id, run_seed);
    killer.join();
    KillDaemon();
    ASSERT_NO_FATAL_FAILURE(StartDaemon(ThreeLevels()));
    Outcomes out;
    ASSERT_NO_FATAL_FAILURE(
        Verify(mode, spec, run.run_id, run.host_boundary, run_seed, acked, &out));
    ASSERT_TRUE(daemon().Running()) << daemon().Log();
    Client* after = Connect();
    ASSERT_NE(after, nullptr);
    ASSERT_TRUE(after->DeleteRun(spec.name).ok());  // the spool stays small
    ReleaseClients();
    total.exact += out.exact;
    total.lost += out.lost;
    total.never_stored += out.never_stored;
    total.unacked_kept += out.unacked_kept;
    total.disk_cut += out.disk_cut;
  }
  ExpectRoundTrip();
  // Every run was deleted after its check: what is left in a spool is a file that a cut write
  // or move left and the restart's recovery did not remove (removals run on the I/O threads).
  EXPECT_TRUE(WaitUntil(
      [&] {
        left = SpoolFiles();
        return left.empty();
      },
      std::chrono::seconds(10)))
      << left.size() << " files left in the spools, the first " << left.front();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf(
      "kill -9 during writes: %d kill points in %.1f s, seed %llu: %llu steps exact, %llu "
      "reported lost (%llu of them cut on their way to disk), %llu never stored, %llu stored "
      "though unacknowledged; no wrong bytes\n",
      kills, seconds, static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(total.exact), static_cast<unsigned long long>(total.lost),
      static_cast<unsigned long long>(total.disk_cut),
      static_cast<unsigned long long>(total.never_stored),
      static_cast<unsigned long long>(total.unacked_kept));
  // The kills landed while writes were under way, not only after everything was on disk.
  EXPECT_GT(total.disk_cut + total.never_stored, 0u);
  // Host memory does not survive a kill: every exact step came back from a recovered spool
  // file, so recovery did more than report everything lost.
  EXPECT_GT(total.exact, 0u);
}

// Recovered spool files are checked in the background after a restart: a flipped byte is
// found and the step reported lost without anyone fetching it.
class RecoveredSpoolScrub : public AdjsnapTest {};

TEST_F(RecoveredSpoolScrub, AFlippedByteIsReportedLostWithoutAFetch) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options(kHostMem)));
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunSpec spec = SpecFor(Mode::kPlaced, "scrub");
  RunInfo run = OpenRun(*c, spec);
  ASSERT_GT(run.host_boundary, 4u);
  std::vector<bool> acked = PushUntilFailure(*c, Mode::kPlaced, run.run_id, 5);
  ASSERT_EQ(std::count(acked.begin(), acked.end(), true), static_cast<long>(kSteps));
  ASSERT_TRUE(WaitOnDisk(*c, "scrub", run.host_boundary)) << daemon().Log();
  StopDaemon();

  // Spool layout (docs/architecture.md): <state>/spool/run-<id>/step-<step>-e<epoch>-g<gen>.
  const std::filesystem::path run_dir =
      std::filesystem::path(dir()) / "state" / "spool" / ("run-" + std::to_string(run.run_id));
  const uint64_t bad = 2, good = 3;
  std::filesystem::path victim;
  for (const auto& e : std::filesystem::directory_iterator(run_dir)) {
    if (e.path().filename().string().rfind("step-" + std::to_string(bad) + "-", 0) == 0) {
      victim = e.path();
    }
  }
  ASSERT_FALSE(victim.empty()) << "no spool file for step " << bad << " in " << run_dir;
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << victim;
    f.seekg(kRawStep / 2);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    f.seekp(kRawStep / 2);
    f.write(&byte, 1);
    ASSERT_TRUE(f.good());
  }

  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options(kHostMem)));
  c = Connect();
  ASSERT_NE(c, nullptr);
  Tier tier = Tier::kUnspecified;
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto where = c->Locate("scrub", bad);
        tier = where.ok() ? where->tier : Tier::kUnspecified;
        return tier == Tier::kLost;
      },
      std::chrono::seconds(30)))
      << "step " << bad << " is still tier " << static_cast<int>(tier) << "\n"
      << daemon().Log();
  EXPECT_FALSE(std::filesystem::exists(victim)) << "the corrupt file is removed";
  // The scrub condemned only the corrupt file: an intact neighbour stays on disk and exact.
  auto neighbour = c->Locate("scrub", good);
  ASSERT_TRUE(neighbour.ok()) << neighbour.status().ToString();
  EXPECT_EQ(neighbour->tier, Tier::kDisk);
  std::vector<char> want, got(kRawStep);
  Fill(Mode::kPlaced, &want, 5, good);
  ASSERT_TRUE(c->Fetch(run.run_id, good, got.data(), got.size()).ok());
  EXPECT_TRUE(got == want);
  Status s = c->Fetch(run.run_id, bad, got.data(), got.size());
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  ExpectRoundTrip();
}

}  // namespace
}  // namespace adjsnap::testing
