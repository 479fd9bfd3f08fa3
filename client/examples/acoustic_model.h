// The 2-D acoustic model of the example solver: a two-layer velocity model, a Ricker source and
// a second-order leapfrog stencil. Shared by acoustic2d and by adjsnap-bench, which compresses its
// wavefields (real snapshots, not random data).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace acoustic {

// Squared Courant number c^2 dt^2 / dx^2 of a two-layer model, below the 2-D bound 0.5.
inline std::vector<float> TwoLayerModel(int nx, int ny) {
  std::vector<float> vel2(static_cast<size_t>(nx) * ny);
  for (int y = 0; y < ny; ++y) {
    for (int x = 0; x < nx; ++x) vel2[static_cast<size_t>(y) * nx + x] = y < ny / 2 ? 0.16f : 0.36f;
  }
  return vel2;
}

// One leapfrog step: next = 2 cur - prev + courant^2 * lap(cur), zero (Dirichlet) boundary.
inline void Step(int nx, int ny, const float* vel2, const float* prev, const float* cur,
                 float* next) {
  for (int y = 1; y < ny - 1; ++y) {
    for (int x = 1; x < nx - 1; ++x) {
      int i = y * nx + x;
      float lap = cur[i - 1] + cur[i + 1] + cur[i - nx] + cur[i + nx] - 4.0f * cur[i];
      next[i] = 2.0f * cur[i] - prev[i] + vel2[i] * lap;
    }
  }
}

inline float Ricker(int t, float dt, float f0) {
  float tau = t * dt - 1.2f / f0;
  float a = static_cast<float>(M_PI * M_PI) * f0 * f0 * tau * tau;
  return (1.0f - 2.0f * a) * std::exp(-a);
}

// The source position and time constants acoustic2d uses.
inline int SourceIndex(int nx, int ny) { return (ny / 8) * nx + nx / 2; }
constexpr float kDt = 1.0f;
constexpr float kF0 = 0.03f;

// The forward wavefield after `steps` steps.
inline std::vector<float> Wavefield(int nx, int ny, int steps) {
  std::vector<float> vel2 = TwoLayerModel(nx, ny);
  size_t cells = static_cast<size_t>(nx) * ny;
  std::vector<std::vector<float>> u(3, std::vector<float>(cells, 0.0f));
  int src = SourceIndex(nx, ny);
  for (int t = 0; t < steps; ++t) {
    int ib = (t + 2) % 3;
    Step(nx, ny, vel2.data(), u[t % 3].data(), u[(t + 1) % 3].data(), u[ib].data());
    u[ib][src] += Ricker(t, kDt, kF0);
  }
  return u[(steps + 1) % 3];
}

}  // namespace acoustic
