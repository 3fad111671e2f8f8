// kernels/sgemm.h (internal to kernels/): the fp32 GEMM every fp32 product of the kernels calls,
// on the active fp32 kernel (kernels.h: Fp32Kernel, OpenBLAS or oneDNN): cblas_sgemm's row-major
// contract, C (M,N) = alpha op(A) op(B) + beta C, op = transpose where ta / tb. Thread safety:
// reentrant (each pool worker calls it on its own slice, single-threaded: InitBlas, and oneDNN
// with one OpenMP thread per calling thread).
#pragma once

namespace cputrain::kernels::internal {

void Sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace cputrain::kernels::internal
