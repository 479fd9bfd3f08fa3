#include "device_copy.h"

#include "adjsnap/kernels.h"

#include <string>

#if ADJSNAP_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace adjsnap::detail {

#if ADJSNAP_WITH_CUDA
namespace {

Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(e) + ": " +
                          cudaGetErrorString(e));
}

struct Done {
  std::function<void(Status)> fn;
};

// Host function after the copy. It may not call CUDA, so it cannot ask how the copy went; a
// copy that fails after being enqueued (enqueueing checks the pointers) leaves the stream in
// error, which the caller's next synchronisation reports.
void CUDART_CB RunDone(void* arg) {
  auto* d = static_cast<Done*>(arg);
  d->fn(Status::Ok());
  delete d;
}

// Enqueues `done` on `s`, after what the stream already holds.
Status ThenDone(cudaStream_t s, std::function<void(Status)> done) {
  auto* d = new Done{std::move(done)};
  Status launched = FromCuda(cudaLaunchHostFunc(s, RunDone, d), "cudaLaunchHostFunc");
  if (!launched.ok()) delete d;
  return launched;
}

// Each piece its own copy, in order on one stream, then `done`.
Status CopyPiecesAsync(char* host, char* device, const Pieces& pieces, cudaMemcpyKind kind,
                       void* stream, std::function<void(Status)> done) {
  if (pieces.empty()) return Status::InvalidArgument("a copy of no bytes");
  auto s = static_cast<cudaStream_t>(stream);
  uint64_t first = pieces.front().first;
  for (const auto& [offset, bytes] : pieces) {
    char* h = host + offset;
    char* d = device + (offset - first);
    cudaError_t e = kind == cudaMemcpyDeviceToHost ? cudaMemcpyAsync(h, d, bytes, kind, s)
                                                   : cudaMemcpyAsync(d, h, bytes, kind, s);
    ADJSNAP_RETURN_IF_ERROR(FromCuda(e, "cudaMemcpyAsync"));
  }
  return ThenDone(s, std::move(done));
}

}  // namespace

Status PinHost(char* base, size_t bytes) {
  return FromCuda(cudaHostRegister(base, bytes, cudaHostRegisterPortable), "cudaHostRegister");
}

void UnpinHost(char* base) { cudaHostUnregister(base); }

Status CopyDeviceToHostAsync(char* host, const char* device, const Pieces& pieces, void* stream,
                             std::function<void(Status)> done) {
  return CopyPiecesAsync(host, const_cast<char*>(device), pieces, cudaMemcpyDeviceToHost, stream,
                         std::move(done));
}

Status CopyHostToDeviceAsync(char* device, const char* host, const Pieces& pieces, void* stream,
                             std::function<void(Status)> done) {
  return CopyPiecesAsync(const_cast<char*>(host), device, pieces, cudaMemcpyHostToDevice, stream,
                         std::move(done));
}

Status CopyAnyAsync(void* to, const void* from, size_t bytes, void* stream,
                    std::function<void(Status)> done) {
  auto s = static_cast<cudaStream_t>(stream);
  ADJSNAP_RETURN_IF_ERROR(
      FromCuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync"));
  return ThenDone(s, std::move(done));
}

Status DeviceFreeMemory(uint64_t* free_bytes) {
  size_t free = 0, total = 0;
  ADJSNAP_RETURN_IF_ERROR(FromCuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo"));
  *free_bytes = free;
  return Status::Ok();
}

Status DeviceAllocate(uint64_t bytes, void** device) {
  return FromCuda(cudaMalloc(device, bytes), "cudaMalloc of the device pool");
}

void DeviceRelease(void* device) { cudaFree(device); }

Status CopyDeviceToHost(void* host, const void* device, size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  ADJSNAP_RETURN_IF_ERROR(
      FromCuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
  return FromCuda(cudaStreamSynchronize(s), "device-to-host copy");
}

Status CopyHostToDevice(void* device, const void* host, size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  ADJSNAP_RETURN_IF_ERROR(
      FromCuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync"));
  return FromCuda(cudaStreamSynchronize(s), "host-to-device copy");
}

Status FirstNonFiniteOnDevice(const void* device, uint64_t count, bool f64, void* stream,
                              uint64_t* index) {
  uint64_t* result = nullptr;
  ADJSNAP_RETURN_IF_ERROR(FromCuda(cudaMallocHost(reinterpret_cast<void**>(&result), 8),
                                 "cudaMallocHost"));
  Status s = kernels::FirstNonFiniteDevice(
      device, count, f64 ? kernels::Real::kFloat64 : kernels::Real::kFloat32, result, stream);
  if (s.ok()) s = FromCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "NaN scan");
  if (s.ok()) *index = *result;
  cudaFreeHost(result);
  return s;
}

#else  // !ADJSNAP_WITH_CUDA

namespace {
Status NoCuda() {
  return Status::FailedPrecondition(
      "device pushes and fetches need a libadjsnap built with CUDA (ADJSNAP_WITH_CUDA)");
}
}  // namespace

Status PinHost(char*, size_t) { return NoCuda(); }
void UnpinHost(char*) {}
Status CopyDeviceToHostAsync(char*, const char*, const Pieces&, void*,
                             std::function<void(Status)>) {
  return NoCuda();
}
Status CopyHostToDeviceAsync(char*, const char*, const Pieces&, void*,
                             std::function<void(Status)>) {
  return NoCuda();
}
Status CopyAnyAsync(void*, const void*, size_t, void*, std::function<void(Status)>) {
  return NoCuda();
}
Status DeviceFreeMemory(uint64_t*) { return NoCuda(); }
Status DeviceAllocate(uint64_t, void**) { return NoCuda(); }
void DeviceRelease(void*) {}
Status CopyDeviceToHost(void*, const void*, size_t, void*) { return NoCuda(); }
Status FirstNonFiniteOnDevice(const void*, uint64_t, bool, void*, uint64_t*) { return NoCuda(); }
Status CopyHostToDevice(void*, const void*, size_t, void*) { return NoCuda(); }

#endif

}  // namespace adjsnap::detail
