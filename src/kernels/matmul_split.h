// kernels/matmul_split.h (internal to kernels/): how a matrix product's work splits over a pool's
// workers, shared by the fp32 products (matmul.cc, OpenBLAS) and the bf16 ones (matmul_bf16.cc,
// Bf16Gemm), so that both split alike and differ only in the GEMM each block runs.
//
// Thread safety: the callbacks run on every worker at once, each on its own disjoint block.
#pragma once

#include <algorithm>
#include <cstddef>

#include "kernels/kernels.h"

namespace cputrain::kernels::internal {

// Forward out (N,OC) (row stride ldo) = inp @ weight^T + bias: each worker takes a block of the
// output's larger dimension (OC for the LM head: each reads only its rows of the weight), copies
// the bias into it, then runs gemm(r0, r1, c0, c1, add) for out[r0:r1, c0:c1] (+)= inp[r0:r1] @
// weight[c0:c1]^T, add = bias present.
template <class Gemm>
void ForwardBlocks(WorkerPool& pool, float* out, const float* bias, std::size_t N, int OC, int ldo,
                   Gemm&& gemm) {
  const bool split_cols = static_cast<std::size_t>(OC) >= N;
  pool.ForEachThread([&](int tid) {
    std::size_t b, e;
    MatmulSlice(split_cols ? static_cast<std::size_t>(OC) : N, pool.size(), tid, &b, &e);
    if (b >= e) return;
    const std::size_t r0 = split_cols ? 0 : b, r1 = split_cols ? N : e;
    const std::size_t c0 = split_cols ? b : 0, c1 = split_cols ? e : static_cast<std::size_t>(OC);
    if (bias) {
      for (std::size_t r = r0; r < r1; ++r) std::copy(bias + c0, bias + c1, out + r * ldo + c0);
    }
    gemm(r0, r1, c0, c1, bias != nullptr);
  });
}

// Backward of the product above, on every worker: if with_dinp, dinp_gemm(split_rows, b, e) for
// dinp (N,C) = dout @ weight over rows [b,e) (split_rows, when N >= C) or columns [b,e); then
// if with_dweight (not a frozen weight), dweight_gemm(o0, o1) for dweight rows [o0,o1) =
// dout[:, o0:o1]^T @ inp, and dbias[o0:o1] = column sums of dout (row stride ldd), written, or
// added to with accumulate.
template <class DinpGemm, class DweightGemm>
void BackwardBlocks(WorkerPool& pool, bool with_dinp, bool with_dweight, float* dbias,
                    const float* dout, std::size_t N, int C, int OC, int ldd, bool accumulate,
                    DinpGemm&& dinp_gemm, DweightGemm&& dweight_gemm) {
  pool.ForEachThread([&](int tid) {
    const int nt = pool.size();
    if (with_dinp) {
      const bool split_rows = N >= static_cast<std::size_t>(C);
      std::size_t b, e;
      MatmulSlice(split_rows ? N : static_cast<std::size_t>(C), nt, tid, &b, &e);
      if (b < e) dinp_gemm(split_rows, b, e);
    }
    std::size_t o0, o1;
    MatmulSlice(static_cast<std::size_t>(OC), nt, tid, &o0, &o1);
    if (o0 >= o1) return;
    if (with_dweight) dweight_gemm(o0, o1);
    if (dbias) {
      if (!accumulate) std::fill(dbias + o0, dbias + o1, 0.f);
      for (std::size_t n = 0; n < N; ++n) {
        const float* d = dout + n * ldd;
        for (std::size_t o = o0; o < o1; ++o) dbias[o] += d[o];
      }
    }
  });
}

}  // namespace cputrain::kernels::internal
