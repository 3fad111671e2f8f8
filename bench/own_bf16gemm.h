// A single-threaded bf16 GEMM of our own on VDPBF16PS (AVX512_BF16): the `own-bf16` column of
// `bench gemm`, there to compare with oneDNN before choosing training's bf16 kernels. Unlike
// oneDNN it allocates nothing per call (packing buffers are thread_local, sized once), uses no
// OpenMP, and its summation order is fixed by the blocking alone.
//
// C (M,N) fp32 = A (M,K) bf16 @ B (K,N) bf16, fp32 accumulation. The Goto/BLIS structure of
// bench/own_sgemm.h with k taken in pairs: VDPBF16PS adds a[k]*b[k] + a[k+1]*b[k+1] into each fp32
// lane, so A is packed as 32-bit (a[m][k], a[m][k+1]) pairs, 12 rows a panel, and B as pairs of
// its 32-column panels (one zmm = 16 columns' pairs). The 12x32 micro-kernel holds the C tile in
// 24 zmm accumulators and does, per pair of k, 2 loads of B, 12 broadcasts of A and 24 VDPBF16PS.
// Blocking MC = 120, KC = 384 (192 pairs: a 24 KiB B micro-panel), NC = 4096 (KC = 256, so that
// B's and A's micro-panels fit L1 together, measured slower: 1.60x fp32 on one core against
// 1.66x, the forward products 145 against 167 GFLOP/s). An odd K is padded with a zero. Edges go
// through a tile buffer.
//
// Call only where kernels::DetectBf16().avx512_bf16 (the kernel is compiled with a target
// attribute; the rest of the build stays x86-64-v3). Thread safety: reentrant.
#pragma once

#include <cstdint>

namespace cputrain::bench {

// Same arguments as OnednnBf16Gemm::Run: A (M,K) row stride lda, or stored (K,M) if ta; B (K,N)
// row stride ldb, or stored (N,K) if tb; C (M,N) row stride ldc, overwritten.
void OwnBf16Gemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B,
                 bool tb, int ldb, float* C, int ldc);

}  // namespace cputrain::bench
