// bench/onednn_gemm.h: oneDNN's bf16 matmul (Debian's libdnnl 2.6.3, the library PyTorch's
// bf16 autocast runs on CPU) as one call: C (M,N) fp32 = A (M,K) bf16 @ B (K,N) bf16, fp32
// accumulation. bench gemm times it against our fp32 path to decide the bf16 kernels.
//
// Threads: Debian builds oneDNN on OpenMP. A call runs on as many OpenMP threads as the calling
// thread's omp_get_max_threads(): SetCallerThreads(1) in each pool worker gives one
// single-threaded call per worker on its slice (as our fp32 path), SetCallerThreads(T) in one
// bound thread lets oneDNN split the call over T OpenMP threads (which we do not pin).
// Thread safety: Run may be called from several threads at once (each call passes its thread's
// own scratchpad: oneDNN's default, library-managed one is shared unless oneDNN was built with
// DNNL_ENABLE_CONCURRENT_EXEC, and concurrent calls then gave wrong results).
//
// oneDNN is optional (CPUTRAIN_ONEDNN, top-level CMakeLists.txt): a build without it links
// onednn_none.cc instead, where Available() is false and the bench leaves the onednn-bf16 rows
// out with kMissing as the reason. Training never uses oneDNN.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace cputrain::bench {

class OnednnBf16Gemm {
 public:
  OnednnBf16Gemm();
  ~OnednnBf16Gemm();
  OnednnBf16Gemm(const OnednnBf16Gemm&) = delete;
  OnednnBf16Gemm& operator=(const OnednnBf16Gemm&) = delete;

  // A is (M,K) with row stride lda, or, if ta, stored as (K,M) with row stride lda; B is (K,N)
  // with row stride ldb, or, if tb, stored as (N,K). C (M,N) row stride ldc, overwritten. One
  // primitive per distinct shape and layout, created on its first call and kept.
  void Run(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B, bool tb,
           int ldb, float* C, int ldc);
  // The implementation oneDNN chose for the last primitive created (e.g. brg:avx512_core_bf16).
  std::string impl() const;

  static void SetCallerThreads(int n);
  // Whether this build has oneDNN; without it Run throws and SetCallerThreads does nothing.
  static bool Available();
  // Why the rows are missing, and the fix.
  static constexpr const char* kMissing =
      "this build has no oneDNN (scripts/install-deps.sh --test or --bench installs libdnnl-dev "
      "and the OpenCL headers its CMake config needs; then reconfigure)";

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cputrain::bench
