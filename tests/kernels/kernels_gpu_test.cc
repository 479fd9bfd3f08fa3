// The CUDA kernels against their CPU references on a real GPU (CTest label `gpu`; skipped
// where no GPU is usable: these test the kernels themselves, for which the host copy engine that
// runs libadjsnap's device paths without a GPU has no stand-in).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "adjsnap/checksum.h"
#include "adjsnap/kernels.h"

namespace adjsnap::kernels {
namespace {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceProbe probe = ProbeDevice();
    if (!probe.usable) {
      GTEST_SKIP() << "tests the CUDA kernels themselves, which need a GPU; none is usable: "
                   << probe.description;
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    for (void* p : allocations_) cudaFree(p);
    if (stream_) cudaStreamDestroy(stream_);
  }
  template <typename T>
  T* ToDevice(const std::vector<T>& host) {
    void* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(host.size() * sizeof(T), 1)), cudaSuccess);
    allocations_.push_back(d);
    EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    return static_cast<T*>(d);
  }
  template <typename T>
  std::vector<T> ToHost(const T* d, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
};

TEST_F(GpuTest, ChecksumEqualsTheCpuChecksumBitForBit) {
  std::mt19937_64 r(3);
  for (size_t bytes : {0ul, 1ul, 33ul, 4097ul, 65536ul, 65537ul, (64ul << 20) + 24}) {
    std::vector<unsigned char> h(bytes);
    for (auto& c : h) c = static_cast<unsigned char>(r());
    unsigned char* d = ToDevice(h);
    uint64_t* result = ToDevice(std::vector<uint64_t>{0});
    ASSERT_TRUE(ChecksumDevice(d, bytes, result, stream_).ok());
    EXPECT_EQ(ToHost(result, 1)[0], Checksum(h.data(), bytes)) << bytes << " bytes";
  }
}

TEST_F(GpuTest, NonFiniteScanEqualsTheCpuScan) {
  std::vector<float> f(1 << 22, 0.5f);
  uint64_t* result = ToDevice(std::vector<uint64_t>{0});
  ASSERT_TRUE(FirstNonFiniteDevice(ToDevice(f), f.size(), Real::kFloat32, result, stream_).ok());
  EXPECT_EQ(ToHost(result, 1)[0], kAllFinite);
  f[3000001] = std::nanf("");
  f[2999999] = INFINITY;
  ASSERT_TRUE(FirstNonFiniteDevice(ToDevice(f), f.size(), Real::kFloat32, result, stream_).ok());
  EXPECT_EQ(ToHost(result, 1)[0], FirstNonFiniteCpu(f.data(), f.size(), Real::kFloat32));
}

TEST_F(GpuTest, PackAndUnpackEqualTheCpuReferences) {
  const uint64_t nz = 40, ny = 50, nx = 60;
  std::vector<double> full(nz * ny * nx);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<double>(i) * 0.25;
  Box box{sizeof(double), {nz, ny, nx}, {4, 4, 4}, {32, 42, 52}};
  std::vector<double> want(BoxElements(box));
  ASSERT_TRUE(PackBoxCpu(full.data(), want.data(), box).ok());
  double* d_full = ToDevice(full);
  double* d_packed = ToDevice(std::vector<double>(want.size()));
  ASSERT_TRUE(PackBoxDevice(d_full, d_packed, box, stream_).ok());
  EXPECT_EQ(ToHost(d_packed, want.size()), want);
  double* d_back = ToDevice(std::vector<double>(full.size(), -1.0));
  ASSERT_TRUE(UnpackBoxDevice(d_packed, d_back, box, stream_).ok());
  std::vector<double> back_cpu(full.size(), -1.0);
  ASSERT_TRUE(UnpackBoxCpu(want.data(), back_cpu.data(), box).ok());
  EXPECT_EQ(ToHost(d_back, full.size()), back_cpu);
}

}  // namespace
}  // namespace adjsnap::kernels
