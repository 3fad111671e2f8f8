// SwiGLU, the activation of Llama's MLP: down(silu(gate(x)) * up(x)), with gate and up fused into
// one product whose output rows are [gate (F) | up (F)].
//
// silu(g) = g * sigmoid(g), sigmoid(g) = 1 / (1 + e^-g) with the kernels' Exp8 (vmath.h), whose
// clamp keeps it finite: for g < -88.4 sigmoid is ~4e-39 (silu ~0), for g > 88.4 exactly 1.
// One row per task step; a row's tail goes through the same vector code (padded), so every value
// gets the same bits whatever the pool size.
#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

inline __m256 Sigmoid8(__m256 g) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

// out = silu(g) * u
inline __m256 Swiglu8(__m256 g, __m256 u) {
  return _mm256_mul_ps(_mm256_mul_ps(g, Sigmoid8(g)), u);
}

// dg = d * u * silu'(g), silu'(g) = s (1 + g (1 - s)); du = d * silu(g).
inline void SwigluGrad8(__m256 g, __m256 u, __m256 d, __m256* dg, __m256* du) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 s = Sigmoid8(g);
  const __m256 dsilu = _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one));
  *dg = _mm256_mul_ps(_mm256_mul_ps(d, u), dsilu);
  *du = _mm256_mul_ps(d, _mm256_mul_ps(g, s));
}

}  // namespace

void SwigluForward(WorkerPool& pool, float* out, const float* gu, std::size_t N, int F) {
  const std::size_t f = static_cast<std::size_t>(F);
  pool.ParallelFor(N, [&](std::size_t r0, std::size_t r1, int) {
    for (std::size_t r = r0; r < r1; ++r) {
      const float* g = gu + r * 2 * f;
      const float* u = g + f;
      float* o = out + r * f;
      std::size_t i = 0;
      for (; i + 8 <= f; i += 8)
        _mm256_storeu_ps(o + i, Swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
      if (i < f)
        StorePartial(o + i, f - i,
                     Swiglu8(LoadPartial(g + i, f - i, 0.f), LoadPartial(u + i, f - i, 0.f)));
    }
  });
}

void SwigluBackward(WorkerPool& pool, float* dgu, const float* gu, const float* dout, std::size_t N,
                    int F) {
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
        SwigluGrad8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), _mm256_loadu_ps(d + i), &vg,
                    &vu);
        _mm256_storeu_ps(dg + i, vg);
        _mm256_storeu_ps(du + i, vu);
      }
      if (i < f) {
        SwigluGrad8(LoadPartial(g + i, f - i, 0.f), LoadPartial(u + i, f - i, 0.f),
                    LoadPartial(d + i, f - i, 0.f), &vg, &vu);
        StorePartial(dg + i, f - i, vg);
        StorePartial(du + i, f - i, vu);
      }
    }
  });
}

}  // namespace cputrain::kernels
