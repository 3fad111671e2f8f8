// kernels/bf16_kernel.h (internal to kernels/): the bf16 GEMMs Bf16Gemm dispatches to
// (kernels/bf16.h: Bf16Kernel says which runs). Each has Bf16Gemm's contract; each may assume
// M, N, K > 0 (Bf16Gemm handles the empty cases once).
#pragma once

#include <cstdint>

namespace cputrain::kernels::internal {

// VDPBF16PS (bf16_gemm.cc). Needs AVX512_BF16.
void Vdpbf16psGemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B,
                   bool tb, int ldb, float* C, int ldc, bool add);
// oneDNN's matmul (kernels/onednn.h), one process-wide instance, single-threaded per calling
// thread (bf16_kernel.cc).
void OnednnBf16Gemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B,
                    bool tb, int ldb, float* C, int ldc, bool add);

}  // namespace cputrain::kernels::internal
