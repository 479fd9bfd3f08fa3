// adjsnap-bench --device: device (CUDA) pushes and fetches against the copy engine's limits,
// measured in the same run.
// References: pinned cudaMemcpy device-to-host and host-to-device of the same bytes (best of 5).
// Push: N PushDevice calls from two device buffers, each reused once its push is released,
// timed until every snapshot is stored. Backward: N FetchDeviceAsync in reverse step order,
// double-buffered: step t-1's fetch runs while step t "computes" (a spin kernel of the given
// time, default 1.25x the H2D copy of one step); the stall is the time the solver waited for a
// fetch, as a fraction of the backward pass, over the newest 16, 64 and 256 steps (as many of
// those as the run has) and over all of them. The first push is also timed on its own, from the
// call to stored: it pays whatever the client must set up (pinning the host tier's chunks its
// block lies in), against the median of the others.
#include "device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "adjsnap/kernels.h"
#include "adjsnap/units.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "adjsnap-bench --device: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Best of `reps` pinned copies of `bytes`, in bytes per second.
double CopyRate(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, int reps) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    if (!Cuda(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy")) return 0;
    best = std::max(best, bytes / Seconds(t0, Clock::now()));
  }
  return best;
}

}  // namespace

int DeviceBench(adjsnap::Client& c, uint64_t steps, uint64_t bytes, double compute_ms, bool json) {
  adjsnap::kernels::DeviceProbe gpu = adjsnap::kernels::ProbeDevice();
  if (!gpu.usable) {
    std::fprintf(stderr, "adjsnap-bench --device: no usable GPU: %s\n", gpu.description.c_str());
    return 1;
  }
  void *d[2], *pinned;
  for (auto& p : d) {
    if (!Cuda(cudaMalloc(&p, bytes), "cudaMalloc") || !Cuda(cudaMemset(p, 1, bytes), "memset")) {
      return 1;
    }
  }
  if (!Cuda(cudaMallocHost(&pinned, bytes), "cudaMallocHost")) return 1;
  double d2h = CopyRate(pinned, d[0], bytes, cudaMemcpyDeviceToHost, 5);
  double h2d = CopyRate(d[0], pinned, bytes, cudaMemcpyHostToDevice, 5);
  cudaStream_t stream;
  if (!Cuda(cudaStreamCreate(&stream), "cudaStreamCreate")) return 1;
  auto fail = [](const char* what, const adjsnap::Status& s) {
    std::fprintf(stderr, "adjsnap-bench --device: %s: %s\n", what, s.ToString().c_str());
    return 1;
  };

  adjsnap::RunSpec spec;
  spec.name = "adjsnap-bench-device";
  spec.steps = steps;
  spec.bytes_per_step = bytes;
  spec.keep = true;  // two backward passes
  auto run = c.OpenRun(spec);
  if (!run.ok()) return fail("open run", run.status());
  // The first device push of this process, alone, from the call to stored: it pays for
  // whatever the client sets up (pinning the host-tier chunks its block lies in).
  auto f0 = Clock::now();
  std::vector<adjsnap::PushHandle> pushes;
  {
    auto h = c.PushDevice(run->run_id, 0, d[0], bytes, stream);
    if (!h.ok()) return fail("push", h.status());
    if (auto s = h->WaitStored(); !s.ok()) return fail("push", s);
    pushes.push_back(*h);
  }
  double first_push = Seconds(f0, Clock::now());
  // A steady push for comparison: one at a time into a block already used (each step is
  // deleted before the next, so the tier hands the same block out again); the median of 8
  // after one to settle. Outside the forward pass's timing.
  std::vector<double> steady;
  {
    adjsnap::RunSpec again = spec;
    again.name = "adjsnap-bench-device-steady";
    again.steps = 9;
    again.keep = false;
    auto r2 = c.OpenRun(again);
    if (!r2.ok()) return fail("open run", r2.status());
    for (uint64_t t = 0; t < again.steps; ++t) {
      auto p0 = Clock::now();
      auto h = c.PushDevice(r2->run_id, t, d[t % 2], bytes, stream);
      if (!h.ok()) return fail("push", h.status());
      if (auto s = h->WaitStored(); !s.ok()) return fail("push", s);
      if (t > 0) steady.push_back(Seconds(p0, Clock::now()));
      if (auto s = c.DeleteSnapshot(again.name, t); !s.ok()) return fail("delete step", s);
    }
    (void)c.DeleteRun(again.name);
  }
  std::sort(steady.begin(), steady.end());
  double steady_push = steady[steady.size() / 2];
  // Forward: the rest of the run, two device buffers each reused once its push is released.
  // The push rate counts every step, the first included.
  auto f1 = Clock::now();
  for (uint64_t t = 1; t < steps; ++t) {
    if (t >= 2) {
      if (auto s = pushes[t - 2].WaitReleased(); !s.ok()) return fail("push", s);
    }
    auto h = c.PushDevice(run->run_id, t, d[t % 2], bytes, stream);
    if (!h.ok()) return fail("push", h.status());
    pushes.push_back(*h);
  }
  for (auto& h : pushes) {
    if (auto s = h.WaitStored(); !s.ok()) return fail("push", s);
  }
  double push_rate = steps * bytes / (first_push + Seconds(f1, Clock::now()));

  // Backward, double-buffered: once without compute (the fetch rate), once with a simulated
  // compute per step (the stall). The run keeps its steps for the second pass.
  double compute_s = compute_ms > 0 ? compute_ms / 1e3 : 1.25 * bytes / h2d;
  // Reads the newest `n` steps in reverse; returns the pass's time, or -1.
  auto backward = [&](double compute, uint64_t n, double* waited) -> double {
    *waited = 0;
    uint64_t stop = steps - n;
    auto b0 = Clock::now();
    auto first = c.FetchDeviceAsync(run->run_id, steps - 1, d[(steps - 1) % 2], bytes, stream);
    if (!first.ok()) return fail("fetch", first.status()), -1.0;
    adjsnap::FetchHandle current = *first;
    for (uint64_t t = steps; t-- > stop;) {
      auto w0 = Clock::now();
      if (auto s = current.Wait(); !s.ok()) return fail("fetch", s), -1.0;
      *waited += Seconds(w0, Clock::now());
      if (t > stop) {
        auto f = c.FetchDeviceAsync(run->run_id, t - 1, d[(t - 1) % 2], bytes, stream);
        if (!f.ok()) return fail("fetch", f.status()), -1.0;
        current = *f;
      }
      auto busy = Clock::now();  // the solver's step on the GPU; its host thread waits
      while (Seconds(busy, Clock::now()) < compute) {
      }
    }
    return Seconds(b0, Clock::now());
  };
  double waited = 0;
  double bare = backward(0, steps, &waited);
  if (bare < 0) return 1;
  double fetch_rate = steps * bytes / bare;
  double with_compute = backward(compute_s, steps, &waited);
  if (with_compute < 0) return 1;
  double stall = waited / with_compute;
  std::vector<std::pair<uint64_t, double>> stalls;  // (steps, stall) over the newest steps
  for (uint64_t n : {16, 64, 256}) {
    if (n >= steps) break;
    double pass = backward(compute_s, n, &waited);
    if (pass < 0) return 1;
    stalls.emplace_back(n, waited / pass);
  }
  stalls.emplace_back(steps, stall);
  uint64_t host_tier = 0;
  if (auto tiers = c.Tiers(); tiers.ok()) {
    for (const adjsnap::TierInfo& t : *tiers) {
      if (t.tier == adjsnap::Tier::kHost) host_tier = t.budget_bytes;
    }
  }
  adjsnap::Status deleted = c.DeleteRun("adjsnap-bench-device");
  (void)deleted;
  for (auto& p : d) cudaFree(p);
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);
  auto gbs = [](double r) { return r / 1e9; };
  const char* path = c.data_path() == adjsnap::DataPath::kMappedHostTier ? "mapped" : "ucx";
  if (json) {
    std::string by_steps;
    for (auto [n, f] : stalls) {
      by_steps += (by_steps.empty() ? "" : ", ") + std::string("\"") + std::to_string(n) +
                  "\": " + std::to_string(f);
    }
    std::printf(
        "{\"gpu\": \"%s\", \"steps\": %llu, \"bytes\": %llu, \"data_path\": \"%s\",\n"
        " \"host_tier_bytes\": %llu, \"d2h_gbs\": %.3f, \"h2d_gbs\": %.3f,"
        " \"push_gbs\": %.3f, \"fetch_gbs\": %.3f,\n"
        " \"push_vs_d2h\": %.3f, \"fetch_vs_h2d\": %.3f, \"first_push_ms\": %.3f,"
        " \"steady_push_ms\": %.3f, \"first_vs_steady\": %.2f,\n"
        " \"compute_ms\": %.3f, \"backward_stall\": %.4f,"
        " \"backward_stall_by_steps\": {%s}}\n",
        gpu.description.c_str(), (unsigned long long)steps, (unsigned long long)bytes, path,
        (unsigned long long)host_tier, gbs(d2h), gbs(h2d), gbs(push_rate), gbs(fetch_rate),
        push_rate / d2h, fetch_rate / h2d, first_push * 1e3, steady_push * 1e3,
        first_push / steady_push, compute_s * 1e3, stall, by_steps.c_str());
  } else {
    std::printf("adjsnap-bench --device: %s; %llu steps x %s, data path %s\n", gpu.description.c_str(),
                (unsigned long long)steps, adjsnap::FormatBytes(bytes).c_str(), path);
    std::printf("%-28s %8s %8s\n", "", "GB/s", "ratio");
    std::printf("%-28s %8.2f %8s\n", "pinned cudaMemcpy D2H", gbs(d2h), "1.00");
    std::printf("%-28s %8.2f %8.2f\n", "adjsnapd device push (stored)", gbs(push_rate),
                push_rate / d2h);
    std::printf("%-28s %8.2f %8s\n", "pinned cudaMemcpy H2D", gbs(h2d), "1.00");
    std::printf("%-28s %8.2f %8.2f\n", "adjsnapd device fetch", gbs(fetch_rate), fetch_rate / h2d);
    std::printf("host tier %s; first push %.2f ms (call to stored), a steady push %.2f ms: %.2fx\n",
                adjsnap::FormatBytes(host_tier).c_str(), first_push * 1e3, steady_push * 1e3,
                first_push / steady_push);
    for (auto [n, f] : stalls) {
      std::printf(
          "backward over the newest %llu steps, %.2f ms compute per step: the solver "
          "waited %.1f %% of the pass\n",
          (unsigned long long)n, compute_s * 1e3, 100 * f);
    }
  }
  return 0;
}
