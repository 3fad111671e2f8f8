// kernels/own_sgemm.h (internal to kernels/): our own single-threaded fp32 GEMM, AVX2 + FMA, the
// third fp32 kernel beside OpenBLAS and oneDNN (kernels.h: Fp32Kernel::kOwn). It is there so that
// a CPU on which both libraries run narrow or slow kernels (an OpenBLAS too old for the CPU falls
// back to SSE3 "Prescott" kernels; a build without oneDNN) still has a product at the baseline
// ISA's speed; which kernel runs a class of products is decided by measurement
// (kernels/calibrate.h).
//
// Design (the textbook Goto/BLIS structure, nothing clever):
//   for each NC-wide column block of B:  for each KC-deep slice:   pack B (KC x NC) into 16-wide
//   panels;  for each MC-tall row block of A:  pack A (MC x KC) into 6-tall panels (times alpha);
//   for each 6x16 tile:  the micro-kernel keeps the 6x16 tile of C in 12 ymm registers and does,
//   per k, 2 loads of B, 6 broadcasts of A and 12 FMAs.
// MC = 168, KC = 256, NC = 4080 (BLIS's Haswell sgemm blocking: an A block of 168 KiB stays in
// L2, a 16 KiB B micro-panel in L1). Packing reads any strides, so transposed operands cost
// nothing extra in the kernel. Edges (m < 6, n < 16) go through a tile buffer.
//
// Thread safety: reentrant; packing buffers are per thread (thread_local, allocated on a thread's
// first call and reused: a training step's calls allocate nothing).
#pragma once

namespace cputrain::kernels::internal {

// cblas_sgemm's row-major contract: C (M,N) = alpha op(A) op(B) + beta C, op(A) (M,K) stored as
// A (M,K) with row stride lda, or (K,M) if ta; op(B) (K,N) stored (K,N) with row stride ldb, or
// (N,K) if tb; C with row stride ldc. beta = 0 never reads C. Sums over k run in order, in KC
// slices; each element's result does not depend on M, N or where the caller split them.
void OwnSgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace cputrain::kernels::internal
