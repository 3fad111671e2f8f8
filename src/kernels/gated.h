// kernels/ internal: the loops of the gated MLP activations (SwiGLU, swiglu.cc; GeGLU,
// elementwise.cc) over gu (N,2F), each row [gate (F) | up (F)]: one row per task step, a row's
// tail through the same vector code (padded), so every value gets the same bits whatever the
// pool size. `lane(g, u)` is 8 lanes of the activation; `grad(g, u, d, &dg, &du)` their
// gradients from the output's d.
#pragma once

#include <cstddef>

#include "kernels/vmath.h"
#include "runtime/worker_pool.h"

namespace cputrain::kernels {

// out (N,F) = lane(gate, up).
template <class Lane>
void GatedForward(WorkerPool& pool, float* out, const float* gu, std::size_t N, int F, Lane lane) {
  const std::size_t f = static_cast<std::size_t>(F);
  pool.ParallelFor(N, [&](std::size_t r0, std::size_t r1, int) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* g = gu + r * 2 * f;
      const float* u = g + f;
      float* o = out + r * f;
      std::size_t i = 0;
      for (; i + 8 <= f; i += 8)
        _mm256_storeu_ps(o + i, lane(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
      if (i < f)
        StorePartial(o + i, f - i,
                     lane(LoadPartial(g + i, f - i, 0.f), LoadPartial(u + i, f - i, 0.f)));
    }
  });
}

// dgu (N,2F) written: [d gate | d up] from dout (N,F).
template <class Grad>
void GatedBackward(WorkerPool& pool, float* dgu, const float* gu, const float* dout, std::size_t N,
                   int F, Grad grad) {
  const std::size_t f = static_cast<std::size_t>(F);
  pool.ParallelFor(N, [&](std::size_t r0, std::size_t r1, int) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* g = gu + r * 2 * f;
      const float* u = g + f;
      const float* d = dout + r * f;
      float* dg = dgu + r * 2 * f;
      float* du = dg + f;
      __m256 vg, vu;
      std::size_t i = 0;
      for (; i + 8 <= f; i += 8) {
        grad(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), _mm256_loadu_ps(d + i), &vg, &vu);
        _mm256_storeu_ps(dg + i, vg);
        _mm256_storeu_ps(du + i, vu);
      }
      if (i < f) {
        grad(LoadPartial(g + i, f - i, 0.f), LoadPartial(u + i, f - i, 0.f),
             LoadPartial(d + i, f - i, 0.f), &vg, &vu);
        StorePartial(dg + i, f - i, vg);
        StorePartial(du + i, f - i, vu);
      }
    }
  });
}

}  // namespace cputrain::kernels
