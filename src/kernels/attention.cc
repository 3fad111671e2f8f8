// Causal multi-head attention, one (batch row, head) pair per task, with the matrix products in
// blocks of query rows so the masked upper triangle is mostly skipped: rows [r0, r1) only
// multiply keys [0, r1). The fp32 products run in OpenBLAS; the bf16 ones (train.precision: bf16)
// run the same blocks in Bf16Gemm, with the softmax and its backward in fp32 between them.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

constexpr int kRowBlock = 64;
// The bf16 products' row block: a multiple of Bf16Gemm's 12-row micro-tile, so that no tile
// runs mostly empty.
constexpr int kRowBlockBf16 = 72;

// p[0..t] = softmax(scale * p[0..t]); p[t+1..T) = 0. (scale = 1 multiplies exactly.)
void CausalSoftmaxRow(float* p, int t, int T, float scale = 1.f) {
  const std::size_t n = static_cast<std::size_t>(t) + 1;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(p + j));
  if (j < n) vmax = _mm256_max_ps(vmax, LoadPartial(p + j, n - j, -INFINITY));
  const __m256 m = _mm256_set1_ps(HMax8(vmax)), vs = _mm256_set1_ps(scale);
  __m256 acc = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 e = Exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(p + j), m), vs));
    _mm256_storeu_ps(p + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (j < n) {
    // padded lanes: exp(-inf - m) clamps to exp(-88.4) = 0
    __m256 e = Exp8(_mm256_mul_ps(_mm256_sub_ps(LoadPartial(p + j, n - j, -INFINITY), m), vs));
    StorePartial(p + j, n - j, e);
    acc = _mm256_add_ps(acc, e);
  }
  const float inv = 1.0f / HSum8(acc);
  for (j = 0; j < n; ++j) p[j] *= inv;
  std::fill(p + n, p + T, 0.f);
}

// Where task b*NH + h finds its head: element offsets of row 0 of head h of batch row b in a
// (B,T,3C) buffer (q; k and v follow at +C and +2C, row stride 3C) and in a (B,T,C) one.
struct HeadAt {
  std::size_t qkv, btc;
};
HeadAt Head(std::size_t task, int NH, int T, int C) {
  const std::size_t b = task / NH, h = task % NH, hs = static_cast<std::size_t>(C / NH);
  return {b * T * 3 * C + h * hs, b * T * C + h * hs};
}
template <class E>
struct Qkv {
  E *q, *k, *v;
};
template <class E>
Qkv<E> QkvOf(E* base, const HeadAt& at, int C) {
  E* q = base + at.qkv;
  return {q, q + C, q + 2 * C};
}

}  // namespace

void AttentionForward(WorkerPool& pool, float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int) {
    for (std::size_t task = t0; task < t1; ++task) {
      const HeadAt at = Head(task, NH, T, C);
      const auto [q, k, v] = QkvOf(qkv, at, C);
      float* A = att + task * T * T;  // task == b*NH + h
      float* y = out + at.btc;
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
      const HeadAt at = Head(task, NH, T, C);
      const auto [q, k, v] = QkvOf(qkv, at, C);
      const auto [dq, dk, dv] = QkvOf(dqkv, at, C);
      const float* P = att + task * T * T;
      const float* dy = dout + at.btc;
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

void AttentionForwardBf16(WorkerPool& pool, float* out, float* att, const float* qkv,
                          uint16_t* qkv_bf16, uint16_t* scratch_bf16, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ConvertToBf16(pool, qkv_bf16, qkv, static_cast<std::size_t>(B) * T * C3);
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int tid) {
    uint16_t* Pb = scratch_bf16 + static_cast<std::size_t>(tid) * AttentionScratchBf16(1, T);
    for (std::size_t task = t0; task < t1; ++task) {
      const HeadAt at = Head(task, NH, T, C);
      const auto [q, k, v] = QkvOf<const uint16_t>(qkv_bf16, at, C);
      float* A = att + task * T * T;
      float* y = out + at.btc;
      for (int r0 = 0; r0 < T; r0 += kRowBlockBf16) {
        const int r1 = std::min(T, r0 + kRowBlockBf16);
        const std::size_t o = static_cast<std::size_t>(r0);
        // A[r0:r1, 0:r1] = q[r0:r1] @ k[0:r1]^T (scaled inside the softmax)
        Bf16Gemm(r1 - r0, r1, hs, q + o * C3, false, C3, k, true, C3, A + o * T, T);
        for (int t = r0; t < r1; ++t) {
          float* p = A + static_cast<std::size_t>(t) * T;
          CausalSoftmaxRow(p, t, T, scale);
          ConvertRowToBf16(Pb + static_cast<std::size_t>(t) * T, p, r1);
        }
        // y[r0:r1] = P[r0:r1, 0:r1] @ v[0:r1]
        Bf16Gemm(r1 - r0, hs, r1, Pb + o * T, false, T, v, false, C3, y + o * C, C);
      }
    }
  });
}

void AttentionBackwardBf16(WorkerPool& pool, float* dqkv, float* scratch, uint16_t* scratch_bf16,
                           uint16_t* qkv_bf16, uint16_t* dout_bf16, const float* dout,
                           const float* qkv, const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ConvertToBf16(pool, qkv_bf16, qkv, static_cast<std::size_t>(B) * T * C3);
  ConvertToBf16(pool, dout_bf16, dout, static_cast<std::size_t>(B) * T * C);
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int tid) {
    float* dP = scratch + static_cast<std::size_t>(tid) * T * T;
    uint16_t* dSb = scratch_bf16 + static_cast<std::size_t>(tid) * AttentionScratchBf16(1, T);
    uint16_t* Pb = dSb + static_cast<std::size_t>(T) * T;
    for (std::size_t task = t0; task < t1; ++task) {
      const HeadAt at = Head(task, NH, T, C);
      const auto [q, k, v] = QkvOf<const uint16_t>(qkv_bf16, at, C);
      const auto [dq, dk, dv] = QkvOf(dqkv, at, C);
      const float* P = att + task * T * T;
      const uint16_t* dy = dout_bf16 + at.btc;
      // Row t of dSb and Pb is written on columns [0, r1), r1 the end of t's block, which is
      // every column the products below read of it (zeros past t).
      for (int r0 = 0; r0 < T; r0 += kRowBlockBf16) {
        const int r1 = std::min(T, r0 + kRowBlockBf16);
        const std::size_t o = static_cast<std::size_t>(r0);
        // dP[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T
        Bf16Gemm(r1 - r0, r1, hs, dy + o * C, false, C, v, true, C3, dP + o * T, T);
        for (int t = r0; t < r1; ++t) {
          const float* p = P + static_cast<std::size_t>(t) * T;
          float* d = dP + static_cast<std::size_t>(t) * T;
          const float dot = Dot(p, d, static_cast<std::size_t>(t) + 1);
          for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - dot) * scale;
          std::fill(d + t + 1, d + r1, 0.f);
          ConvertRowToBf16(dSb + static_cast<std::size_t>(t) * T, d, r1);
          ConvertRowToBf16(Pb + static_cast<std::size_t>(t) * T, p, r1);
        }
        // dq[r0:r1] = dS[r0:r1, 0:r1] @ k[0:r1]
        Bf16Gemm(r1 - r0, hs, r1, dSb + o * T, false, T, k, false, C3, dq + o * C3, C3);
      }
      for (int j0 = 0; j0 < T; j0 += kRowBlockBf16) {
        const int j1 = std::min(T, j0 + kRowBlockBf16);
        const std::size_t o = static_cast<std::size_t>(j0);
        // dk[j0:j1] = dS[j0:T, j0:j1]^T @ q[j0:T];  dv[j0:j1] = P[j0:T, j0:j1]^T @ dy[j0:T]
        Bf16Gemm(j1 - j0, hs, T - j0, dSb + o * T + o, true, T, q + o * C3, false, C3, dk + o * C3,
                 C3);
        Bf16Gemm(j1 - j0, hs, T - j0, Pb + o * T + o, true, T, dy + o * C, false, C, dv + o * C3,
                 C3);
      }
    }
  });
}

}  // namespace cputrain::kernels
