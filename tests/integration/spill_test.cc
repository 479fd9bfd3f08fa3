// The disk tier through the real daemon: runs larger than host memory, reverse-order
// placement, crash recovery after kill -9, a filesystem that fills up.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "acoustic_model.h"
#include "adjsnap/client.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

constexpr size_t kStep = (1 << 20) + 40;  // not a page multiple: exercises the padded files
constexpr uint64_t kSteps = 48;           // 3x the 16 MiB host tier

// Pushes steps [first, end) of the pattern with seed `seed`, waiting until each is stored.
void PushSteps(Client& c, uint64_t run_id, uint64_t first, uint64_t end, uint64_t seed) {
  std::vector<std::vector<char>> src(2, std::vector<char>(kStep));
  std::vector<PushHandle> handles;
  for (uint64_t t = first; t < end; ++t) {
    std::vector<char>& buf = src[t % 2];
    if (handles.size() >= 2) {
      ASSERT_TRUE(handles[handles.size() - 2].WaitReleased().ok());
    }
    FillPattern(buf.data(), kStep, seed, t);
    auto h = c.Push(run_id, t, buf.data(), kStep);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handles.push_back(*h);
  }
  for (auto& h : handles) ASSERT_TRUE(h.WaitStored().ok()) << h.WaitStored().ToString();
}

Status FetchExact(Client& c, uint64_t run_id, uint64_t step, uint64_t seed) {
  std::vector<char> got(kStep), want(kStep);
  ADJSNAP_RETURN_IF_ERROR(c.Fetch(run_id, step, got.data(), kStep));
  FillPattern(want.data(), kStep, seed, step);
  if (got != want) return Status::DataLoss("step " + std::to_string(step) + " differs");
  return Status::Ok();
}

// Polls until every step below `boundary` has its durable copy on disk (demotion is
// background work) or 60 s pass.
bool WaitOnDisk(Client& c, const std::string& run, uint64_t boundary) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto list = c.ListSnapshots(run);
    if (!list.ok()) return false;
    uint64_t on_disk = 0;
    for (const auto& l : *list) on_disk += l.step < boundary && l.on_disk;
    if (on_disk == boundary) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class SpillTest : public AdjsnapTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Start()); }
  void Start() {
    ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M")));
    client_ = Connect(/*map_host_tier=*/GetParam());
    ASSERT_NE(client_, nullptr);
  }
  RunInfo Open(const std::string& name, bool keep) {
    RunSpec spec = Spec(name, kSteps, kStep);
    spec.keep = keep;
    return OpenRun(*client_, spec);
  }

  Client* client_ = nullptr;  // the fixture's
};

TEST_P(SpillTest, ARunThreeTimesTheHostTierRoundTripsWithTheNewestStepsInHost) {
  RunInfo run = Open("big", /*keep=*/false);
  // 16 MiB hold 15 blocks of 1 MiB + 4 KiB; two stay free for traffic: 13 steps in host.
  const uint64_t j = kSteps - 13;
  ASSERT_EQ(run.host_boundary, j);
  PushSteps(*client_, run.run_id, 0, kSteps, 11);
  ASSERT_TRUE(WaitOnDisk(*client_, "big", j)) << daemon().Log();
  auto list = client_->ListSnapshots("big");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), kSteps);
  for (const auto& l : *list) {
    EXPECT_EQ(l.on_disk, l.step < j) << "step " << l.step;
    if (l.step >= j) {
      EXPECT_EQ(l.tier, Tier::kHost) << "step " << l.step;
    }
  }
  for (uint64_t t = kSteps; t-- > 0;) {
    Status s = FetchExact(*client_, run.run_id, t, 11);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Read-once: the backward pass consumed every step. The daemon releases a step when it
  // learns the client has the bytes (lease release or send completion), just after the fetch
  // returned, so the last one may take a moment.
  size_t left = kSteps;
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto after = client_->ListSnapshots("big");
        left = after.ok() ? after->size() : kSteps;
        return after.ok() && left == 0;
      },
      std::chrono::seconds(30)))
      << left << " steps left\n"
      << daemon().Log();
  Status again = client_->Fetch(run.run_id, 3, std::vector<char>(kStep).data(), kStep);
  EXPECT_EQ(again.code(), Code::kNotFound);
  EXPECT_NE(again.message().find("read once"), std::string::npos) << again.ToString();
}

TEST_P(SpillTest, KillMinus9MidRunKeepsDiskStepsAndReportsHostStepsLost) {
  RunInfo run = Open("crash", /*keep=*/true);
  const uint64_t j = run.host_boundary;
  const uint64_t pushed = j + 5;  // mid-run: the forward pass is not over
  PushSteps(*client_, run.run_id, 0, pushed, 21);
  ASSERT_TRUE(WaitOnDisk(*client_, "crash", j)) << daemon().Log();
  KillDaemon();  // its client leaves first
  ASSERT_NO_FATAL_FAILURE(Start());
  for (uint64_t t = 0; t < pushed; ++t) {
    auto where = client_->Locate("crash", t);
    ASSERT_TRUE(where.ok()) << where.status().ToString();
    if (t < j) {
      EXPECT_TRUE(where->on_disk) << "step " << t;
      Status s = FetchExact(*client_, run.run_id, t, 21);
      EXPECT_TRUE(s.ok()) << s.ToString();
    } else {
      EXPECT_EQ(where->tier, Tier::kLost) << "step " << t;
      Status s = client_->Fetch(run.run_id, t, std::vector<char>(kStep).data(), kStep);
      EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
      EXPECT_NE(s.message().find("lost"), std::string::npos) << s.ToString();
    }
  }
  // The forward pass goes on after the restart (lost steps stay recorded as lost).
  PushSteps(*client_, run.run_id, pushed, kSteps, 21);
  Status s = FetchExact(*client_, run.run_id, kSteps - 1, 21);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_P(SpillTest, AReversiblyCompressedRunIsStoredSmallerAndComesBackBitExact) {
  // The example solver's wavefields, 512 x 512 float32: what zfp is for.
  constexpr int kN = 512;
  constexpr uint64_t kBytes = uint64_t{kN} * kN * sizeof(float), kCount = 40;  // 40 MiB
  std::vector<std::vector<float>> fields;  // every 10th step of one forward simulation
  {
    std::vector<float> vel2 = acoustic::TwoLayerModel(kN, kN);
    std::vector<std::vector<float>> u(3, std::vector<float>(kN * kN, 0.0f));
    for (int t = 0; fields.size() < kCount; ++t) {
      int ib = (t + 2) % 3;
      acoustic::Step(kN, kN, vel2.data(), u[t % 3].data(), u[(t + 1) % 3].data(), u[ib].data());
      u[ib][acoustic::SourceIndex(kN, kN)] += acoustic::Ricker(t, acoustic::kDt, acoustic::kF0);
      if (t >= 20 && t % 10 == 0) fields.push_back(u[ib]);
    }
  }
  // On demotion: the spilled steps are compressed on disk. At ingest: every step is
  // compressed in host memory too (the disk's compressed steps were written as they were).
  for (bool at_ingest : {false, true}) {
    SCOPED_TRACE(at_ingest ? "at ingest" : "on demotion");
    RunSpec spec;
    spec.name = at_ingest ? "zfp-ingest" : "zfp";
    spec.steps = kCount;
    spec.bytes_per_step = kBytes;
    spec.dtype = Dtype::kFloat32;
    spec.shape = {kN, kN};
    spec.codec = Codec::kZfpReversible;
    spec.compress_at_ingest = at_ingest;
    auto run = client_->OpenRun(spec);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    for (uint64_t t = 0; t < kCount; ++t) {
      auto h = client_->Push(run->run_id, t, fields[t].data(), kBytes);
      ASSERT_TRUE(h.ok() && h->WaitStored().ok());
    }
    ASSERT_TRUE(WaitOnDisk(*client_, spec.name, run->host_boundary)) << daemon().Log();
    // On demotion, the spilled steps end up compressed; at ingest, every step (compression is
    // background work: poll).
    const uint64_t expected = at_ingest ? kCount : run->host_boundary;
    uint64_t compressed = 0;
    EXPECT_TRUE(WaitUntil(
        [&] {
          auto list = client_->ListSnapshots(spec.name);
          compressed = 0;
          for (const auto& l : list.ok() ? *list : std::vector<Location>{}) {
            compressed += l.codec == Codec::kZfpReversible;
          }
          return compressed == expected;
        },
        std::chrono::seconds(30)))
        << compressed << " of " << expected << " steps compressed\n"
        << daemon().Log();
    auto list = client_->ListSnapshots(spec.name);
    ASSERT_TRUE(list.ok());
    for (const auto& l : *list) {
      if (l.codec == Codec::kZfpReversible) {
        EXPECT_LT(l.stored_bytes, kBytes / 2) << "step " << l.step;
      }
    }
    std::vector<float> got(kN * kN);
    for (uint64_t t = kCount; t-- > 0;) {
      ASSERT_TRUE(client_->Fetch(run->run_id, t, got.data(), kBytes).ok());
      ASSERT_EQ(0, std::memcmp(got.data(), fields[t].data(), kBytes)) << "step " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DataPaths, SpillTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "mapped" : "ucx"; });

// adjsnapd whose spool is a 4 MiB tmpfs in a private mount namespace: a real filesystem that
// fills up, while the disk budget (64 MiB) says there is room.
class SmallFilesystem : public AdjsnapTest {};

TEST_F(SmallFilesystem, FillsUpWithoutLosingOrCorruptingWhatWasStored) {
  std::string spool = dir() + "/spool";
  std::filesystem::create_directories(spool);
  DaemonOptions o = Options("8M", {"--spool-dirs", spool, "--disk-mem", "64M"});
  o.wrapper = {"/usr/bin/unshare", "--user", "--map-root-user", "--mount", "/bin/sh", "-c",
               "mount -t tmpfs -o size=4m adjsnap-test-spool \"$SPOOL_DIR\" && exec \"$@\"", "sh"};
  setenv("SPOOL_DIR", spool.c_str(), 1);
  Status started = TryStartDaemon(o);
  if (!started.ok() && started.message().find("unshare") != std::string::npos) {
    GTEST_SKIP() << "no unprivileged mount namespaces here: " << started.ToString();
  }
  ASSERT_TRUE(started.ok()) << started.ToString();
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunSpec spec;
  spec.name = "fill";
  spec.bytes_per_step = kStep;  // steps unknown: a full host tier demotes its oldest step
  auto run = c->OpenRun(spec);
  ASSERT_TRUE(run.ok());
  std::vector<char> buf(kStep);
  uint64_t stored = 0;
  Status failure;
  for (uint64_t t = 0; t < 32 && failure.ok(); ++t) {
    FillPattern(buf.data(), kStep, 31, t);
    auto h = c->Push(run->run_id, t, buf.data(), kStep);
    ASSERT_TRUE(h.ok());
    failure = h->WaitStored();
    if (failure.ok()) ++stored;
  }
  ASSERT_EQ(failure.code(), Code::kResourceExhausted) << failure.ToString();
  EXPECT_NE(failure.message().find("disk tier"), std::string::npos) << failure.ToString();
  // 8 MiB of host and at most 4 MiB of disk: everything acknowledged is intact, and the
  // catalog lists exactly the acknowledged steps.
  EXPECT_GE(stored, 8u);
  auto list = c->ListSnapshots("fill");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), stored);
  uint64_t on_disk = 0;
  for (const auto& l : *list) on_disk += l.on_disk;
  EXPECT_GT(on_disk, 0u);
  for (uint64_t t = stored; t-- > 0;) {
    Status s = FetchExact(*c, run->run_id, t, 31);
    EXPECT_TRUE(s.ok()) << "step " << t << ": " << s.ToString();
  }
  // Consumed steps freed room: the daemon takes pushes again.
  FillPattern(buf.data(), kStep, 31, 100);
  auto h = c->Push(run->run_id, 100, buf.data(), kStep);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->WaitStored().ok()) << h->WaitStored().ToString();
}

}  // namespace
}  // namespace adjsnap::testing
