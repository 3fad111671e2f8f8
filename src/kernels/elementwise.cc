// GELU (tanh approximation) and GeGLU (Gemma's gated MLP over it), tanh, scaling and the
// residual add.
//
// GELU is evaluated as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), which equals
// 0.5 x (1 + tanh(u)) exactly (tanh(u) = 2 sigmoid(2u) - 1) and needs one exp, no tanh.
#include <cmath>

#include "kernels/gated.h"
#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// s = sigmoid(2u) for 8 lanes, and u' = du/dx when wanted.
inline __m256 Sigmoid2u(__m256 x, __m256* du) {
  const __m256 k0 = _mm256_set1_ps(kSqrt2OverPi), k1 = _mm256_set1_ps(kCubic);
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 u = _mm256_mul_ps(k0, _mm256_fmadd_ps(_mm256_mul_ps(k1, x2), x, x));
  if (du)
    *du = _mm256_mul_ps(k0, _mm256_fmadd_ps(_mm256_set1_ps(3.f * kCubic), x2, _mm256_set1_ps(1.f)));
  const __m256 e = Exp8(_mm256_mul_ps(u, _mm256_set1_ps(-2.f)));
  return _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

inline __m256 GeluGrad8(__m256 x, __m256 d) {
  __m256 du;
  const __m256 s = Sigmoid2u(x, &du);
  // d/dx [x s(2u)] = s + 2 x s (1 - s) u'
  const __m256 one_minus_s = _mm256_sub_ps(_mm256_set1_ps(1.f), s);
  const __m256 t =
      _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(x, x), s), _mm256_mul_ps(one_minus_s, du));
  return _mm256_mul_ps(_mm256_add_ps(s, t), d);
}

// GeGLU's lanes: out = gelu(g) u; dg = d u gelu'(g), du = d gelu(g).
inline __m256 Geglu8(__m256 g, __m256 u) {
  return _mm256_mul_ps(_mm256_mul_ps(g, Sigmoid2u(g, nullptr)), u);
}
inline void GegluGrad8(__m256 g, __m256 u, __m256 d, __m256* dg, __m256* du) {
  *dg = GeluGrad8(g, _mm256_mul_ps(d, u));
  *du = _mm256_mul_ps(d, _mm256_mul_ps(g, Sigmoid2u(g, nullptr)));
}

}  // namespace

void GegluForward(WorkerPool& pool, float* out, const float* gu, std::size_t N, int F) {
  GatedForward(pool, out, gu, N, F, [](__m256 g, __m256 u) { return Geglu8(g, u); });
}

void GegluBackward(WorkerPool& pool, float* dgu, const float* gu, const float* dout, std::size_t N,
                   int F) {
  GatedBackward(
      pool, dgu, gu, dout, N, F,
      [](__m256 g, __m256 u, __m256 d, __m256* dg, __m256* du) { GegluGrad8(g, u, d, dg, du); });
}

void ScaleInPlace(WorkerPool& pool, float* x, std::size_t n, float s) {
  pool.ParallelFor(n, [&](std::size_t lo, std::size_t hi, int) {
    for (std::size_t i = lo; i < hi; ++i) x[i] *= s;
  });
}

void GeluForward(WorkerPool& pool, float* out, const float* inp, std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    std::size_t i = b;
    for (; i + 8 <= e; i += 8) {
      __m256 x = _mm256_loadu_ps(inp + i);
      _mm256_storeu_ps(out + i, _mm256_mul_ps(x, Sigmoid2u(x, nullptr)));
    }
    if (i < e) {
      __m256 x = LoadPartial(inp + i, e - i, 0.f);
      StorePartial(out + i, e - i, _mm256_mul_ps(x, Sigmoid2u(x, nullptr)));
    }
  });
}

void GeluBackward(WorkerPool& pool, float* dinp, const float* inp, const float* dout,
                  std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    std::size_t i = b;
    for (; i + 8 <= e; i += 8) {
      _mm256_storeu_ps(dinp + i, GeluGrad8(_mm256_loadu_ps(inp + i), _mm256_loadu_ps(dout + i)));
    }
    if (i < e) {
      StorePartial(dinp + i, e - i,
                   GeluGrad8(LoadPartial(inp + i, e - i, 0.f), LoadPartial(dout + i, e - i, 0.f)));
    }
  });
}

// Scalar std::tanh: the pooler's (B,C) is the only caller, a few thousand values a step.
void TanhForward(WorkerPool& pool, float* out, const float* inp, std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i) out[i] = std::tanh(inp[i]);
  });
}

void TanhBackward(WorkerPool& pool, float* dinp, const float* out, const float* dout,
                  std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i) dinp[i] = (1.f - out[i] * out[i]) * dout[i];
  });
}

void ResidualForward(WorkerPool& pool, float* out, const float* a, const float* b, std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t lo, std::size_t hi, int) {
    for (std::size_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
  });
}

}  // namespace cputrain::kernels
