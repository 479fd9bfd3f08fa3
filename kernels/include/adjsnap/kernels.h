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

// Whether this build has CUDA and a GPU is usable, and a line saying which (or why not:
// "none (built without CUDA)", "none (no CUDA driver)" where the driver is not installed,
// "none (no CUDA device)", or "none usable (CUDA's error)").
struct DeviceProbe {
  bool usable = false;
  std::string description;
};
DeviceProbe ProbeDevice();

}  // namespace adjsnap::kernels
