#include "device_copy.h"

#include "snapd/kernels.h"

#include <map>
#include <mutex>
#include <string>

#if SNAPD_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace snapd::detail {

#if SNAPD_WITH_CUDA
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

Status CopyAsync(void* to, const void* from, size_t bytes, cudaMemcpyKind kind, void* stream,
                 std::function<void(Status)> done) {
  auto s = static_cast<cudaStream_t>(stream);
  SNAPD_RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(to, from, bytes, kind, s), "cudaMemcpyAsync"));
  auto* d = new Done{std::move(done)};
  Status launched = FromCuda(cudaLaunchHostFunc(s, RunDone, d), "cudaLaunchHostFunc");
  if (!launched.ok()) delete d;
  return launched;
}

std::mutex registered_mu;
std::map<void*, Status> registered;  // by base address: one entry per mapped host tier

}  // namespace

Status RegisterHost(void* base, size_t bytes) {
  std::lock_guard<std::mutex> lock(registered_mu);
  auto it = registered.find(base);
  if (it != registered.end()) return it->second;
  Status s = FromCuda(cudaHostRegister(base, bytes, cudaHostRegisterDefault),
                      "cudaHostRegister of snapd's host tier");
  registered.emplace(base, s);
  return s;
}

void UnregisterHost(void* base) {
  std::lock_guard<std::mutex> lock(registered_mu);
  auto it = registered.find(base);
  if (it == registered.end()) return;
  if (it->second.ok()) cudaHostUnregister(base);
  registered.erase(it);
}

Status CopyDeviceToHostAsync(void* host, const void* device, size_t bytes, void* stream,
                             std::function<void(Status)> done) {
  return CopyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream, std::move(done));
}

Status CopyHostToDeviceAsync(void* device, const void* host, size_t bytes, void* stream,
                             std::function<void(Status)> done) {
  return CopyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream, std::move(done));
}

Status CopyAnyAsync(void* to, const void* from, size_t bytes, void* stream,
                    std::function<void(Status)> done) {
  return CopyAsync(to, from, bytes, cudaMemcpyDefault, stream, std::move(done));
}

Status DeviceFreeMemory(uint64_t* free_bytes) {
  size_t free = 0, total = 0;
  SNAPD_RETURN_IF_ERROR(FromCuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo"));
  *free_bytes = free;
  return Status::Ok();
}

Status DeviceAllocate(uint64_t bytes, void** device) {
  return FromCuda(cudaMalloc(device, bytes), "cudaMalloc of the device pool");
}

void DeviceRelease(void* device) { cudaFree(device); }

Status CopyDeviceToHost(void* host, const void* device, size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  SNAPD_RETURN_IF_ERROR(
      FromCuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
  return FromCuda(cudaStreamSynchronize(s), "device-to-host copy");
}

Status CopyHostToDevice(void* device, const void* host, size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  SNAPD_RETURN_IF_ERROR(
      FromCuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync"));
  return FromCuda(cudaStreamSynchronize(s), "host-to-device copy");
}

Status FirstNonFiniteOnDevice(const void* device, uint64_t count, bool f64, void* stream,
                              uint64_t* index) {
  uint64_t* result = nullptr;
  SNAPD_RETURN_IF_ERROR(FromCuda(cudaMallocHost(reinterpret_cast<void**>(&result), 8),
                                 "cudaMallocHost"));
  Status s = kernels::FirstNonFiniteDevice(
      device, count, f64 ? kernels::Real::kFloat64 : kernels::Real::kFloat32, result, stream);
  if (s.ok()) s = FromCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "NaN scan");
  if (s.ok()) *index = *result;
  cudaFreeHost(result);
  return s;
}

#else  // !SNAPD_WITH_CUDA

namespace {
Status NoCuda() {
  return Status::FailedPrecondition(
      "device pushes and fetches need a libsnapd built with CUDA (SNAPD_WITH_CUDA)");
}
}  // namespace

Status RegisterHost(void*, size_t) { return NoCuda(); }
void UnregisterHost(void*) {}
Status CopyDeviceToHostAsync(void*, const void*, size_t, void*, std::function<void(Status)>) {
  return NoCuda();
}
Status CopyHostToDeviceAsync(void*, const void*, size_t, void*, std::function<void(Status)>) {
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

}  // namespace snapd::detail
