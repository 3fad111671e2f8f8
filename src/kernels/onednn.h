// kernels/onednn.h: oneDNN's matmul (Debian's libdnnl 2.6.3, the library PyTorch's CPU autocast
// runs on) as one GEMM call, bf16 or fp32 operands, fp32 accumulation and output:
//
//   C (M,N) fp32 = alpha A (M,K) @ B (K,N) + beta C,   A, B bf16 (RunBf16) or fp32 (RunF32)
//
// What it is for: a kernel of the training products, measured against ours and OpenBLAS
// (docs/bf16.md, `bench gemm`'s onednn-* rows), run where it measured faster (kernels/bf16.h's
// Bf16Kernel, kernels.h's Fp32Kernel). On an AMX CPU oneDNN 2.6.3 picks its
// brg:avx512_core_amx_bf16 kernels by itself (and asks Linux for the tile permission itself), on
// AVX512_BF16 alone brg:avx512_core_bf16, fp32 brg:avx512_core where the CPU has AVX-512.
//
// Threads: Debian builds oneDNN on OpenMP. A call runs on as many OpenMP threads as the calling
// thread's omp_get_max_threads(): SetCallerThreads(1) in each pool worker gives one
// single-threaded call per worker on its slice (as our products split), SetCallerThreads(T) in
// one bound thread lets oneDNN split the call over T OpenMP threads (which we do not pin).
// Thread safety: Run* may be called from several threads at once (each call passes its thread's
// own scratchpad: oneDNN's default, library-managed one is shared unless oneDNN was built with
// DNNL_ENABLE_CONCURRENT_EXEC, and concurrent calls then gave wrong results).
//
// oneDNN is optional (CPUTRAIN_ONEDNN, top-level CMakeLists.txt): a build without it links
// onednn_none.cc instead, where Available() is false and Run* throw InputError with kMissing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace cputrain::kernels {

class OnednnGemm {
 public:
  OnednnGemm();
  ~OnednnGemm();
  OnednnGemm(const OnednnGemm&) = delete;
  OnednnGemm& operator=(const OnednnGemm&) = delete;

  // A is (M,K) with row stride lda, or, if ta, stored as (K,M) with row stride lda; B is (K,N)
  // with row stride ldb, or, if tb, stored as (N,K). C (M,N) row stride ldc; alpha is oneDNN's
  // output scale, beta its sum post-op (beta 0: C is overwritten, never read). One primitive per
  // distinct shape, layout, type, alpha and beta, created on its first call and kept. M, N, K > 0.
  void RunBf16(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B, bool tb,
               int ldb, float* C, int ldc, bool add = false);
  void RunF32(int M, int N, int K, const float* A, bool ta, int lda, const float* B, bool tb,
              int ldb, float* C, int ldc, float alpha = 1.f, float beta = 0.f);
  // The implementation oneDNN chose for the last primitive created (e.g. brg:avx512_core_bf16).
  std::string impl() const;

  // The instruction set oneDNN's kernels run on here ("avx512_core_amx", "avx512_core_bf16", ...;
  // "none" without oneDNN).
  static std::string Isa();
  // "2.6.3" ("none" without oneDNN).
  static std::string Version();
  // This thread's OpenMP thread count for the calls it makes.
  static void SetCallerThreads(int n);
  // Whether this build has oneDNN; without it Run* throw and SetCallerThreads does nothing.
  static bool Available();
  // Why it is missing, and the fix.
  static constexpr const char* kMissing =
      "this build has no oneDNN (scripts/install-deps.sh --build installs libdnnl-dev "
      "and the OpenCL headers its CMake config needs; then reconfigure)";

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cputrain::kernels
