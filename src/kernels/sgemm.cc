// Which library runs the fp32 products, and the one sgemm the kernels call (kernels/sgemm.h).
#include "kernels/sgemm.h"

#include <cblas.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernels.h"
#include "kernels/onednn.h"

extern "C" char* openblas_get_corename(void);

namespace cputrain::kernels {
namespace {

// The active kernel, as an int; -1 until the first use resolves auto. Set by UseFp32Kernel before
// a run's workers start (or between runs); read by every worker's Sgemm: release/acquire make a
// kernel set between two runs in one process visible to the next product (the pool's handoff
// already orders the usual case).
std::atomic<int> g_active{-1};
void StoreActive(Fp32Kernel k) { g_active.store(static_cast<int>(k), std::memory_order_release); }
int LoadActive() { return g_active.load(std::memory_order_acquire); }

}  // namespace

bool OpenblasNarrowerThanCpu() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) return false;
  const char* core = openblas_get_corename();
  if (core == nullptr) return false;
  for (const char* narrow : {"Haswell", "Zen", "haswell", "zen"}) {
    if (std::strcmp(core, narrow) == 0) return true;
  }
  return false;
}

namespace {

OnednnGemm& Onednn() {
  static OnednnGemm gemm;
  return gemm;
}

}  // namespace

const char* Fp32KernelName(Fp32Kernel k) {
  switch (k) {
    case Fp32Kernel::kAuto:
      return "auto";
    case Fp32Kernel::kOpenblas:
      return "openblas";
    case Fp32Kernel::kOnednn:
      return "onednn";
  }
  return "?";
}

std::optional<Fp32Kernel> ParseFp32Kernel(const std::string& name) {
  for (Fp32Kernel k : {Fp32Kernel::kAuto, Fp32Kernel::kOpenblas, Fp32Kernel::kOnednn}) {
    if (name == Fp32KernelName(k)) return k;
  }
  return std::nullopt;
}

std::string Fp32KernelMissing(Fp32Kernel k) {
  return k == Fp32Kernel::kOnednn && !OnednnGemm::Available() ? OnednnGemm::kMissing : "";
}

// OpenBLAS where its kernels are as wide as the CPU's vectors (allocation-free per call; on Zen 5
// with its AVX-512 kernels it matched oneDNN, docs/bf16.md); oneDNN where OpenBLAS was held to its
// 256-bit kernels on an AVX-512 CPU (OPENBLAS_CORETYPE=Haswell, as the project's AMD machines set
// it, read once when OpenBLAS loads): there oneDNN's matmul ran the same products ~1.9x faster
// per core, and a LoRA step 1.9x faster (docs/bf16.md).
Fp32Kernel BestFp32Kernel() {
  return OpenblasNarrowerThanCpu() && OnednnGemm::Available() ? Fp32Kernel::kOnednn
                                                              : Fp32Kernel::kOpenblas;
}

Fp32Kernel UseFp32Kernel(Fp32Kernel requested, const std::string& what) {
  std::string asker = what;
  if (requested == Fp32Kernel::kAuto) {
    if (const auto k =
            internal::EnvKernel<Fp32Kernel>(kFp32KernelEnv, ParseFp32Kernel, "openblas, onednn")) {
      requested = *k;
      asker = kFp32KernelEnv;
    }
  }
  if (requested == Fp32Kernel::kAuto) requested = BestFp32Kernel();
  if (const std::string missing = Fp32KernelMissing(requested); !missing.empty()) {
    throw InputError(fmt::format("{} is {}, which cannot run here: {}", asker,
                                 Fp32KernelName(requested), missing),
                     "use auto or openblas");
  }
  StoreActive(requested);
  return requested;
}

Fp32Kernel ActiveFp32Kernel() {
  int k = LoadActive();
  if (k < 0) {
    UseFp32Kernel(Fp32Kernel::kAuto, kFp32KernelEnv);
    k = LoadActive();
  }
  return static_cast<Fp32Kernel>(k);
}

std::string Fp32KernelLine(Fp32Kernel active, Fp32Kernel requested) {
  const std::string how =
      internal::ChosenBy(requested != Fp32Kernel::kAuto, "train.fp32_kernel", kFp32KernelEnv);
  const char* core = openblas_get_corename();
  std::string line = fmt::format(
      "fp32 products: {} ({}); {}; OpenBLAS core {}", Fp32KernelName(active),
      active == Fp32Kernel::kOnednn ? "oneDNN's matmul" : "OpenBLAS sgemm", how, core ? core : "?");
  if (OpenblasNarrowerThanCpu()) {
    line += fmt::format(
        " (256-bit kernels on this AVX-512 CPU{}: {} ~1.8x faster per core, docs/bf16.md)",
        std::getenv("OPENBLAS_CORETYPE") ? ", as OPENBLAS_CORETYPE says" : "",
        active == Fp32Kernel::kOpenblas
            ? "unset it for OpenBLAS's AVX-512 kernels, or train.fp32_kernel: onednn; both measured"
            : "oneDNN runs the products,");
  }
  return line;
}

namespace internal {

void Sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  if (ActiveFp32Kernel() == Fp32Kernel::kOnednn && M > 0 && N > 0 && K > 0) {
    thread_local const bool single = [] {
      OnednnGemm::SetCallerThreads(1);
      return true;
    }();
    (void)single;
    return Onednn().RunF32(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, alpha, beta);
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace internal
}  // namespace cputrain::kernels
