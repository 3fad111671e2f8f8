// LoRA's two small products on one adapted linear layer (kernels.h: LoraForward, LoraBackward),
// through the fp32 sgemm (kernels/sgemm.h), one single-threaded call per worker on its own block
// (matmul.cc).
//
// Forward, each worker on its rows [b,e) of the N (16-aligned, MatmulSlice): xd rows dropped
// (only when p > 0), h = xd A^T, out += scale h B^T. Every product is row-local, so no barrier.
// Backward, in phases separated by the pool's barrier:
//   1. rows [b,e): dh = scale dout B; xd rows recomputed (p > 0), or else dinp += dh A at once;
//      dB's rows [o0,o1) = scale dout^T h (a sum over all N rows: one sgemm per element block).
//   2. dA's columns [c0,c1) = dh^T xd (needs every row of dh and xd: after the barrier).
//   3. (p > 0 only) rows [b,e): xd = dh A (xd is free once phase 2 read it), dinp += mask(xd).
// The splits depend on the pool size alone, so results are bit-identical run to run.

#include <algorithm>

#include "kernels/kernels.h"
#include "kernels/sgemm.h"

namespace cputrain::kernels {
namespace {

int I(std::size_t v) { return static_cast<int>(v); }

// dst rows [b,e) of an (N,IC) matrix = src's, dropped by `mask` over the global index
// drop.offset + RowElement(drop.row_index, n, IC) + c: the same elements whatever the split.
void DropRows(float* dst, const float* src, std::size_t b, std::size_t e, std::size_t IC,
              const DropoutMask& mask, const LoraDropout& drop) {
  for (std::size_t n = b; n < e; ++n)
    mask.Apply(dst + n * IC, src + n * IC, IC, drop.offset + RowElement(drop.row_index, n, IC));
}

}  // namespace

void LoraForward(WorkerPool& pool, float* out, float* h, float* xd, const float* x, const float* A,
                 const float* B, std::size_t N, int IC, int r, int rows, int ldo, float scale,
                 const LoraDropout& drop) {
  const bool dropped = drop.p > 0.f;
  const DropoutMask mask(drop.seed, drop.p);
  const float* in = dropped ? xd : x;  // (N,IC)
  pool.ForEachThread([&](int tid) {
    std::size_t b, e;
    MatmulSlice(N, pool.size(), tid, &b, &e);
    if (b >= e) return;
    if (dropped) DropRows(xd, x, b, e, IC, mask, drop);
    // h[b:e] (N,r) = xd[b:e] (N,IC) @ A (r,IC)^T
    internal::Sgemm(GemmClass::kLora, false, true, I(e - b), r, IC, 1.f, in + b * IC, IC, A, IC,
                    0.f, h + b * r, r);
    // out[b:e, 0:rows] += scale * h[b:e] (N,r) @ B (rows,r)^T
    internal::Sgemm(GemmClass::kLora, false, true, I(e - b), rows, r, scale, h + b * r, r, B, r,
                    1.f, out + b * ldo, ldo);
  });
}

void LoraBackward(WorkerPool& pool, float* dinp, float* dA, float* dB, float* dh, float* xd,
                  const float* dout, const float* x, const float* h, const float* A, const float* B,
                  std::size_t N, int IC, int r, int rows, int ldd, float scale,
                  const LoraDropout& drop, bool accumulate) {
  const bool dropped = drop.p > 0.f;
  const DropoutMask mask(drop.seed, drop.p);
  const float* in = dropped ? xd : x;  // (N,IC)
  const float beta = accumulate ? 1.f : 0.f;
  pool.ForEachThread([&](int tid) {
    const int nt = pool.size();
    std::size_t b, e, o0, o1, c0, c1;
    MatmulSlice(N, nt, tid, &b, &e);
    MatmulSlice(static_cast<std::size_t>(rows), nt, tid, &o0, &o1);
    MatmulSlice(static_cast<std::size_t>(IC), nt, tid, &c0, &c1);
    // 1. dB[o0:o1] (rows,r) (+)= scale * dout[:, o0:o1]^T (N,rows) @ h (N,r)
    if (o0 < o1) {
      internal::Sgemm(GemmClass::kLora, true, false, I(o1 - o0), r, I(N), scale, dout + o0, ldd, h,
                      r, beta, dB + o0 * r, r);
    }
    if (b < e) {
      // dh[b:e] (N,r) = scale * dout[b:e] (N,rows) @ B (rows,r)
      internal::Sgemm(GemmClass::kLora, false, false, I(e - b), r, rows, scale, dout + b * ldd, ldd,
                      B, r, 0.f, dh + b * r, r);
      if (dropped) {
        DropRows(xd, x, b, e, IC, mask, drop);
      } else if (dinp) {
        // dinp[b:e] (N,IC) += dh[b:e] (N,r) @ A (r,IC)
        internal::Sgemm(GemmClass::kLora, false, false, I(e - b), IC, r, 1.f, dh + b * r, r, A, IC,
                        1.f, dinp + b * IC, IC);
      }
    }
    pool.Barrier();
    // 2. dA[:, c0:c1] (r,IC) (+)= dh^T (r,N) @ xd[:, c0:c1] (N,IC)
    if (c0 < c1) {
      internal::Sgemm(GemmClass::kLora, true, false, r, I(c1 - c0), I(N), 1.f, dh, r, in + c0, IC,
                      beta, dA + c0, IC);
    }
    if (!dropped || dinp == nullptr) return;
    pool.Barrier();
    // 3. dinp[b:e] += dropout'(dh[b:e] @ A), the product staged in xd's rows.
    if (b >= e) return;
    internal::Sgemm(GemmClass::kLora, false, false, I(e - b), IC, r, 1.f, dh + b * r, r, A, IC, 0.f,
                    xd + b * IC, IC);
    for (std::size_t n = b; n < e; ++n) {
      const uint64_t index0 = drop.offset + RowElement(drop.row_index, n, IC);
      for (std::size_t c = 0; c < static_cast<std::size_t>(IC); ++c)
        if (mask.Keep(index0 + c)) dinp[n * IC + c] += xd[n * IC + c] * mask.scale;
    }
  });
}

}  // namespace cputrain::kernels
