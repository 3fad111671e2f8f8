// Per-head RMSNorm of the queries and keys (Qwen3's and Gemma 3's q_norm / k_norm), applied to
// the fused qkv activation after its product and before the rotary embedding: each of a row's NH
// query heads (hs values) is normalized with the one weight vector wq (hs), each of its NKV key
// heads with wk; values untouched. In fp32, in transformers' order: weight * (x * rstd), or with
// Gemma's weight_offset 1, (x * rstd) * (1 + weight).
//
// The work splits by rows; the weight gradients by columns (each column's sum over rows and heads
// in order), so no result depends on the pool size.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

// Column chunk of the weight-gradient pass (as rmsnorm.cc's).
constexpr std::size_t kColChunk = 256;

// Head h (< NH + NKV) of row n: queries first, then keys, in qkv's layout.
inline std::size_t HeadAt(std::size_t n, int h, std::size_t R, int hs) {
  return n * R + static_cast<std::size_t>(h) * hs;
}

}  // namespace

void QkNormForward(WorkerPool& pool, float* qkv, float* saved, float* rstd, const float* wq,
                   const float* wk, std::size_t N, int NH, int NKV, int hs, float eps,
                   float weight_offset) {
  const std::size_t R = static_cast<std::size_t>(NH + 2 * NKV) * hs;
  const int heads = NH + NKV;
  pool.ParallelFor(N, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t n = b; n < e; ++n) {
      for (int h = 0; h < heads; ++h) {
        float* x = qkv + HeadAt(n, h, R, hs);
        float* keep = saved + (n * heads + h) * hs;
        std::copy(x, x + hs, keep);
        const float s = 1.0f / std::sqrt(Dot(keep, keep, hs) / hs + eps);
        const float* w = h < NH ? wq : wk;
        for (int c = 0; c < hs; ++c) x[c] = (w[c] + weight_offset) * (keep[c] * s);
        rstd[n * heads + h] = s;
      }
    }
  });
}

void QkNormBackward(WorkerPool& pool, float* dqkv, float* dwq, float* dwk, const float* saved,
                    const float* rstd, const float* wq, const float* wk, std::size_t N, int NH,
                    int NKV, int hs, float weight_offset, bool accumulate) {
  const std::size_t R = static_cast<std::size_t>(NH + 2 * NKV) * hs;
  const int heads = NH + NKV;
  // The weight gradients first, while dqkv still holds d(out): dw[c] = sum over rows and heads
  // of d(out) * (x * rstd), in that order, columns [0, 2 hs) (wq's, then wk's) split over the
  // workers in chunks kept in registers/L1 while the rows stream by (a frozen norm's skipped).
  if (dwq != nullptr || dwk != nullptr) {
    const std::size_t cols = 2 * static_cast<std::size_t>(hs);
    pool.ParallelFor(cols, [&](std::size_t c0, std::size_t c1, int) {
      const std::size_t half = static_cast<std::size_t>(hs);
      for (std::size_t cb = c0, ce = 0; cb < c1; cb = ce) {
        // a chunk never straddles wq's and wk's columns
        ce = std::min({c1, cb + kColChunk, cb < half ? half : cols});
        const bool key = cb >= half;
        float* dw = key ? dwk : dwq;
        if (dw == nullptr) continue;
        const std::size_t off = key ? half : 0;
        float acc[kColChunk] = {};
        for (std::size_t n = 0; n < N; ++n) {
          for (int h = key ? NH : 0; h < (key ? heads : NH); ++h) {
            const float s = rstd[n * heads + h];
            const float* d = dqkv + HeadAt(n, h, R, hs);
            const float* x = saved + (n * heads + h) * hs;
            for (std::size_t c = cb; c < ce; ++c) acc[c - cb] += d[c - off] * (x[c - off] * s);
          }
        }
        for (std::size_t c = cb; c < ce; ++c)
          dw[c - off] = accumulate ? dw[c - off] + acc[c - cb] : acc[c - cb];
      }
    });
  }
  // Then each head's d(x) in place: with norm = x * rstd and dn = (w + offset) * dout,
  // dx = (dn - norm * mean(dn * norm)) * rstd.
  pool.ParallelFor(N, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t n = b; n < e; ++n) {
      for (int h = 0; h < heads; ++h) {
        float* d = dqkv + HeadAt(n, h, R, hs);
        const float* x = saved + (n * heads + h) * hs;
        const float* w = h < NH ? wq : wk;
        const float s = rstd[n * heads + h];
        float dot = 0;
        for (int c = 0; c < hs; ++c) dot += (w[c] + weight_offset) * d[c] * (x[c] * s);
        const float mean = dot / hs;
        for (int c = 0; c < hs; ++c) d[c] = ((w[c] + weight_offset) * d[c] - x[c] * s * mean) * s;
      }
    }
  });
}

}  // namespace cputrain::kernels
