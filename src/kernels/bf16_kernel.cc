// Which kernel runs the bf16 products, and Bf16Gemm's dispatch to it (kernels/bf16.h).
#include "kernels/bf16_kernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "common/error.h"
#include "common/log.h"
#include "kernels/amx_gemm.h"
#include "kernels/bf16.h"
#include "kernels/kernel_choice.h"
#include "kernels/onednn.h"

namespace cputrain::kernels {
namespace {

constexpr Bf16Kernel kNamed[] = {Bf16Kernel::kAmx, Bf16Kernel::kVdpbf16ps, Bf16Kernel::kTileModel,
                                 Bf16Kernel::kOnednn};

// Each class's kernel (UseBf16Kernel, SetBf16Kernel; read by every worker's Bf16Gemm).
internal::ClassTable<Bf16Kernel> g_active;

// The AMX refusal is worth saying once per process, not once per run.
std::once_flag g_refusal_said;

// oneDNN's matmul as a bf16 kernel: one instance for the process (its primitives are cached
// per shape), each calling thread single-threaded in OpenMP (as every kernel runs on its
// worker's slice), set on the thread's first call.
kernels::OnednnGemm& Onednn() {
  static OnednnGemm gemm;
  return gemm;
}

}  // namespace

namespace internal {

void OnednnBf16Gemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B,
                    bool tb, int ldb, float* C, int ldc, bool add) {
  thread_local const bool single = [] {
    OnednnGemm::SetCallerThreads(1);
    return true;
  }();
  (void)single;
  Onednn().RunBf16(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, add);
}

}  // namespace internal

const char* Bf16KernelName(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::kAuto:
      return "auto";
    case Bf16Kernel::kAmx:
      return "amx";
    case Bf16Kernel::kVdpbf16ps:
      return "vdpbf16ps";
    case Bf16Kernel::kTileModel:
      return "tile-model";
    case Bf16Kernel::kOnednn:
      return "onednn";
  }
  return "?";
}

std::optional<Bf16Kernel> ParseBf16Kernel(const std::string& name) {
  if (name == "auto") return Bf16Kernel::kAuto;
  for (Bf16Kernel k : kNamed) {
    if (name == Bf16KernelName(k)) return k;
  }
  return std::nullopt;
}

std::string Bf16KernelNames() {
  std::string s;
  for (Bf16Kernel k : kNamed) s += (s.empty() ? "" : ", ") + std::string(Bf16KernelName(k));
  return s;
}

std::string DescribeBf16Kernel(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::kAuto:
      return "auto: measured per class of products";
    case Bf16Kernel::kAmx:
      return "AMX tiles (TDPBF16PS), our kernel";
    case Bf16Kernel::kVdpbf16ps:
      return "AVX512_BF16 (VDPBF16PS), our kernel";
    case Bf16Kernel::kTileModel:
      return "our AMX kernel on the portable tile model (slow: a test backend)";
    case Bf16Kernel::kOnednn:
      return "oneDNN's matmul, on " + OnednnGemm::Isa();
  }
  return "?";
}

std::string Bf16KernelMissing(Bf16Kernel k) {
  const Bf16Support s = DetectBf16();
  switch (k) {
    case Bf16Kernel::kAuto:
      if (BestBf16Kernel() != Bf16Kernel::kAuto) return "";
      return s.Missing().empty() ? "AVX512_BF16 or AMX" : s.Missing();
    case Bf16Kernel::kAmx:
      if (s.disabled) return "AMX (bf16 forced off by " + std::string(kDisableBf16Env) + "=1)";
      return amx::Granted() ? "" : "AMX: " + amx::Refusal();
    case Bf16Kernel::kVdpbf16ps:
      if (s.disabled) return "AVX512_BF16 (forced off by " + std::string(kDisableBf16Env) + "=1)";
      return s.avx512_bf16 ? "" : "AVX512_BF16 (this CPU lacks it)";
    case Bf16Kernel::kTileModel:
      return "";
    case Bf16Kernel::kOnednn:
      if (!OnednnGemm::Available()) return OnednnGemm::kMissing;
      if (s.disabled) return "bf16 (forced off by " + std::string(kDisableBf16Env) + "=1)";
      return s.avx512_bf16 || s.amx_granted ? "" : "AVX512_BF16 or AMX for oneDNN's bf16 matmul";
  }
  return "unknown kernel";
}

// The prior, by CPU class (docs/bf16.md, "Which kernel runs where", has the measurements); auto
// measures (kernels/calibrate.h) and this only breaks near-ties and runs before a calibration:
//   AMX granted   our AMX kernel (TDPBF16PS, 16 x 16 x 32 per instruction)
//   AVX512_BF16   our VDPBF16PS kernel: on Zen 5 it matched oneDNN's matmul on the training shapes
//                 of gpt2-124M (per core, thread CPU time: 0.169 s against 0.166 s for the step's
//                 products), and it allocates nothing per call, where oneDNN's execute allocates
//                 its argument maps (~6000 allocations a gpt2 step; the engine's steps allocate
//                 nothing: tests/alloc_free_step_test.cc)
// oneDNN is timed beside them by the calibration (and is bench gemm's rows).
Bf16Kernel BestBf16Kernel() {
  const Bf16Support s = DetectBf16();
  if (s.disabled) return Bf16Kernel::kAuto;
  if (s.amx_granted) return Bf16Kernel::kAmx;
  if (s.avx512_bf16) return Bf16Kernel::kVdpbf16ps;
  return Bf16Kernel::kAuto;
}

std::vector<Bf16Kernel> Bf16Kernels() {
  std::vector<Bf16Kernel> out;
  const Bf16Kernel prior = BestBf16Kernel();
  if (prior == Bf16Kernel::kAuto) return out;
  out.push_back(prior);
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kVdpbf16ps, Bf16Kernel::kOnednn}) {
    if (k != prior && Bf16KernelMissing(k).empty()) out.push_back(k);
  }
  return out;
}

Bf16Kernel UseBf16Kernel(Bf16Kernel requested, const std::string& what) {
  std::string asker = what;
  if (requested == Bf16Kernel::kAuto) {
    if (const auto k =
            internal::EnvKernel<Bf16Kernel>(kBf16KernelEnv, ParseBf16Kernel, Bf16KernelNames())) {
      requested = *k;
      asker = kBf16KernelEnv;
    }
  }
  if (requested == Bf16Kernel::kAuto) {
    const Bf16Kernel best = BestBf16Kernel();
    const Bf16Support s = DetectBf16();
    if (!s.amx_granted && s.amx_bf16) {
      std::call_once(g_refusal_said, [best] {
        log::Warn("bf16 products: this CPU has AMX but it is not used ({}); they run on {}",
                  amx::Refusal(), best == Bf16Kernel::kAuto ? "nothing" : Bf16KernelName(best));
      });
    }
    if (best == Bf16Kernel::kAuto) {
      throw InputError(
          fmt::format("train.precision is bf16 but this CPU lacks {}", s.Missing()),
          "set train.precision: fp32, or train on a CPU with AVX512_BF16 or AMX (Intel "
          "Cooper Lake, Sapphire Rapids or later; AMD Zen 4 or later); `cputrain-numa "
          "topo` prints which precisions this machine runs natively");
    }
    g_active.SetAll(best, /*forced=*/false);
    return best;
  }
  if (const std::string missing = Bf16KernelMissing(requested); !missing.empty()) {
    throw InputError(
        fmt::format("{} is {}, which cannot run here: needs {}", asker, Bf16KernelName(requested),
                    missing),
        fmt::format("use auto (here: {}), or another of {}",
                    BestBf16Kernel() == Bf16Kernel::kAuto ? std::string("none")
                                                          : Bf16KernelName(BestBf16Kernel()),
                    Bf16KernelNames()));
  }
  g_active.SetAll(requested, /*forced=*/true);
  return requested;
}

bool Bf16KernelForced() { return g_active.Forced(); }

void SetBf16Kernel(GemmClass c, Bf16Kernel k) {
  CPUTRAIN_CHECK(k != Bf16Kernel::kAuto && Bf16KernelMissing(k).empty(),
                 "SetBf16Kernel: a kernel that cannot run here");
  g_active.Set(c, k);
}

Bf16Kernel ActiveBf16Kernel(GemmClass c) {
  int k = g_active.Get(c);
  if (k < 0) {
    // First use without a choice made (a tool, a test): auto's, or the model where none runs.
    const Bf16Kernel best = BestBf16Kernel();
    const char* env = std::getenv(kBf16KernelEnv);
    if (best == Bf16Kernel::kAuto && (env == nullptr || *env == '\0')) {
      g_active.SetAll(Bf16Kernel::kTileModel, /*forced=*/false);
    } else {
      UseBf16Kernel(Bf16Kernel::kAuto, kBf16KernelEnv);
    }
    k = g_active.Get(c);
  }
  return static_cast<Bf16Kernel>(k);
}

std::string Bf16KernelLine(Bf16Kernel active, Bf16Kernel requested) {
  const std::string how =
      internal::ChosenBy(requested != Bf16Kernel::kAuto, "train.bf16_kernel", kBf16KernelEnv);
  std::string others;
  for (Bf16Kernel k : kNamed) {
    if (k != active && Bf16KernelMissing(k).empty()) {
      others += (others.empty() ? "" : ", ") + std::string(Bf16KernelName(k));
    }
  }
  std::string line = fmt::format("bf16 products: {} ({}); {}", Bf16KernelName(active),
                                 DescribeBf16Kernel(active), how);
  if (!others.empty()) line += "; also runs here: " + others;
  if (active != Bf16Kernel::kAmx && DetectBf16().amx_bf16 && !amx::Granted()) {
    line += "; AMX not used: " + amx::Refusal();
  }
  return line;
}

int Bf16RowBlock(GemmClass c) {
  switch (ActiveBf16Kernel(c)) {
    case Bf16Kernel::kAmx:
    case Bf16Kernel::kTileModel:
    case Bf16Kernel::kOnednn:
      return 2 * amx::kMR;
    default:
      return 72;
  }
}

void Bf16GemmOn(Bf16Kernel k, int M, int N, int K, const uint16_t* A, bool ta, int lda,
                const uint16_t* B, bool tb, int ldb, float* C, int ldc, bool add) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (add) return;
    for (int i = 0; i < M; ++i) std::fill_n(C + static_cast<std::ptrdiff_t>(i) * ldc, N, 0.f);
    return;
  }
  switch (k) {
    case Bf16Kernel::kAmx:
      CPUTRAIN_CHECK(amx::Granted(), "Bf16GemmOn(amx) where AMX is not granted");
      return amx::RealGemm(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, add);
    case Bf16Kernel::kTileModel:
      return amx::ModelGemm(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, add);
    case Bf16Kernel::kOnednn:
      return internal::OnednnBf16Gemm(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, add);
    case Bf16Kernel::kVdpbf16ps:
      return internal::Vdpbf16psGemm(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, add);
    case Bf16Kernel::kAuto:
      break;
  }
  CPUTRAIN_CHECK(false, "Bf16GemmOn: no kernel named");
}

void Bf16Gemm(GemmClass cls, int M, int N, int K, const uint16_t* A, bool ta, int lda,
              const uint16_t* B, bool tb, int ldb, float* C, int ldc, bool add) {
  Bf16GemmOn(ActiveBf16Kernel(cls), M, N, K, A, ta, lda, B, tb, ldb, C, ldc, add);
}

}  // namespace cputrain::kernels
