#include "kernels/peak.h"

#include <fmt/format.h>
#include <immintrin.h>
#include <time.h>

#include <algorithm>

#include "common/error.h"
#include "kernels/amx_gemm.h"

namespace cputrain::kernels {
namespace {

constexpr int kChains256 = 12;  // 16 ymm registers: 12 accumulators + x + y
constexpr int kChains512 = 24;  // 32 zmm registers: 24 accumulators + x + y

// Read through a volatile so the compiler cannot fold the loop's arithmetic.
volatile float g_x = 0.999f, g_y = 0.001f;

float FmaLoop256(uint64_t iters) {
  const __m256 x = _mm256_set1_ps(g_x), y = _mm256_set1_ps(g_y);
  __m256 acc[kChains256];
  for (int i = 0; i < kChains256; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  for (uint64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains256; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kChains256; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

// The chains' result, so that the compiler must compute them.
__attribute__((target("avx512f"))) float Sum512(const __m512* acc) {
  __m512 s = acc[0];
  for (int i = 1; i < kChains512; ++i) s = _mm512_add_ps(s, acc[i]);
  // (Stored and summed by hand: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized.)
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx512f"))) float FmaLoop512(uint64_t iters) {
  const __m512 x = _mm512_set1_ps(g_x), y = _mm512_set1_ps(g_y);
  __m512 acc[kChains512];
  for (int i = 0; i < kChains512; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (uint64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains512; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  return Sum512(acc);
}

__attribute__((target("avx512f,avx512bf16"))) float DpbfLoop512(uint64_t iters) {
  const __m512 xf = _mm512_set1_ps(g_x), yf = _mm512_set1_ps(g_y);
  const __m512bh x = _mm512_cvtne2ps_pbh(xf, xf), y = _mm512_cvtne2ps_pbh(yf, yf);
  __m512 acc[kChains512];
  for (int i = 0; i < kChains512; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (uint64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains512; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  return Sum512(acc);
}

}  // namespace

const char* PeakLoopName(PeakLoop loop) {
  switch (loop) {
    case PeakLoop::kFma256:
      return "avx2-fma";
    case PeakLoop::kFma512:
      return "avx512f";
    case PeakLoop::kVdpbf16ps:
      return "avx512-bf16";
    case PeakLoop::kAmx:
      return "amx-bf16";
  }
  return "?";
}

bool PeakLoopRuns(PeakLoop loop) {
  __builtin_cpu_init();
  switch (loop) {
    case PeakLoop::kFma256:
      return true;
    case PeakLoop::kFma512:
      return __builtin_cpu_supports("avx512f");
    case PeakLoop::kVdpbf16ps:
      return DetectBf16().avx512_bf16;
    case PeakLoop::kAmx:
      return amx::Granted();
  }
  return false;
}

double PeakLoopFlops(PeakLoop loop) {
  switch (loop) {
    case PeakLoop::kFma256:
      return kChains256 * 8.0 * 2.0;
    case PeakLoop::kFma512:
      return kChains512 * 16.0 * 2.0;
    case PeakLoop::kVdpbf16ps:
      return kChains512 * 16.0 * 4.0;
    case PeakLoop::kAmx:
      return amx::kPeakLoopFlops;
  }
  return 0;
}

float RunPeakLoop(PeakLoop loop, uint64_t iters) {
  switch (loop) {
    case PeakLoop::kFma256:
      return FmaLoop256(iters);
    case PeakLoop::kFma512:
      return FmaLoop512(iters);
    case PeakLoop::kVdpbf16ps:
      return DpbfLoop512(iters);
    case PeakLoop::kAmx:
      return amx::RealPeakLoop(iters);
  }
  return 0;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double MeasurePeakLoop(PeakLoop loop, double seconds, int reps) {
  if (!PeakLoopRuns(loop)) return 0;
  volatile float sink = 0;
  auto rate = [&](uint64_t iters) {
    const double t0 = ThreadCpuSeconds();
    sink = sink + RunPeakLoop(loop, iters);
    return PeakLoopFlops(loop) * static_cast<double>(iters) /
           std::max(ThreadCpuSeconds() - t0, 1e-9) / 1e9;
  };
  const uint64_t probe = 1 << 12;
  const double probe_rate = rate(probe);
  const uint64_t iters = std::max<uint64_t>(
      probe, static_cast<uint64_t>(probe_rate * 1e9 * seconds / PeakLoopFlops(loop)));
  double best = 0;
  for (int r = 0; r < reps; ++r) best = std::max(best, rate(iters));
  return best;
}

std::string Bf16SlowerNote(Bf16Kernel active, double bf16_gflops, double fp32_gflops) {
  if (active == Bf16Kernel::kAmx || active == Bf16Kernel::kTileModel) return "";
  if (bf16_gflops <= 0 || fp32_gflops <= 0 || bf16_gflops >= fp32_gflops) return "";
  return fmt::format(
      "train.precision: bf16 runs its products on VDPBF16PS ({}), which this CPU runs at {:.0f} "
      "GFLOP/s per core against {:.0f} for fp32 FMAs (measured just now): bf16 is likely slower "
      "than fp32 here. It saves memory and matches torch.autocast; for speed, train.precision: "
      "fp32 (docs/bf16.md)",
      Bf16KernelName(active), bf16_gflops, fp32_gflops);
}

std::string Bf16RateNote(Bf16Kernel active) {
  if (active != Bf16Kernel::kVdpbf16ps && !(active == Bf16Kernel::kOnednn && !amx::Granted())) {
    return "";
  }
  const double bf16 = MeasurePeakLoop(PeakLoop::kVdpbf16ps, 0.02, 2);
  const double fp32 = std::max(MeasurePeakLoop(PeakLoop::kFma512, 0.02, 2),
                               MeasurePeakLoop(PeakLoop::kFma256, 0.02, 2));
  return Bf16SlowerNote(active, bf16, fp32);
}

}  // namespace cputrain::kernels
