// kernels/bf16.h: what BF16 mixed precision needs below the model: whether this CPU runs BF16
// products natively, which kernel runs them, and the fp32 -> bf16 conversion that feeds them.
//
// BF16 (bfloat16) is the top half of an fp32: 1 sign, 8 exponent, 7 mantissa bits. A product
// kernel takes bf16 inputs and accumulates in fp32 (VDPBF16PS on AVX512-BF16, TDPBF16PS on AMX):
// on Zen 4 that is 229-231 GFLOP/s per core against 115 for fp32 FMAs (docs/machine-notes.md).
//
// The kernels (Bf16Kernel; docs/bf16.md says which runs where and why):
//   amx         our AMX kernel (amx_gemm.h): TDPBF16PS on tiles, 16 x 16 x 32 per instruction
//   vdpbf16ps   our VDPBF16PS kernel (bf16_gemm.cc)
//   tile-model  the AMX kernel on a portable model of the tile instructions (amx_tiles.h): any
//               CPU, slowly; a correctness backend for tests, never chosen by itself
//   onednn      oneDNN's matmul (kernels/onednn.h; builds with oneDNN only)
// auto: the calibration's choice per class of products (kernels/calibrate.h: every kernel that
// runs here but the tile model, timed on the run's own shapes); before one ran, the prior: our
// kernel on the best instruction here, AMX where the CPU has it and Linux grants it, else
// VDPBF16PS where AVX512_BF16 is, else nothing (train.precision: bf16 is refused). A refused AMX
// (old kernel, test hook) falls back with one message, never a SIGILL.
//
// Run-time detection only: the build's baseline stays x86-64-v3, code that needs AVX512-BF16 is
// compiled with function target attributes, the AMX instructions live in one file built for them
// and run only once amx::Granted(), and oneDNN dispatches itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/worker_pool.h"

namespace cputrain::kernels {

// Test hook: when this environment variable is set to 1, DetectBf16 reports no BF16 support
// whatever the CPU has (so the refusal path is tested on a CPU that has it).
inline constexpr const char* kDisableBf16Env = "CPUTRAIN_DISABLE_BF16";

struct Bf16Support {
  bool avx512_bf16 = false;  // AVX512_BF16 usable (CPUID and the OS saves zmm state)
  bool amx_bf16 = false;     // AMX-BF16 reported by CPUID
  bool amx_granted = false;  // AMX usable here: tile state enabled, granted, self-checked
  bool disabled = false;     // forced off by kDisableBf16Env
  bool native() const { return !disabled && (avx512_bf16 || amx_bf16); }
  // train.precision: bf16 can run on a kernel chosen by itself (auto): AMX or VDPBF16PS.
  bool trains() const { return !disabled && (avx512_bf16 || amx_granted); }
  // What is missing for native BF16, for an error message ("" when native()).
  std::string Missing() const;
  // One line: "bf16 native (AVX512_BF16)" / "bf16 not native: no AVX512_BF16 or AMX-BF16".
  std::string Describe() const;
};

// This CPU's BF16 support, read once (CPUID through the compiler's cpu model; AMX's permission
// asked of Linux once, kernels/amx_gemm.h) and cached; the environment hook is read on every call.
Bf16Support DetectBf16();

// ---- which kernel runs the bf16 products

enum class Bf16Kernel { kAuto, kAmx, kVdpbf16ps, kTileModel, kOnednn };
// "auto", "amx", "vdpbf16ps", "tile-model", "onednn": the values of train.bf16_kernel.
const char* Bf16KernelName(Bf16Kernel k);
std::optional<Bf16Kernel> ParseBf16Kernel(const std::string& name);
// "amx, vdpbf16ps, tile-model, onednn" (auto left out): for help texts and errors.
std::string Bf16KernelNames();
// One line: what the kernel is ("AMX tiles (TDPBF16PS), our kernel").
std::string DescribeBf16Kernel(Bf16Kernel k);
// "" when `k` can run in this process, else why not, in words (kAuto: whether auto finds one).
std::string Bf16KernelMissing(Bf16Kernel k);
// The prior (what runs before a calibration, and its tie-break): amx where amx_granted, else
// vdpbf16ps where AVX512_BF16 (and not disabled), else kAuto (none). bf16_kernel.cc says why.
Bf16Kernel BestBf16Kernel();
// Every kernel a calibration may choose here (the tile model left out: a test backend), the
// prior first; empty where bf16 does not run.
std::vector<Bf16Kernel> Bf16Kernels();
// Environment override of auto, for tests and benches: CPUTRAIN_BF16_KERNEL=<name>.
inline constexpr const char* kBf16KernelEnv = "CPUTRAIN_BF16_KERNEL";
// Resolves `requested` (kAuto: $CPUTRAIN_BF16_KERNEL when set, else BestBf16Kernel()) and makes it
// the kernel of every class of bf16 products in this process from now on. Throws InputError
// naming `what` (the key or variable that asked) when the kernel cannot run here, or when auto
// finds none; returns the kernel chosen. A CPU with AMX that Linux refuses gets vdpbf16ps from
// auto and one warning naming the refusal (log::Warn, once per process). A kernel named (by `what`
// or the environment) is forced: a calibration never replaces it.
Bf16Kernel UseBf16Kernel(Bf16Kernel requested, const std::string& what = "train.bf16_kernel");
bool Bf16KernelForced();
// One class's kernel (the calibration's choice); `k` must run here.
void SetBf16Kernel(GemmClass c, Bf16Kernel k);
// The kernel class `c`'s bf16 products run on now: the last UseBf16Kernel's or SetBf16Kernel's,
// else (first use) auto's, resolved then as UseBf16Kernel(kAuto) does, or the tile model where
// auto finds none (never a SIGILL).
Bf16Kernel ActiveBf16Kernel(GemmClass c);
// "bf16 products: vdpbf16ps (AVX512_BF16 (VDPBF16PS), our kernel), chosen by auto; also runs here:
// tile-model, onednn": what runs before a calibration (or what was forced); `requested` says who
// chose (auto, CPUTRAIN_BF16_KERNEL, or train.bf16_kernel), and a refused AMX is named with its
// reason.
std::string Bf16KernelLine(Bf16Kernel active, Bf16Kernel requested);
// The row block of attention's bf16 products of class `c` on its kernel: a multiple of its
// micro-kernel's rows (72 = 6 x VDPBF16PS's 12; 64 = 2 x AMX's 32).
int Bf16RowBlock(GemmClass c);

// The bf16 nearest to x, ties to even (as PyTorch's c10::BFloat16 and torch.autocast round);
// NaN becomes the one quiet NaN 0x7fc0 (as PyTorch's round_to_nearest_even), infinities and zeros
// keep their sign, fp32 subnormals round like any other value (no flush to zero), and values above
// the largest bf16 round to infinity.
inline uint16_t FloatToBf16(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  __builtin_memcpy(&x, &u, sizeof x);
  return x;
}

// dst[i] = FloatToBf16(src[i]) for n elements, split over the pool (memory bound: the loop
// vectorizes at the baseline ISA, no AVX512-BF16 needed).
void ConvertToBf16(WorkerPool& pool, uint16_t* dst, const float* src, std::size_t n);
// The same on the calling thread alone.
void ConvertRowToBf16(uint16_t* dst, const float* src, std::size_t n);

// C (M,N) fp32 (+)= A (M,K) bf16 @ B (K,N) bf16, products accumulated in fp32, on the kernel of
// class `cls` (ActiveBf16Kernel(cls)). A is stored (M,K) with row stride lda, or (K,M) if ta; B is
// stored (K,N) with row stride ldb, or (N,K) if tb; C has row stride ldc and is overwritten, or
// added to with `add`. On our kernels the summation order depends on K alone (k in order, in equal
// blocks of at most 512), so results are bit-identical for any split of M and N between threads.
// Thread safety: reentrant; our kernels use thread_local packing buffers (allocated on a thread's
// first call, reused after).
void Bf16Gemm(GemmClass cls, int M, int N, int K, const uint16_t* A, bool ta, int lda,
              const uint16_t* B, bool tb, int ldb, float* C, int ldc, bool add = false);
// The same on kernel `k` (not kAuto), whichever is active: bench gemm's rows and the tests. `k`
// must be able to run here (Bf16KernelMissing(k) empty).
void Bf16GemmOn(Bf16Kernel k, int M, int N, int K, const uint16_t* A, bool ta, int lda,
                const uint16_t* B, bool tb, int ldb, float* C, int ldc, bool add = false);

// The matrix products of train.precision: bf16 (what torch.autocast does on CPU: bf16 operands,
// fp32 accumulation), with the same shapes, splits and write/accumulate rules as MatmulForward
// and MatmulBackward (kernels.h); the outputs and gradients stay fp32.
//
// out (N,OC) = bf16(inp) (N,C) @ weight (OC,C)^T + bias; weight is the bf16 copy of the fp32
// weight; inp is converted into scratch (N*C bf16) first.
void MatmulForwardBf16(WorkerPool& pool, float* out, const float* inp, uint16_t* inp_bf16,
                       const uint16_t* weight, const float* bias, std::size_t N, int C, int OC,
                       int ldo, GemmSite site = GemmSite::kBlock);
// dinp (N,C) = bf16(dout) @ weight (null: skipped); dweight (OC,C) = bf16(dout)^T @ bf16(inp)
// (added with accumulate; null: skipped, and inp is not converted); dbias = column sums of the
// fp32 dout (null: skipped). dout (row stride ldd) is
// converted into dout_bf16 (N*ldd bf16), inp into inp_bf16 (N*C bf16).
void MatmulBackwardBf16(WorkerPool& pool, float* dinp, float* dweight, float* dbias,
                        const float* dout, uint16_t* dout_bf16, const float* inp,
                        uint16_t* inp_bf16, const uint16_t* weight, std::size_t N, int C, int OC,
                        int ldd, bool accumulate = false, GemmSite site = GemmSite::kBlock);

// Attention with bf16 products (what torch.autocast runs in bf16: q k^T and P v, and in
// backward dP = dy v^T, dq = dS k, dk = dS^T q, dv = P^T dy), fp32 accumulation; the softmax, its
// backward and every output stay fp32. Shapes, the grouped-query layout (NKV, 0 = NH) and outputs
// as AttentionForward / AttentionBackward (kernels.h). qkv_bf16: B*T*(NH+2*NKV)*hs bf16 (qkv
// converted into it; B*T*3C for NKV = NH); `opt` (masking, dropout) as AttentionForward's;
// dout_bf16: B*T*C (dout converted into it); scratch_bf16: AttentionScratchBf16(pool.size(), T);
// scratch (backward): as AttentionBackward's, AttentionScratchFloats(pool.size(), T).
void AttentionForwardBf16(WorkerPool& pool, float* out, float* att, const float* qkv,
                          uint16_t* qkv_bf16, uint16_t* scratch_bf16, int B, int T, int C, int NH,
                          int NKV = 0, const AttentionOptions& opt = {});
void AttentionBackwardBf16(WorkerPool& pool, float* dqkv, float* scratch, uint16_t* scratch_bf16,
                           uint16_t* qkv_bf16, uint16_t* dout_bf16, const float* dout,
                           const float* qkv, const float* att, int B, int T, int C, int NH,
                           int NKV = 0, const AttentionOptions& opt = {});
// Per worker: the bf16 copies of one head's dS and P (T x T each).
inline std::size_t AttentionScratchBf16(int threads, int T) {
  return static_cast<std::size_t>(threads) * 2 * T * T;
}

}  // namespace cputrain::kernels
