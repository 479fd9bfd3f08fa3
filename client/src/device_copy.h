// Copies between device memory and host memory on the caller's stream, for libadjsnap's device
// pushes and fetches, written once over the copy engine (copy_engine.h: CUDA's, or a test's).
// With the daemon's host tier mapped and pinned (PinHost, chunk by chunk: host_pinning.h), the
// GPU's copy engine moves the bytes straight to or from tier memory: no CPU copy. A build
// without CUDA returns FAILED_PRECONDITION from every call (unless a test installed an engine).
//
// Threading: any thread; `done` runs on a thread of the engine and must not call it back
// synchronously (for CUDA: must not call CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "adjsnap/status.h"

namespace adjsnap::detail {

// Pins [base, base + bytes) for the GPU (CUDA: cudaHostRegister, portable, for every device's
// context, as the solver's stream may belong to any), and unpins a range PinHost pinned.
Status PinHost(char* base, size_t bytes);
void UnpinHost(char* base);

// Enqueues the copy on `stream` and then `done`, called once the copy finished (OK) or failed
// (the status says how). In pieces: piece (offset, bytes) copies host + offset to or from
// device + (offset - the first piece's offset), each piece its own engine copy (each lies in one
// pinned chunk of the host tier: host_pinning.h).
using Pieces = std::vector<std::pair<uint64_t, uint64_t>>;
Status CopyDeviceToHostAsync(char* host, const char* device, const Pieces& pieces, void* stream,
                             std::function<void(Status)> done);
Status CopyHostToDeviceAsync(char* device, const char* host, const Pieces& pieces, void* stream,
                             std::function<void(Status)> done);

// Any direction (the engine tells device from host memory): the device tier's copies into and
// out of its pool.
Status CopyAnyAsync(void* to, const void* from, size_t bytes, void* stream,
                    std::function<void(Status)> done);

// The device tier's pool: free memory of the current device, and one allocation of it.
Status DeviceFreeMemory(uint64_t* free_bytes);
Status DeviceAllocate(uint64_t bytes, void** device);
void DeviceRelease(void* device);

// Waits for what `stream` holds (`what` names the operation in an error).
Status SynchronizeStream(void* stream, const char* what);

// The same, waiting for the copy (through pageable memory: the path without a mapped tier).
Status CopyDeviceToHost(void* host, const void* device, size_t bytes, void* stream);
Status CopyHostToDevice(void* device, const void* host, size_t bytes, void* stream);

// Index of the first NaN/Inf among `count` float32 (or float64) values in device memory, found
// by the engine's scan (CUDA: the scan kernel) on `stream`; waits for it. kernels::kAllFinite
// when there is none.
Status FirstNonFiniteOnDevice(const void* device, uint64_t count, bool f64, void* stream,
                              uint64_t* index);

}  // namespace adjsnap::detail
