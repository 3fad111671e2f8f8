// kernels/bf16.h: what BF16 mixed precision needs below the model: whether this CPU runs BF16
// products natively, and the fp32 -> bf16 conversion that feeds them.
//
// BF16 (bfloat16) is the top half of an fp32: 1 sign, 8 exponent, 7 mantissa bits. A product
// kernel takes bf16 inputs and accumulates in fp32 (VDPBF16PS on AVX512-BF16, TDPBF16PS on AMX):
// on Zen 4 that is 229-231 GFLOP/s per core against 115 for fp32 FMAs (NOTES.md).
//
// Run-time detection only: the build's baseline stays x86-64-v3, code that needs AVX512-BF16 is
// compiled with function target attributes or comes from a library that dispatches itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/worker_pool.h"

namespace cputrain::kernels {

// Test hook: when this environment variable is set to 1, DetectBf16 reports no BF16 support
// whatever the CPU has (so the refusal path is tested on a CPU that has it).
inline constexpr const char* kDisableBf16Env = "CPUTRAIN_DISABLE_BF16";

struct Bf16Support {
  bool avx512_bf16 = false;  // AVX512_BF16 usable (CPUID and the OS saves zmm state)
  bool amx_bf16 = false;     // AMX-BF16 reported by CPUID (tile state not requested here)
  bool disabled = false;     // forced off by kDisableBf16Env
  bool native() const { return !disabled && (avx512_bf16 || amx_bf16); }
  // What is missing for native BF16, for an error message ("" when native()).
  std::string Missing() const;
  // One line: "bf16 native (AVX512_BF16)" / "bf16 not native: no AVX512_BF16 or AMX-BF16".
  std::string Describe() const;
};

// This CPU's BF16 support, read once (CPUID through the compiler's cpu model) and cached; the
// environment hook is read on every call.
Bf16Support DetectBf16();

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

}  // namespace cputrain::kernels
