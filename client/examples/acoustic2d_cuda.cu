// acoustic2d_cuda: the example solver on a GPU. The same 2-D acoustic model as acoustic2d
// (acoustic_model.h), stepped by a CUDA kernel; every forward wavefield is pushed from device
// memory (PushDevice: the GPU's copy engine writes into adjsnapd's host tier, no CPU copy) and
// read back in reverse into device memory (FetchDeviceAsync), the next step's fetch
// overlapping the current step's imaging. Checksums computed on the GPU at push and after
// each fetch must match. With --layers HostDevice or DiskHostDevice the newest steps stay in
// libadjsnap's GPU pool (ADJSNAP_DEVICE_MEM sizes it) and never leave the device.
//
//   acoustic2d_cuda [--nx N] [--ny N] [--steps N] [--run NAME] [--socket PATH] [--layers L]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "acoustic_model.h"
#include "adjsnap/client.h"
#include "adjsnap/kernels.h"

namespace {

#define CUDA_OR_DIE(call)                                                                  \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "acoustic2d_cuda: %s: %s\n", #call, cudaGetErrorString(e_));    \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

void Die(const char* what, const adjsnap::Status& s) {
  std::fprintf(stderr, "acoustic2d_cuda: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

__global__ void StepKernel(int nx, int ny, const float* vel2, const float* prev, const float* cur,
                           float* next, int src, float amplitude) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < 1 || y < 1 || x >= nx - 1 || y >= ny - 1) return;
  int i = y * nx + x;
  float lap = cur[i - 1] + cur[i + 1] + cur[i - nx] + cur[i + nx] - 4.0f * cur[i];
  next[i] = 2.0f * cur[i] - prev[i] + vel2[i] * lap + (i == src ? amplitude : 0.0f);
}

// Zero-lag imaging condition of the backward pass: image += u_fwd * u_fwd (a stand-in for the
// receiver wavefield, enough to use every fetched snapshot).
__global__ void ImageKernel(int cells, const float* u, float* image) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < cells) image[i] += u[i] * u[i];
}

}  // namespace

int main(int argc, char** argv) {
  int nx = 512, ny = 512, steps = 200;
  std::string run_name = "acoustic2d-cuda", socket, layers;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--nx") nx = std::atoi(argv[i + 1]);
    else if (k == "--ny") ny = std::atoi(argv[i + 1]);
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--run") run_name = argv[i + 1];
    else if (k == "--socket") socket = argv[i + 1];
    else if (k == "--layers") layers = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: acoustic2d_cuda [--nx N] [--ny N] [--steps N] [--run NAME] "
                           "[--socket PATH] [--layers L]\n");
      return 2;
    }
  }
  adjsnap::kernels::DeviceProbe gpu = adjsnap::kernels::ProbeDevice();
  if (!gpu.usable) {
    std::fprintf(stderr, "acoustic2d_cuda: no usable GPU: %s\n", gpu.description.c_str());
    return 1;
  }
  const int cells = nx * ny;
  const size_t bytes = static_cast<size_t>(cells) * sizeof(float);
  auto client = adjsnap::Client::Connect({.socket_path = socket, .client_name = "acoustic2d_cuda"});
  if (!client.ok()) Die("connect", client.status());
  auto run = (*client)->OpenRun({.name = run_name, .steps = static_cast<uint64_t>(steps),
                                 .bytes_per_step = bytes, .dtype = adjsnap::Dtype::kFloat32,
                                 .shape = {static_cast<uint64_t>(ny), static_cast<uint64_t>(nx)},
                                 .layers = layers});
  if (!run.ok()) Die("open run", run.status());

  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreate(&stream));
  std::vector<float> vel2 = acoustic::TwoLayerModel(nx, ny);
  float *d_vel2, *d_u[3], *d_back[2], *d_image;
  CUDA_OR_DIE(cudaMalloc(&d_vel2, bytes));
  CUDA_OR_DIE(cudaMemcpy(d_vel2, vel2.data(), bytes, cudaMemcpyHostToDevice));
  for (auto& p : d_u) {
    CUDA_OR_DIE(cudaMalloc(&p, bytes));
    CUDA_OR_DIE(cudaMemset(p, 0, bytes));
  }
  for (auto& p : d_back) CUDA_OR_DIE(cudaMalloc(&p, bytes));
  CUDA_OR_DIE(cudaMalloc(&d_image, bytes));
  CUDA_OR_DIE(cudaMemset(d_image, 0, bytes));
  uint64_t* sums = nullptr;  // pinned: [0, steps) at push, [steps, 2 steps) after fetch
  CUDA_OR_DIE(cudaMallocHost(&sums, 2 * sizeof(uint64_t) * steps));

  dim3 block(32, 8), grid((nx + 31) / 32, (ny + 7) / 8);
  const int src = acoustic::SourceIndex(nx, ny);
  std::vector<adjsnap::PushHandle> pending(3);
  bool in_use[3] = {false, false, false};
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);

  // Forward: step t writes buffer (t + 2) % 3, which the push of step t - 1 may still read.
  cudaEventRecord(t0, stream);
  for (int t = 0; t < steps; ++t) {
    int ib = (t + 2) % 3;
    if (in_use[ib]) {
      adjsnap::Status s = pending[ib].WaitReleased();
      if (!s.ok()) Die("push", s);
    }
    StepKernel<<<grid, block, 0, stream>>>(nx, ny, d_vel2, d_u[t % 3], d_u[(t + 1) % 3],
                                           d_u[ib], src, acoustic::Ricker(t, acoustic::kDt,
                                                                          acoustic::kF0));
    adjsnap::Status s = adjsnap::kernels::ChecksumDevice(d_u[ib], bytes, &sums[t], stream);
    if (!s.ok()) Die("checksum", s);
    auto h = (*client)->PushDevice(run->run_id, t, d_u[ib], bytes, stream);
    if (!h.ok()) Die("push", h.status());
    pending[ib] = *h;
    in_use[ib] = true;
  }
  for (int i = 0; i < 3; ++i) {
    if (!in_use[i]) continue;
    if (adjsnap::Status s = pending[i].WaitStored(); !s.ok()) Die("push", s);
  }
  cudaEventRecord(t1, stream);
  CUDA_OR_DIE(cudaStreamSynchronize(stream));
  float forward_ms = 0;
  cudaEventElapsedTime(&forward_ms, t0, t1);

  // Backward: fetch t - 1 into the other buffer while step t is imaged.
  cudaEventRecord(t0, stream);
  auto fetch = [&](int t) {
    auto f = (*client)->FetchDeviceAsync(run->run_id, t, d_back[t % 2], bytes, stream);
    if (!f.ok()) Die("fetch", f.status());
    return *f;
  };
  adjsnap::FetchHandle next = fetch(steps - 1);
  for (int t = steps - 1; t >= 0; --t) {
    if (adjsnap::Status s = next.Wait(); !s.ok()) Die("fetch", s);
    if (t > 0) next = fetch(t - 1);
    float* u = d_back[t % 2];
    adjsnap::Status s = adjsnap::kernels::ChecksumDevice(u, bytes, &sums[steps + t], stream);
    if (!s.ok()) Die("checksum", s);
    ImageKernel<<<(cells + 255) / 256, 256, 0, stream>>>(cells, u, d_image);
  }
  cudaEventRecord(t1, stream);
  CUDA_OR_DIE(cudaStreamSynchronize(stream));
  float backward_ms = 0;
  cudaEventElapsedTime(&backward_ms, t0, t1);

  int matches = 0;
  for (int t = 0; t < steps; ++t) matches += sums[t] == sums[steps + t];
  std::vector<float> image(cells);
  CUDA_OR_DIE(cudaMemcpy(image.data(), d_image, bytes, cudaMemcpyDeviceToHost));
  double norm = 0;
  for (float v : image) norm += static_cast<double>(v) * v;
  std::printf("gpu:      %s\n", gpu.description.c_str());
  std::printf("forward:  %d device snapshots of %.1f MiB pushed in %.3f s (%s path)\n", steps,
              bytes / 1048576.0, forward_ms / 1e3,
              (*client)->data_path() == adjsnap::DataPath::kMappedHostTier ? "mapped" : "ucx");
  std::printf("backward: %d snapshots fetched in reverse in %.3f s, %d/%d checksums match\n",
              steps, backward_ms / 1e3, matches, steps);
  std::printf("image:    L2 norm %e\n", std::sqrt(norm));
  adjsnap::Status deleted = (*client)->DeleteRun(run_name);
  if (!deleted.ok()) std::fprintf(stderr, "acoustic2d_cuda: %s\n", deleted.ToString().c_str());
  return matches == steps ? 0 : 1;
}
