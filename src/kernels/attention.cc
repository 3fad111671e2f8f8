// Causal multi-head attention, one (batch row, head) pair per task, with the matrix products in
// blocks of query rows so the masked upper triangle is mostly skipped: rows [r0, r1) only
// multiply keys [0, r1).
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

constexpr int kRowBlock = 64;

// p[0..t] = softmax(p[0..t]); p[t+1..T) = 0.
void CausalSoftmaxRow(float* p, int t, int T) {
  const std::size_t n = static_cast<std::size_t>(t) + 1;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(p + j));
  if (j < n) vmax = _mm256_max_ps(vmax, LoadPartial(p + j, n - j, -INFINITY));
  const __m256 m = _mm256_set1_ps(HMax8(vmax));
  __m256 acc = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), m));
    _mm256_storeu_ps(p + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (j < n) {
    // padded lanes: exp(-inf - m) clamps to exp(-88.4) = 0
    __m256 e = Exp8(_mm256_sub_ps(LoadPartial(p + j, n - j, -INFINITY), m));
    StorePartial(p + j, n - j, e);
    acc = _mm256_add_ps(acc, e);
  }
  const float inv = 1.0f / HSum8(acc);
  for (j = 0; j < n; ++j) p[j] *= inv;
  std::fill(p + n, p + T, 0.f);
}

}  // namespace

void AttentionForward(WorkerPool& pool, float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int) {
    for (std::size_t task = t0; task < t1; ++task) {
      const std::size_t b = task / NH, h = task % NH;
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* A = att + task * T * T;  // task == b*NH + h
      float* y = out + b * T * C + h * hs;
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock);
        // A[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale,
                    q + static_cast<std::size_t>(r0) * C3, C3, k, C3, 0.f,
                    A + static_cast<std::size_t>(r0) * T, T);
        for (int t = r0; t < r1; ++t) CausalSoftmaxRow(A + static_cast<std::size_t>(t) * T, t, T);
        // y[r0:r1] = A[r0:r1, 0:r1] @ v[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.f,
                    A + static_cast<std::size_t>(r0) * T, T, v, C3, 0.f,
                    y + static_cast<std::size_t>(r0) * C, C);
      }
    }
  });
}

void AttentionBackward(WorkerPool& pool, float* dqkv, float* scratch, const float* dout,
                       const float* qkv, const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int tid) {
    float* dS = scratch + static_cast<std::size_t>(tid) * T * T;
    for (std::size_t task = t0; task < t1; ++task) {
      const std::size_t b = task / NH, h = task % NH;
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + b * T * C3 + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* P = att + task * T * T;
      const float* dy = dout + b * T * C + h * hs;
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock);
        // dP[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T, kept in dS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.f,
                    dy + static_cast<std::size_t>(r0) * C, C, v, C3, 0.f,
                    dS + static_cast<std::size_t>(r0) * T, T);
        // dS = P * (dP - rowsum(P * dP)) * scale on [0, t]; exact zeros on (t, T) because the
        // column-block products below read the upper triangle of diagonal blocks.
        for (int t = r0; t < r1; ++t) {
          const float* p = P + static_cast<std::size_t>(t) * T;
          float* d = dS + static_cast<std::size_t>(t) * T;
          const float dot = Dot(p, d, static_cast<std::size_t>(t) + 1);
          for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - dot) * scale;
          std::fill(d + t + 1, d + T, 0.f);
        }
        // dq[r0:r1] = dS[r0:r1, 0:r1] @ k[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.f,
                    dS + static_cast<std::size_t>(r0) * T, T, k, C3, 0.f,
                    dq + static_cast<std::size_t>(r0) * C3, C3);
      }
      for (int j0 = 0; j0 < T; j0 += kRowBlock) {
        const int j1 = std::min(T, j0 + kRowBlock);
        const std::size_t o = static_cast<std::size_t>(j0);
        // dk[j0:j1] = dS[j0:T, j0:j1]^T @ q[j0:T];  dv[j0:j1] = P[j0:T, j0:j1]^T @ dy[j0:T]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.f,
                    dS + o * T + o, T, q + o * C3, C3, 0.f, dk + o * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.f,
                    P + o * T + o, T, dy + o * C, C, 0.f, dv + o * C3, C3);
      }
    }
  });
}

}  // namespace cputrain::kernels
