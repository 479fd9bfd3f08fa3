// Device pushes and fetches against a real adjsnapd: byte-exact round trips over both data
// paths, the NaN check of device data, and the device tier (placement on three tiers, the pool
// of an open-ended run). On a GPU they run through CUDA's copy engine; where no GPU is usable,
// through the host copy engine (support/host_copy_engine.h), which the fixture installs: the
// same paths of libadjsnap, with memcpy for the GPU's copy engine and host memory for device
// memory, checked for balanced pins, device memory given back and the data path each copy took.
// Only the CUDA example solver needs the GPU itself.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "copy_engine.h"
#include "daemon_process.h"
#include "host_copy_engine.h"
#include "adjsnap/kernels.h"

namespace adjsnap::testing {
namespace {

using Kind = detail::CopyEngine::Kind;

class DeviceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    probe_ = kernels::ProbeDevice();
    if (!probe_.usable) {
      host_engine_ = std::make_unique<HostCopyEngine>();
      detail::SetCopyEngineForTesting(host_engine_.get());
    }
    engine_ = &detail::Engine();
    auto d = DaemonProcess::Start({dir_.path(), "1G", {}, {}});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(d).value();
    auto c = ConnectClient(*daemon_, /*map_host_tier=*/GetParam());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
    ASSERT_TRUE(engine_->CreateStream(&stream_).ok());
  }
  void TearDown() override {
    client_.reset();  // unpins, and gives the pool back
    for (void* p : device_) engine_->DeviceRelease(p);
    if (stream_) engine_->DestroyStream(stream_);
    if (host_engine_) {
      EXPECT_EQ(host_engine_->pinned_ranges(), 0u) << "a pinned range was never unpinned";
      EXPECT_EQ(host_engine_->pins(), host_engine_->unpins());
      EXPECT_EQ(host_engine_->device_allocations(), 0u) << "device memory was not given back";
      detail::SetCopyEngineForTesting(nullptr);
    }
  }
  void* DeviceAlloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_TRUE(engine_->DeviceAllocate(bytes, &p).ok());
    device_.push_back(p);
    return p;
  }
  // Enqueued on stream_, before the push that reads it.
  void ToDeviceAsync(void* device, const void* host, size_t bytes) {
    ASSERT_TRUE(engine_->CopyAsync(device, host, bytes, Kind::kHostToDevice, stream_).ok());
  }
  void ToDevice(void* device, const void* host, size_t bytes) {
    ToDeviceAsync(device, host, bytes);
    ASSERT_TRUE(engine_->Synchronize(stream_, "test copy").ok());
  }
  void ToHost(void* host, const void* device, size_t bytes) {
    ASSERT_TRUE(engine_->CopyAsync(host, device, bytes, Kind::kDeviceToHost, stream_).ok());
    ASSERT_TRUE(engine_->Synchronize(stream_, "test copy").ok());
  }
  kernels::DeviceProbe probe_;
  std::unique_ptr<HostCopyEngine> host_engine_;  // null on a GPU
  detail::CopyEngine* engine_ = nullptr;
  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  void* stream_ = nullptr;
  std::vector<void*> device_;
};

TEST_P(DeviceTest, DeviceSnapshotsRoundTripByteExact) {
  constexpr size_t kBytes = (32 << 20) + 24;
  constexpr uint64_t kSteps = 12;
  auto run = client_->OpenRun({.name = "device", .steps = kSteps, .bytes_per_step = kBytes});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::vector<char> host(kBytes);
  void* u = DeviceAlloc(kBytes);
  EXPECT_TRUE(engine_->IsDevice(u));
  EXPECT_FALSE(engine_->IsDevice(host.data()));
  for (uint64_t t = 0; t < kSteps; ++t) {
    FillPattern(host.data(), kBytes, 5, t);
    ToDeviceAsync(u, host.data(), kBytes);
    auto h = client_->PushDevice(run->run_id, t, u, kBytes, stream_);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(h->WaitReleased().ok());  // u may be overwritten
  }
  std::vector<char> back(kBytes), want(kBytes);
  void* v = DeviceAlloc(kBytes);
  for (uint64_t t = kSteps; t-- > 0;) {
    auto f = client_->FetchDeviceAsync(run->run_id, t, v, kBytes, stream_);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(f->Wait().ok());
    ToHost(back.data(), v, kBytes);
    FillPattern(want.data(), kBytes, 5, t);
    ASSERT_EQ(back, want) << "step " << t;
  }
  if (host_engine_) {
    // Mapped: the copy engine writes the pinned tier itself, each block in its chunks' pieces.
    // UCX: the bytes go through a staging buffer of pageable memory, as a UCX without CUDA
    // support needs; none reaches UCX as device memory.
    if (GetParam()) {
      EXPECT_GE(host_engine_->copies_into_pinned(), kSteps);
      EXPECT_GE(host_engine_->copies_from_pinned(), kSteps);
      EXPECT_GT(host_engine_->pins(), 0u);
    } else {
      EXPECT_EQ(host_engine_->copies_into_pinned(), 0u);
      EXPECT_EQ(host_engine_->copies_from_pinned(), 0u);
      EXPECT_EQ(host_engine_->pins(), 0u);
    }
  }
}

TEST_P(DeviceTest, ACheckedRunRefusesADeviceNaN) {
  std::vector<double> field(4096, 0.25);
  field[4000] = NAN;
  RunSpec spec;
  spec.name = "checked";
  spec.steps = 2;
  spec.bytes_per_step = 4096 * 8;
  spec.dtype = Dtype::kFloat64;
  spec.check_finite = true;
  auto run = client_->OpenRun(spec);
  ASSERT_TRUE(run.ok());
  void* d = DeviceAlloc(4096 * 8);
  ToDevice(d, field.data(), 4096 * 8);
  auto h = client_->PushDevice(run->run_id, 0, d, 4096 * 8, stream_);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("element 4000"), std::string::npos) << h.status().message();
}

// Reverse-order placement over three tiers: a GPU pool of 6 steps, a host tier of a few steps
// and a disk spool. The newest steps stay on the device, the next in host memory, the oldest
// go to disk; the backward pass reads every one back byte-exact, device steps without a copy
// through the daemon.
TEST_P(DeviceTest, ThreeTiersKeepTheNewestStepsClosestToTheSolver) {
  constexpr size_t kBytes = (1 << 20) + 64;
  constexpr uint64_t kSteps = 24, kPoolSteps = 6;
  // A daemon of its own beside the fixture's, in a directory of its own (one that exists).
  TempDir three;
  ASSERT_FALSE(three.path().empty());
  std::string spool = three.path() + "/spool";
  auto d = DaemonProcess::Start({three.path(), "8M",
                                 {"--spool-dirs", spool, "--disk-mem", "256M"}, {}});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ClientOptions options;
  options.socket_path = (*d)->socket();
  options.map_host_tier = GetParam();
  options.device_mem_bytes = kPoolSteps * (kBytes + 256);  // slots are 256-byte aligned
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  RunSpec spec;
  spec.name = "three-tiers";
  spec.steps = kSteps;
  spec.bytes_per_step = kBytes;
  spec.layers = "DiskHostDevice";
  auto run = (*c)->OpenRun(spec);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->device_boundary, kSteps - kPoolSteps);
  EXPECT_GT(run->host_boundary, 0u);
  EXPECT_LT(run->host_boundary, run->device_boundary);
  std::vector<char> host(kBytes);
  void* u = DeviceAlloc(kBytes);
  for (uint64_t t = 0; t < kSteps; ++t) {
    FillPattern(host.data(), kBytes, 9, t);
    ToDeviceAsync(u, host.data(), kBytes);
    auto h = (*c)->PushDevice(run->run_id, t, u, kBytes, stream_);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(h->WaitStored().ok());
  }
  // Steps below the host boundary are written to disk after they are stored: wait for them.
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto listed = (*c)->ListSnapshots("three-tiers");
        uint64_t on_disk = 0;
        for (const Location& l : listed.ok() ? *listed : std::vector<Location>{}) {
          on_disk += l.step < run->host_boundary && l.on_disk;
        }
        return on_disk == run->host_boundary;
      },
      std::chrono::seconds(30)))
      << (*d)->Log();
  auto list = (*c)->ListSnapshots("three-tiers");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), kSteps);
  for (const Location& l : *list) {
    Tier want = l.step >= run->device_boundary ? Tier::kDevice
                : l.step >= run->host_boundary ? Tier::kHost
                                               : Tier::kDisk;
    if (want == Tier::kDisk) {
      EXPECT_TRUE(l.on_disk) << "step " << l.step;
    } else {
      EXPECT_EQ(l.tier, want) << "step " << l.step;
    }
  }
  auto tiers = (*c)->Tiers();
  ASSERT_TRUE(tiers.ok());
  EXPECT_EQ(tiers->back().tier, Tier::kDevice);
  EXPECT_EQ(tiers->back().snapshots, kPoolSteps);
  std::vector<char> back(kBytes), want(kBytes);
  void* v = DeviceAlloc(kBytes);
  for (uint64_t t = kSteps; t-- > 0;) {
    auto f = (*c)->FetchDeviceAsync(run->run_id, t, v, kBytes, stream_);
    ASSERT_TRUE(f.ok()) << "step " << t << ": " << f.status().ToString();
    ASSERT_TRUE(f->Wait().ok());
    ToHost(back.data(), v, kBytes);
    FillPattern(want.data(), kBytes, 9, t);
    ASSERT_EQ(back, want) << "step " << t;
  }
  EXPECT_EQ((*c)->Locate("three-tiers", kSteps - 1).status().code(), Code::kNotFound);  // read once
  c->reset();
  EXPECT_EQ((*d)->Stop(), 0) << (*d)->Log();
}

// With the step count unknown the pool keeps the newest steps pushed so far and moves the
// oldest to the daemon as it fills; host pushes and fetches use the pool too.
TEST_P(DeviceTest, AnOpenEndedRunKeepsTheNewestStepsInThePool) {
  constexpr size_t kBytes = 256 << 10;
  ClientOptions options;
  options.socket_path = daemon_->socket();
  options.map_host_tier = GetParam();
  options.device_mem_bytes = 4 * kBytes;
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  RunSpec spec{.name = "open-ended", .bytes_per_step = kBytes, .layers = "HostDevice",
               .keep = true};
  auto run = (*c)->OpenRun(spec);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  // Reopening it here attaches, and keeps the slots it has (the pool has no room for more).
  auto again = (*c)->OpenRun(spec);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->created);
  std::vector<char> host(kBytes), back(kBytes);
  for (uint64_t t = 0; t < 10; ++t) {
    FillPattern(host.data(), kBytes, 3, t);
    auto h = (*c)->Push(run->run_id, t, host.data(), kBytes);
    ASSERT_TRUE(h.ok() && h->WaitStored().ok()) << t;
  }
  for (uint64_t t = 0; t < 10; ++t) {
    auto where = (*c)->Locate("open-ended", t);
    ASSERT_TRUE(where.ok());
    EXPECT_EQ(where->tier, t >= 6 ? Tier::kDevice : Tier::kHost) << "step " << t;
    ASSERT_TRUE((*c)->Fetch(run->run_id, t, back.data(), kBytes).ok());
    FillPattern(host.data(), kBytes, 3, t);
    ASSERT_EQ(back, host) << "step " << t;
  }
  // Deleting a device step frees its slot for the step pushed again.
  ASSERT_TRUE((*c)->DeleteSnapshot("open-ended", 9).ok());
  auto repushed = (*c)->Push(run->run_id, 9, host.data(), kBytes);
  ASSERT_TRUE(repushed.ok() && repushed->WaitStored().ok());
  EXPECT_EQ((*c)->Locate("open-ended", 9)->tier, Tier::kDevice);
  ASSERT_TRUE((*c)->DeleteRun("open-ended").ok());
}

// The CUDA example solver, forward and backward through adjsnapd, checksums compared on the GPU.
TEST_P(DeviceTest, TheCudaExampleSolverRoundTripsEverySnapshot) {
#ifndef ACOUSTIC2D_CUDA_BINARY
  GTEST_SKIP() << "acoustic2d_cuda is built with CUDA only, and this build has none";
#else
  if (host_engine_) {
    GTEST_SKIP() << "acoustic2d_cuda is a separate process whose wavefield is computed by CUDA "
                    "kernels, which need a GPU (" << probe_.description
                 << "); the host copy engine stands in for libadjsnap's copies only";
  }
  std::string out, err;
  std::vector<std::string> argv = {ACOUSTIC2D_CUDA_BINARY, "--nx", "256", "--ny", "256",
                                   "--steps", "60", "--socket", daemon_->socket()};
  if (!GetParam()) argv.insert(argv.begin(), {"/usr/bin/env", "ADJSNAP_DATA_PATH=ucx"});
  ASSERT_EQ(RunProgram(argv, &out, &err), 0) << out << err;
  EXPECT_NE(out.find("60/60 checksums match"), std::string::npos) << out;
  // Again with a 4 MiB device tier: the newest 15 steps of 256 KiB never leave the GPU.
  argv.insert(argv.end(), {"--layers", "HostDevice", "--run", "acoustic2d-cuda-pool"});
  argv.insert(argv.begin(), {"/usr/bin/env", "ADJSNAP_DEVICE_MEM=4M"});
  ASSERT_EQ(RunProgram(argv, &out, &err), 0) << out << err;
  EXPECT_NE(out.find("60/60 checksums match"), std::string::npos) << out;
#endif
}

INSTANTIATE_TEST_SUITE_P(DataPaths, DeviceTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "mapped" : "ucx";
                         });

}  // namespace
}  // namespace adjsnap::testing
