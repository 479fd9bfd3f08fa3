// adjsnapd's compute kernels: the checksum of a snapshot, a scan for NaN/Inf, and pack/unpack of
// a strided sub-box (a field's interior without its halo). Each has a CPU reference here; the
// CUDA versions (kernels/*.cu) give the same results bit for bit.
//
// Device entry points are asynchronous: they enqueue work on `stream` (a cudaStream_t; null =
// the legacy default stream) and return at once; outputs are valid once the stream reaches
// them. They return a Status: INVALID_ARGUMENT for a bad box or size, FAILED_PRECONDITION when
// this build has no CUDA or no GPU is usable, INTERNAL with CUDA's message for a launch error.
//
// Thread-safety: pure functions; device calls may be made from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "adjsnap/status.h"

namespace adjsnap::kernels {

// A sub-box of a dense row-major array of up to three dimensions (slowest first; a 2D array
// is {1, ny, nx}). `elem_bytes` is the size of one element.
struct Box {
  size_t elem_bytes = 4;
  uint64_t dims[3] = {1, 1, 1};
  uint64_t origin[3] = {0, 0, 0};
  uint64_t extent[3] = {1, 1, 1};
};
// INVALID_ARGUMENT naming the axis when the box does not fit its array.
Status ValidateBox(const Box& box);
inline uint64_t BoxElements(const Box& b) { return b.extent[0] * b.extent[1] * b.extent[2]; }
inline uint64_t ArrayElements(const Box& b) { return b.dims[0] * b.dims[1] * b.dims[2]; }

enum class Real { kFloat32, kFloat64 };
inline constexpr uint64_t kAllFinite = UINT64_MAX;

// --- CPU references
// The box's elements of `full`, packed densely into `packed`, and back.
Status PackBoxCpu(const void* full, void* packed, const Box& box);
Status UnpackBoxCpu(const void* packed, void* full, const Box& box);
// Index of the first NaN or infinity among `count` values, or kAllFinite.
uint64_t FirstNonFiniteCpu(const void* data, uint64_t count, Real type);
// The checksum is adjsnap::Checksum (adjsnap/checksum.h, in the floor).

// --- CUDA (device pointers)
// adjsnap::Checksum of `bytes` bytes at `data`, written to `*result` (device or pinned memory).
Status ChecksumDevice(const void* data, uint64_t bytes, uint64_t* result, void* stream);
// FirstNonFiniteCpu's answer, written to `*result` (device or pinned memory).
Status FirstNonFiniteDevice(const void* data, uint64_t count, Real type, uint64_t* result,
                            void* stream);
Status PackBoxDevice(const void* full, void* packed, const Box& box, void* stream);
Status UnpackBoxDevice(const void* packed, void* full, const Box& box, void* stream);

// Whether this build has CUDA and a GPU is usable, and a line saying which (or why not): the
// `gpu` line of `adjsnap status`, and the reason a device push is refused. DescribeDevice says
// which lines there are.
struct DeviceProbe {
  bool usable = false;
  std::string description;
};
// Looks at this node: whether the NVIDIA driver's library loads, its CUDA version against this
// build's runtime, the device count and the current device. Never fails to load or to return:
// CUDA's runtime is linked into the library statically and loads the driver only here.
DeviceProbe ProbeDevice();

// What ProbeDevice found, before it is put into words; DescribeDevice is its only reader, and
// the seam through which each line is tested on a machine with no driver and no GPU.
struct DeviceFacts {
  bool built_with_cuda = false;
  // Whether libcudart could load the NVIDIA driver's library (libcuda.so.1, which comes with the
  // driver, not with the CUDA toolkit).
  bool driver_loads = false;
  // CUDA versions as CUDA writes them (1000 * major + 10 * minor): the newest the driver
  // supports (cudaDriverGetVersion; 0 where it has none) and the one this build's runtime
  // needs at least (cudaRuntimeGetVersion).
  int driver_version = 0;
  int runtime_version = 0;
  // What cudaGetDeviceCount answered.
  enum class Count { kOk, kNoDevice, kInsufficientDriver, kOtherError };
  Count count_result = Count::kOtherError;
  std::string error;  // CUDA's message, for kOtherError
  int device_count = 0;
  // The current device, when device_count > 0 and its properties were read.
  bool have_device = false;
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
};
// The line for `facts`, one of:
//   "none (built without CUDA)"
//   "none (no NVIDIA driver)"              libcuda.so.1 does not load: no driver installed
//   "none (NVIDIA driver supports CUDA 12.4, this build's runtime needs 13.0 or newer: update
//    the driver)"                          an older driver than the runtime
//   "none (no GPU)"                        a driver, and no device it can use
//   "none usable (CUDA's message)"         any other error of the driver or the runtime
//   "NAME (sm_XY, T GiB, F GiB free; N devices; CUDA 13.0)" and, where the driver is newer than
//   the runtime, "...; CUDA 13.0, driver 13.2)".
DeviceProbe DescribeDevice(const DeviceFacts& facts);

}  // namespace adjsnap::kernels
