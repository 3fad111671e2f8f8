// kernels/sgemm.h (internal to kernels/): the fp32 GEMM every fp32 product of the kernels calls,
// on the kernel of its class (kernels.h: GemmClass, Fp32Kernel: OpenBLAS, oneDNN or our own):
// cblas_sgemm's row-major contract, C (M,N) = alpha op(A) op(B) + beta C, op = transpose where
// ta / tb. Thread safety: reentrant (each pool worker calls it on its own slice, single-threaded:
// InitBlas, oneDNN with one OpenMP thread per calling thread, our own kernel's thread_local
// packing buffers).
#pragma once

#include "kernels/kernels.h"

namespace cputrain::kernels::internal {

void Sgemm(GemmClass c, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace cputrain::kernels::internal
