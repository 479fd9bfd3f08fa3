// CUDA's copy engine (copy_engine.h), libadjsnap's own, and the engine selection.
#include <atomic>
#include <string>
#include <utility>

#include "copy_engine.h"

#if ADJSNAP_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace adjsnap::detail {

namespace {

#if ADJSNAP_WITH_CUDA

Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(e) + ": " +
                          cudaGetErrorString(e));
}

struct DoneArg {
  CopyEngine::Done fn;
};

// Host function after the copy. It may not call CUDA, so it cannot ask how the copy went; a
// copy that fails after being enqueued (enqueueing checks the pointers) leaves the stream in
// error, which the caller's next synchronisation reports.
void CUDART_CB RunDone(void* arg) {
  auto* d = static_cast<DoneArg*>(arg);
  d->fn(Status::Ok());
  delete d;
}

cudaMemcpyKind CudaKind(CopyEngine::Kind kind) {
  switch (kind) {
    case CopyEngine::Kind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyEngine::Kind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    default:
      return cudaMemcpyDefault;  // unified addressing tells device from host memory
  }
}

class CudaCopyEngine final : public CopyEngine {
 public:
  kernels::DeviceProbe Probe() override { return kernels::ProbeDevice(); }

  Status CreateStream(void** stream) override {
    cudaStream_t s = nullptr;
    ADJSNAP_RETURN_IF_ERROR(FromCuda(cudaStreamCreate(&s), "cudaStreamCreate"));
    *stream = s;
    return Status::Ok();
  }
  void DestroyStream(void* stream) override {
    if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }

  Status CopyAsync(void* to, const void* from, size_t bytes, Kind kind, void* stream) override {
    return FromCuda(
        cudaMemcpyAsync(to, from, bytes, CudaKind(kind), static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync");
  }
  Status ThenDone(void* stream, Done done) override {
    auto* d = new DoneArg{std::move(done)};
    Status launched = FromCuda(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), RunDone, d),
                               "cudaLaunchHostFunc");
    if (!launched.ok()) delete d;
    return launched;
  }
  Status Synchronize(void* stream, const char* what) override {
    return FromCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), what);
  }

  // Portable: pinned for every device's context, as the solver's stream may belong to any.
  Status PinHost(char* base, size_t bytes) override {
    return FromCuda(cudaHostRegister(base, bytes, cudaHostRegisterPortable), "cudaHostRegister");
  }
  void UnpinHost(char* base) override { cudaHostUnregister(base); }

  Status DeviceFreeMemory(uint64_t* free_bytes) override {
    size_t free = 0, total = 0;
    ADJSNAP_RETURN_IF_ERROR(FromCuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo"));
    *free_bytes = free;
    return Status::Ok();
  }
  Status DeviceAllocate(uint64_t bytes, void** device) override {
    return FromCuda(cudaMalloc(device, bytes), "cudaMalloc of the device pool");
  }
  void DeviceRelease(void* device) override { cudaFree(device); }
  bool IsDevice(const void* p) override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // not CUDA's: clear the error this call left
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }

  Status FirstNonFinite(const void* device, uint64_t count, bool f64, void* stream,
                        uint64_t* index) override {
    uint64_t* result = nullptr;
    ADJSNAP_RETURN_IF_ERROR(
        FromCuda(cudaMallocHost(reinterpret_cast<void**>(&result), 8), "cudaMallocHost"));
    Status s = kernels::FirstNonFiniteDevice(
        device, count, f64 ? kernels::Real::kFloat64 : kernels::Real::kFloat32, result, stream);
    if (s.ok()) s = Synchronize(stream, "NaN scan");
    if (s.ok()) *index = *result;
    cudaFreeHost(result);
    return s;
  }
};

#else  // !ADJSNAP_WITH_CUDA

Status NoCuda() {
  return Status::FailedPrecondition(
      "device pushes and fetches need a libadjsnap built with CUDA (ADJSNAP_WITH_CUDA)");
}

class CudaCopyEngine final : public CopyEngine {
 public:
  kernels::DeviceProbe Probe() override { return kernels::ProbeDevice(); }
  Status CreateStream(void**) override { return NoCuda(); }
  void DestroyStream(void*) override {}
  Status CopyAsync(void*, const void*, size_t, Kind, void*) override { return NoCuda(); }
  Status ThenDone(void*, Done) override { return NoCuda(); }
  Status Synchronize(void*, const char*) override { return NoCuda(); }
  Status PinHost(char*, size_t) override { return NoCuda(); }
  void UnpinHost(char*) override {}
  Status DeviceFreeMemory(uint64_t*) override { return NoCuda(); }
  Status DeviceAllocate(uint64_t, void**) override { return NoCuda(); }
  void DeviceRelease(void*) override {}
  bool IsDevice(const void*) override { return false; }
  Status FirstNonFinite(const void*, uint64_t, bool, void*, uint64_t*) override { return NoCuda(); }
};

#endif

std::atomic<CopyEngine*> installed{nullptr};

}  // namespace

CopyEngine& Engine() {
  if (CopyEngine* e = installed.load(std::memory_order_acquire)) return *e;
  // Never destroyed: a client that a static destructor closes still finds it.
  static CopyEngine* const cuda = new CudaCopyEngine;
  return *cuda;
}

CopyEngine* SetCopyEngineForTesting(CopyEngine* engine) {
  return installed.exchange(engine, std::memory_order_acq_rel);
}

}  // namespace adjsnap::detail
