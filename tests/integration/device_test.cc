// Device (CUDA) pushes and fetches against a real snapd (CTest label `gpu`; skipped where no
// GPU is usable): byte-exact round trips over both data paths, and the GPU NaN check.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "daemon_process.h"
#include "snapd/kernels.h"

namespace snapd::testing {
namespace {

class DeviceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    kernels::DeviceProbe probe = kernels::ProbeDevice();
    if (!probe.usable) GTEST_SKIP() << "no usable GPU: " << probe.description;
    auto d = DaemonProcess::Start({dir_.path(), "1G", {}, {}});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(d).value();
    auto c = ConnectClient(*daemon_, /*map_host_tier=*/GetParam());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    for (void* p : device_) cudaFree(p);
    if (stream_) cudaStreamDestroy(stream_);
  }
  void* DeviceAlloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    device_.push_back(p);
    return p;
  }
  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> device_;
};

TEST_P(DeviceTest, DeviceSnapshotsRoundTripByteExact) {
  constexpr size_t kBytes = (32 << 20) + 24;
  constexpr uint64_t kSteps = 12;
  auto run = client_->OpenRun({.name = "device", .steps = kSteps, .bytes_per_step = kBytes});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::vector<char> host(kBytes);
  void* u = DeviceAlloc(kBytes);
  for (uint64_t t = 0; t < kSteps; ++t) {
    FillPattern(host.data(), kBytes, 5, t);
    ASSERT_EQ(cudaMemcpyAsync(u, host.data(), kBytes, cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
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
    ASSERT_EQ(cudaMemcpy(back.data(), v, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    FillPattern(want.data(), kBytes, 5, t);
    ASSERT_EQ(back, want) << "step " << t;
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
  ASSERT_EQ(cudaMemcpy(d, field.data(), 4096 * 8, cudaMemcpyHostToDevice), cudaSuccess);
  auto h = client_->PushDevice(run->run_id, 0, d, 4096 * 8, stream_);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("element 4000"), std::string::npos) << h.status().message();
}

// The CUDA example solver, forward and backward through snapd, checksums compared on the GPU.
TEST_P(DeviceTest, TheCudaExampleSolverRoundTripsEverySnapshot) {
  std::string out, err;
  std::vector<std::string> argv = {ACOUSTIC2D_CUDA_BINARY, "--nx", "256", "--ny", "256",
                                   "--steps", "60", "--socket", daemon_->socket()};
  if (!GetParam()) argv.insert(argv.begin(), {"/usr/bin/env", "SNAPD_DATA_PATH=ucx"});
  ASSERT_EQ(RunProgram(argv, &out, &err), 0) << out << err;
  EXPECT_NE(out.find("60/60 checksums match"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(DataPaths, DeviceTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "mapped" : "ucx";
                         });

}  // namespace
}  // namespace snapd::testing
