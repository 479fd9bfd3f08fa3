// acoustic2d: a small 2D acoustic reverse-time migration that keeps its forward wavefield in
// adjsnapd.
//
// Forward pass: second-order finite differences of u_tt = c^2 (u_xx + u_yy) + source, with
// receivers along a row; every step's wavefield is pushed to adjsnapd and its checksum kept.
// Backward pass: the adjoint wavefield is propagated backwards in time from the recorded
// receiver traces; each forward snapshot is fetched from adjsnapd in reverse order, checked
// against its checksum, and cross-correlated into the image (the RTM imaging condition).
//
//   acoustic2d [--nx 512] [--ny 512] [--steps 200] [--run NAME] [--socket PATH] [--keep]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "acoustic_model.h"
#include "adjsnap/checksum.h"
#include "adjsnap/client.h"
#include "adjsnap/units.h"

namespace {

struct Args {
  int nx = 512;
  int ny = 512;
  int steps = 200;
  std::string run = "acoustic2d";
  std::string socket;
  bool keep = false;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (k == "--keep") {
      a->keep = true;
    } else if ((k == "--nx" || k == "--ny" || k == "--steps") && (v = next())) {
      int n = std::atoi(v);
      if (n < 8) {
        std::fprintf(stderr, "acoustic2d: %s must be >= 8\n", k.c_str());
        return false;
      }
      (k == "--nx" ? a->nx : k == "--ny" ? a->ny : a->steps) = n;
    } else if (k == "--run" && (v = next())) {
      a->run = v;
    } else if (k == "--socket" && (v = next())) {
      a->socket = v;
    } else {
      std::fprintf(stderr,
                   "usage: acoustic2d [--nx N] [--ny N] [--steps N] [--run NAME] "
                   "[--socket PATH] [--keep]\n");
      return false;
    }
  }
  return true;
}

int Fail(const char* what, const adjsnap::Status& s) {
  std::fprintf(stderr, "acoustic2d: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) return 2;
  const int nx = a.nx, ny = a.ny, nt = a.steps;
  const size_t cells = static_cast<size_t>(nx) * ny;
  const size_t bytes = cells * sizeof(float);

  using acoustic::Step;
  const std::vector<float> vel2 = acoustic::TwoLayerModel(nx, ny);
  const int src = acoustic::SourceIndex(nx, ny);
  const int rec_row = ny / 8;

  adjsnap::ClientOptions opts;
  opts.socket_path = a.socket;
  opts.client_name = "acoustic2d";
  auto client = adjsnap::Client::Connect(opts);
  if (!client.ok()) return Fail("connect", client.status());
  adjsnap::Client& c = **client;
  (void)c.DeleteRun(a.run);  // a previous run of the example under the same name
  adjsnap::RunSpec spec;
  spec.name = a.run;
  spec.steps = nt;
  spec.bytes_per_step = bytes;
  spec.dtype = adjsnap::Dtype::kFloat32;
  spec.shape = {static_cast<uint64_t>(ny), static_cast<uint64_t>(nx)};
  spec.keep = a.keep;  // otherwise each step is released as the backward pass reads it
  auto run = c.OpenRun(spec);
  if (!run.ok()) return Fail("open run", run.status());
  std::printf("acoustic2d: %dx%d grid, %d steps, %s per snapshot, run '%s' (id %llu)\n", nx, ny,
              nt, adjsnap::FormatBytes(bytes).c_str(), a.run.c_str(),
              (unsigned long long)run->run_id);

  // Forward. Three rotating wavefield buffers; a buffer is overwritten only after adjsnapd has
  // released its previous push.
  std::vector<std::vector<float>> u(3, std::vector<float>(cells, 0.0f));
  std::vector<adjsnap::PushHandle> pending(3);
  std::vector<uint64_t> sums(nt);
  std::vector<float> traces(static_cast<size_t>(nt) * nx);
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < nt; ++t) {
    int ib = (t + 2) % 3;  // buffer for step t
    if (t >= 3) {
      adjsnap::Status s = pending[ib].WaitReleased();
      if (!s.ok()) return Fail("push", s);
    }
    Step(nx, ny, vel2.data(), u[(t + 0) % 3].data(), u[(t + 1) % 3].data(), u[ib].data());
    u[ib][src] += acoustic::Ricker(t, acoustic::kDt, acoustic::kF0);
    std::memcpy(&traces[static_cast<size_t>(t) * nx], &u[ib][rec_row * nx], nx * sizeof(float));
    sums[t] = adjsnap::Checksum(u[ib].data(), bytes);
    auto h = c.Push(run->run_id, t, u[ib].data(), bytes);
    if (!h.ok()) return Fail("push", h.status());
    pending[ib] = *h;
  }
  for (auto& h : pending) {
    adjsnap::Status s = h.WaitStored();
    if (!s.ok()) return Fail("push", s);
  }
  double fwd_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (auto s = c.CloseRun(a.run); !s.ok()) return Fail("close run", s);
  auto where = c.Locate(a.run, nt - 1);
  if (!where.ok()) return Fail("locate", where.status());
  std::printf("forward:  %d snapshots pushed in %.2f s; step %d is on the %s tier\n", nt, fwd_s,
              nt - 1, adjsnap::TierName(where->tier));

  // Backward: adjoint field driven by the time-reversed receiver traces.
  std::vector<float> fwd(cells), image(cells, 0.0f);
  std::vector<std::vector<float>> v(3, std::vector<float>(cells, 0.0f));
  int verified = 0;
  t0 = std::chrono::steady_clock::now();
  for (int t = nt - 1; t >= 0; --t) {
    adjsnap::Status s = c.Fetch(run->run_id, t, fwd.data(), bytes);
    if (!s.ok()) return Fail("fetch", s);
    if (adjsnap::Checksum(fwd.data(), bytes) != sums[t]) {
      std::fprintf(stderr, "acoustic2d: step %d came back with different bytes\n", t);
      return 1;
    }
    ++verified;
    int k = nt - 1 - t;
    int ib = (k + 2) % 3;
    Step(nx, ny, vel2.data(), v[(k + 0) % 3].data(), v[(k + 1) % 3].data(), v[ib].data());
    for (int x = 0; x < nx; ++x) v[ib][rec_row * nx + x] += traces[static_cast<size_t>(t) * nx + x];
    for (size_t i = 0; i < cells; ++i) image[i] += fwd[i] * v[ib][i];
  }
  double bwd_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double norm = 0.0;
  for (float x : image) norm += static_cast<double>(x) * x;
  std::printf("backward: %d snapshots fetched in reverse in %.2f s, %d/%d checksums match\n", nt,
              bwd_s, verified, nt);
  std::printf("image:    L2 norm %.6e\n", std::sqrt(norm));
  if (!a.keep) {
    if (auto s = c.DeleteRun(a.run); !s.ok()) return Fail("delete run", s);
  }
  return verified == nt ? 0 : 1;
}
