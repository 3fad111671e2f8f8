// SwiGLU, the activation of Llama's MLP: down(silu(gate(x)) * up(x)), with gate and up fused into
// one product whose output rows are [gate (F) | up (F)].
//
// silu(g) = g * sigmoid(g), sigmoid(g) = 1 / (1 + e^-g) with the kernels' Exp8 (vmath.h), whose
// clamp keeps it finite: for g < -88.4 sigmoid is ~4e-39 (silu ~0), for g > 88.4 exactly 1.
// The loops are gated.h's (one row per task step, a row's tail through the same vector code).
#include "kernels/gated.h"
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
  GatedForward(pool, out, gu, N, F, [](__m256 g, __m256 u) { return Swiglu8(g, u); });
}

void SwigluBackward(WorkerPool& pool, float* dgu, const float* gu, const float* dout, std::size_t N,
                    int F) {
  GatedBackward(
      pool, dgu, gu, dout, N, F,
      [](__m256 g, __m256 u, __m256 d, __m256* dg, __m256* du) { SwigluGrad8(g, u, d, dg, du); });
}

}  // namespace cputrain::kernels
