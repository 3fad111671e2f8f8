// Causal multi-head and grouped-query attention, with the matrix products in blocks of query rows
// so the masked upper triangle is mostly skipped: rows [r0, r1) only multiply keys [0, r1). The
// fp32 products run in OpenBLAS; the bf16 ones (train.precision: bf16) run the same blocks in
// Bf16Gemm, with the softmax and its backward in fp32 between them.
//
// Forward: one (batch row, query head) pair per task. Backward: one (batch row, key/value head)
// pair per task, which runs the NH/NKV query heads sharing that key/value head in order: the
// first writes dk and dv, the others add, so no two tasks write the same element and the sums'
// order is fixed. With NKV = NH both are GPT-2's one task per head, in the same order as before
// grouped-query attention existed (the same products on the same operands: the same bits).
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
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

// Row t of the softmax's backward: d[0..t] = p * (d - rowsum(p * d)) * scale, d holding dP on
// entry and dS on return; d(t, end) = 0.
void SoftmaxBackwardRow(float* d, const float* p, int t, int end, float scale) {
  const float dot = Dot(p, d, static_cast<std::size_t>(t) + 1);
  for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - dot) * scale;
  std::fill(d + t + 1, d + end, 0.f);
}

// The number of key/value heads: NKV, or NH for 0.
int KvHeads(int NH, int NKV) {
  if (NKV == 0) return NH;
  CPUTRAIN_CHECK(NKV > 0 && NH % NKV == 0, "attention: NKV must divide NH");
  return NKV;
}
// Where the heads are. qkv (B,T,R), R = (NH + 2*NKV)*hs: query head h of batch row b starts at
// b*T*R + h*hs, key head g at b*T*R + (NH + g)*hs, value head g at b*T*R + (NH + NKV + g)*hs;
// head h of a (B,T,C) buffer (out, dout) at b*T*C + h*hs. Every head's rows are R (or C) apart.
struct Heads {
  int T, C, NH, NKV, hs, R;
  Heads(int T_, int C_, int NH_, int NKV_)
      : T(T_), C(C_), NH(NH_), NKV(KvHeads(NH_, NKV_)), hs(C_ / NH_), R((NH + 2 * NKV) * hs) {}
  int Group() const { return NH / NKV; }  // query heads per key/value head
  std::size_t Row(std::size_t b) const { return b * T * R; }
  std::size_t Out(std::size_t b, int h) const {
    return b * T * C + static_cast<std::size_t>(h) * hs;
  }
};
template <class E>
struct Qkv {
  E *q, *k, *v;
};
// Backward task b*NKV + g: f(b, h, first) for the query heads h sharing key/value head g, in
// order; `first` writes dk and dv, the others add to them.
template <class F>
void ForGroupHeads(const Heads& H, std::size_t task, F&& f) {
  const std::size_t b = task / H.NKV;
  const int h0 = static_cast<int>(task % H.NKV) * H.Group();
  for (int h = h0; h < h0 + H.Group(); ++h) f(b, h, h == h0);
}
// Query head h of batch row b and the key/value head it attends with.
template <class E>
Qkv<E> QkvOf(E* base, const Heads& H, std::size_t b, int h) {
  E* row = base + H.Row(b);
  const std::size_t g = static_cast<std::size_t>(h / H.Group()), hs = H.hs;
  return {row + h * hs, row + (H.NH + g) * hs, row + (H.NH + H.NKV + g) * hs};
}

}  // namespace

void AttentionForward(WorkerPool& pool, float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH, int NKV) {
  const Heads H(T, C, NH, NKV);
  const int hs = H.hs, R = H.R;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int) {
    for (std::size_t task = t0; task < t1; ++task) {  // task == b*NH + h
      const std::size_t b = task / NH;
      const int h = static_cast<int>(task % NH);
      const auto [q, k, v] = QkvOf(qkv, H, b, h);
      float* A = att + task * T * T;
      float* y = out + H.Out(b, h);
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock);
        // A[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale,
                    q + static_cast<std::size_t>(r0) * R, R, k, R, 0.f,
                    A + static_cast<std::size_t>(r0) * T, T);
        for (int t = r0; t < r1; ++t) CausalSoftmaxRow(A + static_cast<std::size_t>(t) * T, t, T);
        // y[r0:r1] = A[r0:r1, 0:r1] @ v[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.f,
                    A + static_cast<std::size_t>(r0) * T, T, v, R, 0.f,
                    y + static_cast<std::size_t>(r0) * C, C);
      }
    }
  });
}

void AttentionBackward(WorkerPool& pool, float* dqkv, float* scratch, const float* dout,
                       const float* qkv, const float* att, int B, int T, int C, int NH, int NKV) {
  const Heads H(T, C, NH, NKV);
  const int hs = H.hs, R = H.R;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::size_t tasks = static_cast<std::size_t>(B) * H.NKV;
  pool.ParallelFor(tasks, [&](std::size_t t0, std::size_t t1, int tid) {
    float* dS = scratch + static_cast<std::size_t>(tid) * T * T;
    for (std::size_t task = t0; task < t1; ++task) {
      ForGroupHeads(H, task, [&](std::size_t b, int h, bool first) {
        const auto [q, k, v] = QkvOf(qkv, H, b, h);
        const auto [dq, dk, dv] = QkvOf(dqkv, H, b, h);
        const float* P = att + (b * NH + h) * T * T;
        const float* dy = dout + H.Out(b, h);
        for (int r0 = 0; r0 < T; r0 += kRowBlock) {
          const int r1 = std::min(T, r0 + kRowBlock);
          // dP[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T, kept in dS
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.f,
                      dy + static_cast<std::size_t>(r0) * C, C, v, R, 0.f,
                      dS + static_cast<std::size_t>(r0) * T, T);
          // dS on [0, T): exact zeros past t because the column-block products below read the
          // upper triangle of diagonal blocks.
          for (int t = r0; t < r1; ++t)
            SoftmaxBackwardRow(dS + static_cast<std::size_t>(t) * T,
                               P + static_cast<std::size_t>(t) * T, t, T, scale);
          // dq[r0:r1] = dS[r0:r1, 0:r1] @ k[0:r1]
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.f,
                      dS + static_cast<std::size_t>(r0) * T, T, k, R, 0.f,
                      dq + static_cast<std::size_t>(r0) * R, R);
        }
        const float beta = first ? 0.f : 1.f;
        for (int j0 = 0; j0 < T; j0 += kRowBlock) {
          const int j1 = std::min(T, j0 + kRowBlock);
          const std::size_t o = static_cast<std::size_t>(j0);
          // dk[j0:j1] (+)= dS[j0:T, j0:j1]^T @ q[j0:T];  dv[j0:j1] (+)= P[j0:T, j0:j1]^T @ dy[j0:T]
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.f,
                      dS + o * T + o, T, q + o * R, R, beta, dk + o * R, R);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.f,
                      P + o * T + o, T, dy + o * C, C, beta, dv + o * R, R);
        }
      });
    }
  });
}

void AttentionDecode(WorkerPool& pool, float* out, float* scratch, const float* q,
                     const float* k_cache, const float* v_cache, int n, int NH, int NKV, int hs,
                     int ld) {
  const std::size_t group = static_cast<std::size_t>(NH / KvHeads(NH, NKV));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  pool.ParallelFor(static_cast<std::size_t>(NH), [&](std::size_t t0, std::size_t t1, int tid) {
    float* a = scratch + static_cast<std::size_t>(tid) * n;
    for (std::size_t h = t0; h < t1; ++h) {
      const std::size_t g = h / group;
      // a[0:n] = scale * k[0:n] @ q_h; softmax; out_h = a[0:n] @ v[0:n]
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, hs, scale, k_cache + g * hs, ld, q + h * hs, 1,
                  0.f, a, 1);
      CausalSoftmaxRow(a, n - 1, n);
      cblas_sgemv(CblasRowMajor, CblasTrans, n, hs, 1.f, v_cache + g * hs, ld, a, 1, 0.f,
                  out + h * hs, 1);
    }
  });
}

void AttentionForwardBf16(WorkerPool& pool, float* out, float* att, const float* qkv,
                          uint16_t* qkv_bf16, uint16_t* scratch_bf16, int B, int T, int C, int NH,
                          int NKV) {
  const Heads H(T, C, NH, NKV);
  const int hs = H.hs, R = H.R;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ConvertToBf16(pool, qkv_bf16, qkv, H.Row(B));
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int tid) {
    uint16_t* Pb = scratch_bf16 + static_cast<std::size_t>(tid) * AttentionScratchBf16(1, T);
    for (std::size_t task = t0; task < t1; ++task) {  // task == b*NH + h
      const std::size_t b = task / NH;
      const int h = static_cast<int>(task % NH);
      const auto [q, k, v] = QkvOf<const uint16_t>(qkv_bf16, H, b, h);
      float* A = att + task * T * T;
      float* y = out + H.Out(b, h);
      for (int r0 = 0; r0 < T; r0 += kRowBlockBf16) {
        const int r1 = std::min(T, r0 + kRowBlockBf16);
        const std::size_t o = static_cast<std::size_t>(r0);
        // A[r0:r1, 0:r1] = q[r0:r1] @ k[0:r1]^T (scaled inside the softmax)
        Bf16Gemm(r1 - r0, r1, hs, q + o * R, false, R, k, true, R, A + o * T, T);
        for (int t = r0; t < r1; ++t) {
          float* p = A + static_cast<std::size_t>(t) * T;
          CausalSoftmaxRow(p, t, T, scale);
          ConvertRowToBf16(Pb + static_cast<std::size_t>(t) * T, p, r1);
        }
        // y[r0:r1] = P[r0:r1, 0:r1] @ v[0:r1]
        Bf16Gemm(r1 - r0, hs, r1, Pb + o * T, false, T, v, false, R, y + o * C, C);
      }
    }
  });
}

void AttentionBackwardBf16(WorkerPool& pool, float* dqkv, float* scratch, uint16_t* scratch_bf16,
                           uint16_t* qkv_bf16, uint16_t* dout_bf16, const float* dout,
                           const float* qkv, const float* att, int B, int T, int C, int NH,
                           int NKV) {
  const Heads H(T, C, NH, NKV);
  const int hs = H.hs, R = H.R;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ConvertToBf16(pool, qkv_bf16, qkv, H.Row(B));
  ConvertToBf16(pool, dout_bf16, dout, static_cast<std::size_t>(B) * T * C);
  const std::size_t tasks = static_cast<std::size_t>(B) * H.NKV;
  pool.ParallelFor(tasks, [&](std::size_t t0, std::size_t t1, int tid) {
    float* dP = scratch + static_cast<std::size_t>(tid) * T * T;
    uint16_t* dSb = scratch_bf16 + static_cast<std::size_t>(tid) * AttentionScratchBf16(1, T);
    uint16_t* Pb = dSb + static_cast<std::size_t>(T) * T;
    for (std::size_t task = t0; task < t1; ++task) {
      ForGroupHeads(H, task, [&](std::size_t b, int h, bool first) {
        const auto [q, k, v] = QkvOf<const uint16_t>(qkv_bf16, H, b, h);
        const auto [dq, dk, dv] = QkvOf(dqkv, H, b, h);
        const float* P = att + (b * NH + h) * T * T;
        const uint16_t* dy = dout_bf16 + H.Out(b, h);
        // Row t of dSb and Pb is written on columns [0, r1), r1 the end of t's block, which is
        // every column the products below read of it (zeros past t).
        for (int r0 = 0; r0 < T; r0 += kRowBlockBf16) {
          const int r1 = std::min(T, r0 + kRowBlockBf16);
          const std::size_t o = static_cast<std::size_t>(r0);
          // dP[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T
          Bf16Gemm(r1 - r0, r1, hs, dy + o * C, false, C, v, true, R, dP + o * T, T);
          for (int t = r0; t < r1; ++t) {
            const float* p = P + static_cast<std::size_t>(t) * T;
            float* d = dP + static_cast<std::size_t>(t) * T;
            SoftmaxBackwardRow(d, p, t, r1, scale);
            ConvertRowToBf16(dSb + static_cast<std::size_t>(t) * T, d, r1);
            ConvertRowToBf16(Pb + static_cast<std::size_t>(t) * T, p, r1);
          }
          // dq[r0:r1] = dS[r0:r1, 0:r1] @ k[0:r1]
          Bf16Gemm(r1 - r0, hs, r1, dSb + o * T, false, T, k, false, R, dq + o * R, R);
        }
        for (int j0 = 0; j0 < T; j0 += kRowBlockBf16) {
          const int j1 = std::min(T, j0 + kRowBlockBf16);
          const std::size_t o = static_cast<std::size_t>(j0);
          // dk[j0:j1] (+)= dS[j0:T, j0:j1]^T @ q[j0:T];  dv[j0:j1] (+)= P[j0:T, j0:j1]^T @ dy[j0:T]
          Bf16Gemm(j1 - j0, hs, T - j0, dSb + o * T + o, true, T, q + o * R, false, R, dk + o * R,
                   R, !first);
          Bf16Gemm(j1 - j0, hs, T - j0, Pb + o * T + o, true, T, dy + o * C, false, C, dv + o * R,
                   R, !first);
        }
      });
    }
  });
}

}  // namespace cputrain::kernels
