// The kernels' CPU references, and the CUDA kernels' logic run on the CPU: the checksum
// kernel's tiled schedule, the box index map and the NaN/Inf predicate are the functions the
// kernels call (kernel_math.h, checksum_math.h).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "adjsnap/checksum.h"
#include "kernel_math.h"
#include "adjsnap/kernels.h"

namespace adjsnap::kernels {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::vector<unsigned char> v(n);
  for (auto& c : v) c = static_cast<unsigned char>(r());
  return v;
}

// What ChecksumBlocks + ChecksumCombine (device.cu) compute, step for step, on the CPU: tiles
// of kTileBytes, zero-padded past the data, fed to the lanes; per-block terms summed.
uint64_t ChecksumAsTheKernelSchedulesIt(const unsigned char* data, uint64_t bytes) {
  namespace cm = checksum_math;
  uint64_t sum = 0;
  for (uint64_t b = 0, off = 0; off < bytes; ++b, off += cm::kBlockBytes) {
    uint64_t n = std::min<uint64_t>(cm::kBlockBytes, bytes - off);
    uint64_t lanes[4];
    cm::LaneInit(b, lanes);
    for (uint64_t t = 0; t < n; t += math::kTileBytes) {
      uint64_t m = std::min<uint64_t>(math::kTileBytes, n - t);
      unsigned char tile[math::kTileBytes] = {};
      std::memcpy(tile, data + off + t, m);
      math::ConsumeTile(lanes, tile, m);
    }
    sum += cm::BlockTerm(cm::BlockHash(lanes, n), b);
  }
  return cm::Finish(sum, bytes);
}

TEST(ChecksumKernel, ItsTiledScheduleEqualsTheDaemonsChecksum) {
  for (uint64_t bytes : {0ul, 1ul, 31ul, 32ul, 33ul, 4095ul, 4096ul, 4097ul, 65535ul, 65536ul,
                         65537ul, 200000ul, (1ul << 20) + 24}) {
    auto data = RandomBytes(bytes, bytes);
    EXPECT_EQ(ChecksumAsTheKernelSchedulesIt(data.data(), bytes), Checksum(data.data(), bytes))
        << bytes << " bytes";
  }
}

// A 3D field 5 x 6 x 7 with a one-cell halo around a 3 x 4 x 5 interior.
TEST(BoxReference, PacksTheInteriorAndUnpacksItBackLeavingTheHalo) {
  const uint64_t nz = 5, ny = 6, nx = 7;
  std::vector<float> full(nz * ny * nx);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
  Box box{sizeof(float), {nz, ny, nx}, {1, 1, 1}, {3, 4, 5}};
  std::vector<float> packed(BoxElements(box));
  ASSERT_TRUE(PackBoxCpu(full.data(), packed.data(), box).ok());
  size_t p = 0;
  for (uint64_t z = 1; z < 4; ++z) {
    for (uint64_t y = 1; y < 5; ++y) {
      for (uint64_t x = 1; x < 6; ++x) {
        ASSERT_EQ(packed[p++], full[(z * ny + y) * nx + x]) << z << "," << y << "," << x;
      }
    }
  }
  std::vector<float> back(full.size(), -1.0f);
  ASSERT_TRUE(UnpackBoxCpu(packed.data(), back.data(), box).ok());
  for (uint64_t z = 0; z < nz; ++z) {
    for (uint64_t y = 0; y < ny; ++y) {
      for (uint64_t x = 0; x < nx; ++x) {
        bool inside = z >= 1 && z < 4 && y >= 1 && y < 5 && x >= 1 && x < 6;
        float want = inside ? full[(z * ny + y) * nx + x] : -1.0f;
        ASSERT_EQ(back[(z * ny + y) * nx + x], want) << z << "," << y << "," << x;
      }
    }
  }
}

TEST(BoxReference, Handles2DFieldsAndOddElementSizes) {
  // 2D, 3-byte elements: the box copies whole elements only.
  const uint64_t ny = 4, nx = 6;
  auto full = RandomBytes(ny * nx * 3, 7);
  Box box{3, {1, ny, nx}, {0, 2, 1}, {1, 2, 4}};
  std::vector<unsigned char> packed(BoxElements(box) * 3);
  ASSERT_TRUE(PackBoxCpu(full.data(), packed.data(), box).ok());
  for (uint64_t y = 0; y < 2; ++y) {
    EXPECT_EQ(std::memcmp(packed.data() + y * 4 * 3, full.data() + ((2 + y) * nx + 1) * 3, 12), 0);
  }
}

TEST(BoxReference, ABoxOutsideItsArrayIsRefusedNamingTheAxis) {
  Box box{4, {1, 10, 10}, {0, 8, 0}, {1, 3, 10}};
  std::vector<float> a(100), b(30);
  Status s = PackBoxCpu(a.data(), b.data(), box);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("axis y"), std::string::npos) << s.message();
  box = Box{0, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}};
  EXPECT_EQ(ValidateBox(box).code(), Code::kInvalidArgument);
}

TEST(NonFiniteReference, FindsTheFirstNaNOrInfinity) {
  std::vector<float> f(1000, 1.0f);
  f[3] = std::numeric_limits<float>::max();
  f[4] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(FirstNonFiniteCpu(f.data(), f.size(), Real::kFloat32), kAllFinite);
  f[700] = std::nanf("");
  f[517] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(FirstNonFiniteCpu(f.data(), f.size(), Real::kFloat32), 517u);
  std::vector<double> d(50, -2.5);
  EXPECT_EQ(FirstNonFiniteCpu(d.data(), d.size(), Real::kFloat64), kAllFinite);
  d[49] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(FirstNonFiniteCpu(d.data(), d.size(), Real::kFloat64), 49u);
}

TEST(DeviceEntryPoints, SayWhyWhenNoGpuIsUsable) {
  DeviceProbe probe = ProbeDevice();
  EXPECT_FALSE(probe.description.empty());
  if (probe.usable) GTEST_SKIP() << "a GPU is usable here: " << probe.description;
  uint64_t result = 0;
  Status s = ChecksumDevice(&result, 8, &result, nullptr);
#if ADJSNAP_WITH_CUDA
  // Built with CUDA, run without a usable GPU: CUDA's own error, named.
  EXPECT_EQ(s.code(), Code::kInternal) << s.ToString();
  EXPECT_EQ(s.message().rfind("checksum: cuda", 0), 0u) << s.ToString();
#else
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("built without CUDA"), std::string::npos) << s.ToString();
#endif
}

// On a machine with no driver at all (no libcuda.so.1), the probe says so plainly rather than
// with cudart's "CUDA driver version is insufficient for CUDA runtime version".
TEST(ProbeDevice, SaysPlainlyWhenThereIsNoCudaDriver) {
  DeviceProbe probe = ProbeDevice();
#if ADJSNAP_WITH_CUDA
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver != nullptr) {
    dlclose(driver);  // a driver is installed: whatever the probe says, it is not this
    EXPECT_EQ(probe.description.find("no NVIDIA driver"), std::string::npos) << probe.description;
    return;
  }
  EXPECT_FALSE(probe.usable);
  EXPECT_EQ(probe.description, "none (no NVIDIA driver)");
#else
  EXPECT_EQ(probe.description, "none (built without CUDA)");
#endif
}

// DescribeDevice, from what a probe could find on each kind of node, to the `gpu` line.
DeviceFacts CudaBuild() {
  DeviceFacts f;
  f.built_with_cuda = true;
  f.driver_loads = true;
  f.runtime_version = 13000;
  f.driver_version = 13000;
  return f;
}

TEST(DescribeDevice, SaysBuiltWithoutCudaWhateverTheNodeHas) {
  DeviceFacts f = CudaBuild();
  f.built_with_cuda = false;
  DeviceProbe probe = DescribeDevice(f);
  EXPECT_FALSE(probe.usable);
  EXPECT_EQ(probe.description, "none (built without CUDA)");
}

// A node with no driver: the static runtime answers cudaErrorInsufficientDriver and a driver
// version of 0; the line says there is no driver, not that it is old.
TEST(DescribeDevice, SaysNoNvidiaDriverWhereTheDriversLibraryDoesNotLoad) {
  DeviceFacts f = CudaBuild();
  f.driver_loads = false;
  f.driver_version = 0;
  f.count_result = DeviceFacts::Count::kInsufficientDriver;
  DeviceProbe probe = DescribeDevice(f);
  EXPECT_FALSE(probe.usable);
  EXPECT_EQ(probe.description, "none (no NVIDIA driver)");
}

TEST(DescribeDevice, GivesBothVersionsWhenTheDriverIsOlderThanTheRuntime) {
  DeviceFacts f = CudaBuild();
  f.driver_version = 12040;
  f.count_result = DeviceFacts::Count::kInsufficientDriver;
  DeviceProbe probe = DescribeDevice(f);
  EXPECT_FALSE(probe.usable);
  EXPECT_EQ(probe.description,
            "none (NVIDIA driver supports CUDA 12.4, this build's runtime needs 13.0 or newer: "
            "update the driver)");
  // Whatever cudaGetDeviceCount said, an older driver is the reason given.
  f.count_result = DeviceFacts::Count::kNoDevice;
  EXPECT_EQ(DescribeDevice(f).description, probe.description);
  // A driver whose version could not be read, refused as too old.
  f.driver_version = 0;
  f.count_result = DeviceFacts::Count::kInsufficientDriver;
  EXPECT_EQ(DescribeDevice(f).description,
            "none (NVIDIA driver is too old, this build's runtime needs 13.0 or newer: update the "
            "driver)");
}

TEST(DescribeDevice, SaysNoGpuWhereTheDriverFindsNoDevice) {
  DeviceFacts f = CudaBuild();
  f.count_result = DeviceFacts::Count::kNoDevice;
  EXPECT_EQ(DescribeDevice(f).description, "none (no GPU)");
  f.count_result = DeviceFacts::Count::kOk;
  f.device_count = 0;
  DeviceProbe probe = DescribeDevice(f);
  EXPECT_FALSE(probe.usable);
  EXPECT_EQ(probe.description, "none (no GPU)");
}

TEST(DescribeDevice, PassesOnCudasMessageForAnyOtherError) {
  DeviceFacts f = CudaBuild();
  f.count_result = DeviceFacts::Count::kOtherError;
  f.error = "system has unsupported display driver / cuda driver combination";
  DeviceProbe probe = DescribeDevice(f);
  EXPECT_FALSE(probe.usable);
  EXPECT_EQ(probe.description,
            "none usable (system has unsupported display driver / cuda driver combination)");
}

TEST(DescribeDevice, NamesAUsableDeviceAndTheDriverVersionWhereItDiffers) {
  DeviceFacts f = CudaBuild();
  f.count_result = DeviceFacts::Count::kOk;
  f.device_count = 1;
  f.have_device = true;
  f.name = "NVIDIA H200";
  f.sm_major = 9;
  f.sm_minor = 0;
  f.total_bytes = 150ull << 30;
  f.free_bytes = 149ull << 30;
  DeviceProbe probe = DescribeDevice(f);
  EXPECT_TRUE(probe.usable);
  EXPECT_EQ(probe.description,
            "NVIDIA H200 (sm_90, 150.0 GiB, 149.0 GiB free; 1 device; CUDA 13.0)");
  f.driver_version = 13020;
  f.device_count = 2;
  EXPECT_EQ(DescribeDevice(f).description,
            "NVIDIA H200 (sm_90, 150.0 GiB, 149.0 GiB free; 2 devices; CUDA 13.0, driver 13.2)");
  // Devices counted, and the current one's properties unread: not usable, and said so.
  f.have_device = false;
  probe = DescribeDevice(f);
  EXPECT_FALSE(probe.usable);
  EXPECT_EQ(probe.description, "none usable (its properties could not be read)");
}

}  // namespace
}  // namespace adjsnap::kernels
