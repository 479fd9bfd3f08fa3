// The seam between libadjsnap's device paths and the hardware that moves the bytes: every device
// operation (a copy on a stream, a callback in stream order, waiting for a stream, pinning host
// memory, device memory and its free figure, the NaN/Inf scan) goes through one CopyEngine. The
// device push and fetch paths (device_copy.h, host_pinning.h, mapped_arena.cc, device_tier.cc)
// are written once over it.
//
// libadjsnap has one engine of its own, CUDA's (cuda_copy_engine.cc): streams are cudaStream_t,
// copies cudaMemcpyAsync, callbacks cudaLaunchHostFunc, pinning cudaHostRegister; a build without
// CUDA answers FAILED_PRECONDITION naming why. Tests on machines without a GPU install another
// (tests/support/host_copy_engine.h) through SetCopyEngineForTesting, which only this internal
// header declares: no option, environment variable or public call selects an engine.
//
// A stream is an opaque pointer the engine hands out (CreateStream) or the caller's own (a
// cudaStream_t for CUDA); null is the engine's default stream.
//
// Threading: an engine is thread-safe. `done` callbacks run on a thread of the engine (a CUDA
// runtime thread, a host engine's stream worker) in stream order, and must not call the engine
// back synchronously on the same stream (CUDA forbids any CUDA call there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "adjsnap/kernels.h"
#include "adjsnap/status.h"

namespace adjsnap::detail {

class CopyEngine {
 public:
  // What each side of a copy is. kAny: the engine tells (CUDA's unified addressing), as the
  // device tier's copies into and out of its pool come from either kind of memory.
  enum class Kind { kDeviceToHost, kHostToDevice, kAny };
  using Done = std::function<void(Status)>;

  virtual ~CopyEngine() = default;

  // Whether device pushes and fetches can run here, and a line saying which device (or why
  // not): CUDA's answer is kernels::ProbeDevice's.
  virtual kernels::DeviceProbe Probe() = 0;

  virtual Status CreateStream(void** stream) = 0;
  virtual void DestroyStream(void* stream) = 0;

  // Enqueues a copy of `bytes` on `stream`; an error means it was not enqueued. A copy that fails
  // once enqueued leaves the stream in error, reported by the next Synchronize.
  virtual Status CopyAsync(void* to, const void* from, size_t bytes, Kind kind, void* stream) = 0;
  // Enqueues `done` after what `stream` holds; it runs once that is done.
  virtual Status ThenDone(void* stream, Done done) = 0;
  // Waits for what `stream` holds; the status of its work, `what` naming it in an error.
  virtual Status Synchronize(void* stream, const char* what) = 0;

  // Pins [base, base + bytes) for the engine's copies (one registration each), and unpins a
  // range PinHost pinned, by its base.
  virtual Status PinHost(char* base, size_t bytes) = 0;
  virtual void UnpinHost(char* base) = 0;

  // Device memory: the free figure, one allocation, and its release (which waits for copies
  // still in flight, as cudaFree does).
  virtual Status DeviceFreeMemory(uint64_t* free_bytes) = 0;
  virtual Status DeviceAllocate(uint64_t bytes, void** device) = 0;
  virtual void DeviceRelease(void* device) = 0;
  // Whether `p` lies in device memory (CUDA: cudaPointerGetAttributes says device or managed).
  virtual bool IsDevice(const void* p) = 0;

  // Index of the first NaN/Inf among `count` float32 (or float64) values in device memory,
  // after what `stream` holds (kernels::kAllFinite when there is none); waits for it.
  virtual Status FirstNonFinite(const void* device, uint64_t count, bool f64, void* stream,
                                uint64_t* index) = 0;
};

// The engine libadjsnap's device paths use: the one a test installed, else CUDA's.
CopyEngine& Engine();

// Installs `engine` for every client of this process (null: CUDA's again) and returns the one it
// replaces. For tests only: install before the first client connects and remove after the last
// one is gone, since a client pins, copies and frees through whichever engine is installed when
// it does so. The caller keeps ownership.
CopyEngine* SetCopyEngineForTesting(CopyEngine* engine);

}  // namespace adjsnap::detail
