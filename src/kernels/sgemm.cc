// Which kernel runs each class of fp32 products, and the one sgemm the kernels call
// (kernels/sgemm.h).
#include "kernels/sgemm.h"

#include <cblas.h>
#include <fmt/format.h>
#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernels.h"
#include "kernels/onednn.h"
#include "kernels/own_sgemm.h"

extern "C" char* openblas_get_corename(void);

namespace cputrain::kernels {
namespace {

// Each class's kernel (UseFp32Kernel, SetFp32Kernel; read by every worker's Sgemm).
internal::ClassTable<Fp32Kernel> g_active;

OnednnGemm& Onednn() {
  static OnednnGemm gemm;
  return gemm;
}

// The vector width of an OpenBLAS core, by the names openblas_get_corename returns (OpenBLAS
// 0.3.x's DYNAMIC_ARCH cores); 0 for one we do not know.
int CoreBits(const std::string& core) {
  static const char* const k128[] = {"Prescott", "Core2",  "Penryn",      "Dunnington",
                                     "Nehalem",  "Atom",   "Opteron",     "Barcelona",
                                     "Bobcat",   "Katmai", "Coppermine",  "Northwood",
                                     "Banias",   "Athlon", "Opteron_SSE3"};
  static const char* const k256[] = {"Sandybridge", "Haswell",     "Zen",      "Bulldozer",
                                     "Piledriver",  "Steamroller", "Excavator"};
  static const char* const k512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  auto in = [&](const auto& names) {
    for (const char* n : names) {
      if (strcasecmp(core.c_str(), n) == 0) return true;
    }
    return false;
  };
  return in(k512) ? 512 : in(k256) ? 256 : in(k128) ? 128 : 0;
}

}  // namespace

const char* GemmClassName(GemmClass c) {
  static const char* const kNames[kGemmClasses] = {"fwd",      "dinp",      "dweight",
                                                   "head.fwd", "head.dinp", "head.dweight",
                                                   "attn.fwd", "attn.bwd",  "lora"};
  const int i = static_cast<int>(c);
  return i >= 0 && i < kGemmClasses ? kNames[i] : "?";
}

std::optional<GemmClass> ParseGemmClass(const std::string& name) {
  for (int i = 0; i < kGemmClasses; ++i) {
    if (name == GemmClassName(static_cast<GemmClass>(i))) return static_cast<GemmClass>(i);
  }
  return std::nullopt;
}

OpenblasCore OpenblasCoreInfo() {
  OpenblasCore c;
  const char* core = openblas_get_corename();
  c.name = core ? core : "?";
  c.bits = CoreBits(c.name);
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  c.cpu_bits = avx512 ? 512 : 256;
  if (c.narrower()) {
    c.better = !avx512                                ? "Haswell"
               : __builtin_cpu_supports("avx512bf16") ? "Cooperlake"
                                                      : "SkylakeX";
  }
  return c;
}

bool OpenblasNarrowerThanCpu() { return OpenblasCoreInfo().narrower(); }

const char* Fp32KernelName(Fp32Kernel k) {
  switch (k) {
    case Fp32Kernel::kAuto:
      return "auto";
    case Fp32Kernel::kOpenblas:
      return "openblas";
    case Fp32Kernel::kOnednn:
      return "onednn";
    case Fp32Kernel::kOwn:
      return "own";
  }
  return "?";
}

std::optional<Fp32Kernel> ParseFp32Kernel(const std::string& name) {
  for (Fp32Kernel k :
       {Fp32Kernel::kAuto, Fp32Kernel::kOpenblas, Fp32Kernel::kOnednn, Fp32Kernel::kOwn}) {
    if (name == Fp32KernelName(k)) return k;
  }
  return std::nullopt;
}

std::string Fp32KernelMissing(Fp32Kernel k) {
  switch (k) {
    case Fp32Kernel::kOnednn:
      return OnednnGemm::Available() ? "" : OnednnGemm::kMissing;
    case Fp32Kernel::kOwn:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                 ? ""
                 : "AVX2 and FMA (this CPU lacks them)";
    default:
      return "";
  }
}

std::vector<Fp32Kernel> Fp32Kernels() {
  std::vector<Fp32Kernel> out;
  for (Fp32Kernel k : {Fp32Kernel::kOpenblas, Fp32Kernel::kOnednn, Fp32Kernel::kOwn}) {
    if (Fp32KernelMissing(k).empty()) out.push_back(k);
  }
  return out;
}

// OpenBLAS where its core is as wide as the CPU's vectors (allocation-free per call; on Zen 5
// with its AVX-512 kernels it matched oneDNN, docs/bf16.md); oneDNN where OpenBLAS runs a
// narrower core: OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU (oneDNN ~1.9x faster per core there),
// or the SSE3 Prescott kernels OpenBLAS 0.3.21 falls back to on a CPU it does not know (oneDNN 5.1x
// on an Emerald Rapids Xeon, docs/bf16.md). Only a prior: the calibration measures.
Fp32Kernel BestFp32Kernel() {
  return OpenblasNarrowerThanCpu() && OnednnGemm::Available() ? Fp32Kernel::kOnednn
                                                              : Fp32Kernel::kOpenblas;
}

Fp32Kernel UseFp32Kernel(Fp32Kernel requested, const std::string& what) {
  std::string asker = what;
  const std::string names = "openblas, onednn, own";
  if (requested == Fp32Kernel::kAuto) {
    if (const auto k = internal::EnvKernel<Fp32Kernel>(kFp32KernelEnv, ParseFp32Kernel, names)) {
      requested = *k;
      asker = kFp32KernelEnv;
    }
  }
  const bool forced = requested != Fp32Kernel::kAuto;
  if (!forced) requested = BestFp32Kernel();
  if (const std::string missing = Fp32KernelMissing(requested); !missing.empty()) {
    throw InputError(fmt::format("{} is {}, which cannot run here: {}", asker,
                                 Fp32KernelName(requested), missing),
                     "use auto or openblas");
  }
  g_active.SetAll(requested, forced);
  return requested;
}

bool Fp32KernelForced() { return g_active.Forced(); }

std::string Fp32KernelLine(Fp32Kernel active, Fp32Kernel requested) {
  static const char* const kWhat[] = {"auto", "OpenBLAS sgemm", "oneDNN's matmul",
                                      "our AVX2 kernel"};
  const std::string how =
      requested == Fp32Kernel::kAuto && !Fp32KernelForced()
          ? "auto's prior until the calibration measures each class"
          : internal::ChosenBy(requested != Fp32Kernel::kAuto, "train.fp32_kernel", kFp32KernelEnv);
  return fmt::format("fp32 products: {} ({}) for every class; {}; OpenBLAS core {}",
                     Fp32KernelName(active), kWhat[static_cast<int>(active)], how,
                     OpenblasCoreInfo().name);
}

void SetFp32Kernel(GemmClass c, Fp32Kernel k) {
  CPUTRAIN_CHECK(k != Fp32Kernel::kAuto && Fp32KernelMissing(k).empty(),
                 "SetFp32Kernel: a kernel that cannot run here");
  g_active.Set(c, k);
}

Fp32Kernel ActiveFp32Kernel(GemmClass c) {
  int k = g_active.Get(c);
  if (k < 0) {
    UseFp32Kernel(Fp32Kernel::kAuto, kFp32KernelEnv);
    k = g_active.Get(c);
  }
  return static_cast<Fp32Kernel>(k);
}

void SgemmOn(Fp32Kernel k, bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
             int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (k == Fp32Kernel::kOnednn && M > 0 && N > 0 && K > 0) {
    thread_local const bool single = [] {
      OnednnGemm::SetCallerThreads(1);
      return true;
    }();
    (void)single;
    return Onednn().RunF32(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, alpha, beta);
  }
  if (k == Fp32Kernel::kOwn)
    return internal::OwnSgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace internal {

void Sgemm(GemmClass c, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  SgemmOn(ActiveFp32Kernel(c), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace internal
}  // namespace cputrain::kernels
