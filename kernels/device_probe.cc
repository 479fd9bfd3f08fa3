// The words of ProbeDevice (include/adjsnap/kernels.h): built with and without CUDA alike, so that
// every line is tested on any machine.
#include <cstdio>
#include <string>

#include "adjsnap/kernels.h"

namespace adjsnap::kernels {
namespace {

// "13.0" for CUDA's 13000.
std::string CudaVersion(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

DeviceProbe DescribeDevice(const DeviceFacts& f) {
  using Count = DeviceFacts::Count;
  if (!f.built_with_cuda) return {false, "none (built without CUDA)"};
  // Without libcuda.so.1 CUDA says "CUDA driver version is insufficient for CUDA runtime
  // version", which reads as an old driver on a node that has none.
  if (!f.driver_loads) return {false, "none (no NVIDIA driver)"};
  // A driver older than the runtime refuses it whatever else is true: the versions, and what
  // to do, before anything about devices.
  if (f.count_result == Count::kInsufficientDriver ||
      (f.driver_version > 0 && f.driver_version < f.runtime_version)) {
    const std::string driver =
        f.driver_version > 0 ? "supports CUDA " + CudaVersion(f.driver_version) : "is too old";
    return {false, "none (NVIDIA driver " + driver + ", this build's runtime needs " +
                       CudaVersion(f.runtime_version) + " or newer: update the driver)"};
  }
  if (f.count_result == Count::kNoDevice || (f.count_result == Count::kOk && f.device_count == 0)) {
    return {false, "none (no GPU)"};
  }
  if (f.count_result == Count::kOtherError) return {false, "none usable (" + f.error + ")"};
  if (!f.have_device) return {false, "none usable (its properties could not be read)"};
  std::string cuda = "CUDA " + CudaVersion(f.runtime_version);
  if (f.driver_version != f.runtime_version && f.driver_version > 0) {
    cuda += ", driver " + CudaVersion(f.driver_version);
  }
  char line[512];
  std::snprintf(line, sizeof line, "%s (sm_%d%d, %.1f GiB, %.1f GiB free; %d device%s; %s)",
                f.name.c_str(), f.sm_major, f.sm_minor, f.total_bytes / 1073741824.0,
                f.free_bytes / 1073741824.0, f.device_count, f.device_count == 1 ? "" : "s",
                cuda.c_str());
  return {true, line};
}

}  // namespace adjsnap::kernels
