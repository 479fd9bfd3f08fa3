// CUDA versions of the kernels (include/adjsnap/kernels.h). Each computes what its CPU reference
// computes, through the same arithmetic (checksum_math.h, kernel_math.h).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <string>

#include "kernel_math.h"
#include "adjsnap/kernels.h"

namespace adjsnap::kernels {
namespace {

namespace cm = checksum_math;

constexpr int kThreads = 256;

Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(e) + ": " +
                          cudaGetErrorString(e));
}

// Whether the CUDA driver's library (libcuda.so.1, which comes with the driver, not with the
// toolkit) loads at all. Where it does not, cudart says "CUDA driver version is insufficient
// for CUDA runtime version", which reads as an old driver on a machine that has none.
bool DriverLibraryLoads() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return false;
  dlclose(driver);
  return true;
}

// Errors of the launch just made (bad configuration, no device).
Status LaunchStatus(const char* what) { return FromCuda(cudaGetLastError(), what); }

cudaStream_t Stream(void* s) { return static_cast<cudaStream_t>(s); }

// One CUDA block per 64 KiB checksum block: the threads load each tile into shared memory
// (coalesced, zero-padded past the data), thread 0 feeds it to the four lanes, and finally
// writes the block's term of the sum.
__global__ void ChecksumBlocks(const unsigned char* data, uint64_t bytes, uint64_t* terms) {
  __shared__ unsigned char tile[math::kTileBytes];
  __shared__ uint64_t lanes[4];
  const uint64_t b = blockIdx.x;
  const uint64_t off = b * cm::kBlockBytes;
  const uint64_t n = min(static_cast<uint64_t>(cm::kBlockBytes), bytes - off);
  if (threadIdx.x == 0) cm::LaneInit(b, lanes);
  for (uint64_t t = 0; t < n; t += math::kTileBytes) {
    const uint64_t m = min(static_cast<uint64_t>(math::kTileBytes), n - t);
    __syncthreads();  // the previous tile is consumed
    for (uint32_t i = threadIdx.x; i < math::kTileBytes; i += blockDim.x) {
      tile[i] = i < m ? data[off + t + i] : 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) math::ConsumeTile(lanes, tile, m);
  }
  if (threadIdx.x == 0) terms[b] = cm::BlockTerm(cm::BlockHash(lanes, n), b);
}

// Wrapping sum of the terms (exact in any order), then the final mix.
__global__ void ChecksumCombine(const uint64_t* terms, uint64_t blocks, uint64_t bytes,
                                uint64_t* result) {
  __shared__ uint64_t part[kThreads];
  uint64_t sum = 0;
  for (uint64_t i = threadIdx.x; i < blocks; i += blockDim.x) sum += terms[i];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *result = cm::Finish(part[0], bytes);
}

template <typename Bits>
__global__ void FirstNonFinite(const Bits* data, uint64_t count, unsigned long long* result) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    bool bad;
    if constexpr (sizeof(Bits) == 4) {
      bad = math::NonFinite32(data[i]);
    } else {
      bad = math::NonFinite64(data[i]);
    }
    if (bad) atomicMin(result, static_cast<unsigned long long>(i));
  }
}

__global__ void SetAllFinite(unsigned long long* result) { *result = kAllFinite; }

struct BoxArgs {
  uint64_t dims[3], origin[3], extent[3];
};

// One thread per packed element; elements are moved as `Word`s (elem_bytes / sizeof(Word) of
// them), so 4- and 8-byte elements move in one access.
template <typename Word, bool kPack>
__global__ void CopyBox(const Word* from, Word* to, BoxArgs b, uint64_t elements,
                        uint32_t words) {
  for (uint64_t p = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; p < elements;
       p += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    uint64_t f = math::BoxSourceIndex(b.dims, b.origin, b.extent, p);
    for (uint32_t w = 0; w < words; ++w) {
      if (kPack) {
        to[p * words + w] = from[f * words + w];
      } else {
        to[f * words + w] = from[p * words + w];
      }
    }
  }
}

uint32_t Grid(uint64_t work) {
  return static_cast<uint32_t>(std::min<uint64_t>((work + kThreads - 1) / kThreads, 65535 * 8));
}

template <bool kPack>
Status LaunchBox(const void* from, void* to, const Box& box, void* stream, const char* what) {
  ADJSNAP_RETURN_IF_ERROR(ValidateBox(box));
  BoxArgs a;
  for (int i = 0; i < 3; ++i) {
    a.dims[i] = box.dims[i];
    a.origin[i] = box.origin[i];
    a.extent[i] = box.extent[i];
  }
  uint64_t n = BoxElements(box);
  auto s = Stream(stream);
  if (box.elem_bytes % 8 == 0) {
    CopyBox<uint64_t, kPack><<<Grid(n), kThreads, 0, s>>>(
        static_cast<const uint64_t*>(from), static_cast<uint64_t*>(to), a, n,
        static_cast<uint32_t>(box.elem_bytes / 8));
  } else if (box.elem_bytes % 4 == 0) {
    CopyBox<uint32_t, kPack><<<Grid(n), kThreads, 0, s>>>(
        static_cast<const uint32_t*>(from), static_cast<uint32_t*>(to), a, n,
        static_cast<uint32_t>(box.elem_bytes / 4));
  } else {
    CopyBox<unsigned char, kPack><<<Grid(n), kThreads, 0, s>>>(
        static_cast<const unsigned char*>(from), static_cast<unsigned char*>(to), a, n,
        static_cast<uint32_t>(box.elem_bytes));
  }
  return LaunchStatus(what);
}

}  // namespace

Status ChecksumDevice(const void* data, uint64_t bytes, uint64_t* result, void* stream) {
  if (bytes != 0 && data == nullptr) return Status::InvalidArgument("checksum: data is null");
  auto s = Stream(stream);
  uint64_t blocks = (bytes + cm::kBlockBytes - 1) / cm::kBlockBytes;
  uint64_t* terms = nullptr;
  if (blocks != 0) {
    ADJSNAP_RETURN_IF_ERROR(
        FromCuda(cudaMallocAsync(reinterpret_cast<void**>(&terms), blocks * 8, s),
                 "checksum: cudaMallocAsync"));
    ChecksumBlocks<<<static_cast<uint32_t>(blocks), kThreads, 0, s>>>(
        static_cast<const unsigned char*>(data), bytes, terms);
    ADJSNAP_RETURN_IF_ERROR(LaunchStatus("checksum"));
  }
  ChecksumCombine<<<1, kThreads, 0, s>>>(terms, blocks, bytes, result);
  ADJSNAP_RETURN_IF_ERROR(LaunchStatus("checksum combine"));
  if (terms) ADJSNAP_RETURN_IF_ERROR(FromCuda(cudaFreeAsync(terms, s), "checksum: cudaFreeAsync"));
  return Status::Ok();
}

Status FirstNonFiniteDevice(const void* data, uint64_t count, Real type, uint64_t* result,
                            void* stream) {
  auto s = Stream(stream);
  auto* out = reinterpret_cast<unsigned long long*>(result);
  SetAllFinite<<<1, 1, 0, s>>>(out);
  if (count != 0) {
    if (type == Real::kFloat32) {
      FirstNonFinite<<<Grid(count), kThreads, 0, s>>>(static_cast<const uint32_t*>(data), count,
                                                       out);
    } else {
      FirstNonFinite<<<Grid(count), kThreads, 0, s>>>(static_cast<const uint64_t*>(data), count,
                                                       out);
    }
  }
  return LaunchStatus("NaN/Inf scan");
}

Status PackBoxDevice(const void* full, void* packed, const Box& box, void* stream) {
  return LaunchBox<true>(full, packed, box, stream, "pack");
}

Status UnpackBoxDevice(const void* packed, void* full, const Box& box, void* stream) {
  return LaunchBox<false>(packed, full, box, stream, "unpack");
}

DeviceProbe ProbeDevice() {
  DeviceFacts f;
  f.built_with_cuda = true;
  f.driver_loads = DriverLibraryLoads();
  cudaRuntimeGetVersion(&f.runtime_version);  // the runtime linked in; needs no driver
  if (cudaDriverGetVersion(&f.driver_version) != cudaSuccess) f.driver_version = 0;
  cudaError_t e = cudaGetDeviceCount(&f.device_count);
  switch (e) {
    case cudaSuccess:
      f.count_result = DeviceFacts::Count::kOk;
      break;
    case cudaErrorNoDevice:
      f.count_result = DeviceFacts::Count::kNoDevice;
      break;
    case cudaErrorInsufficientDriver:
      f.count_result = DeviceFacts::Count::kInsufficientDriver;
      break;
    default:
      f.count_result = DeviceFacts::Count::kOtherError;
      f.error = cudaGetErrorString(e);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it
    f.device_count = 0;
  }
  int device = 0;
  cudaDeviceProp p{};
  if (f.device_count > 0 && cudaGetDevice(&device) == cudaSuccess &&
      cudaGetDeviceProperties(&p, device) == cudaSuccess) {
    f.have_device = true;
    f.name = p.name;
    f.sm_major = p.major;
    f.sm_minor = p.minor;
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
      f.free_bytes = free_bytes;
      f.total_bytes = total;
    } else {
      f.total_bytes = p.totalGlobalMem;
    }
  }
  cudaGetLastError();  // a failed read above is not the caller's next call's error
  return DescribeDevice(f);
}

}  // namespace adjsnap::kernels
