#include "kernels/bf16.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

#include "kernels/amx_gemm.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

// CPUID leaf 7: sub-leaf 1 EAX bit 5 = AVX512_BF16; sub-leaf 0 EDX bit 22 = AMX-BF16.
bool CpuidBit(unsigned subleaf, int reg, unsigned bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, subleaf, r[0], r[1], r[2], r[3]);
  return (r[reg] >> bit & 1u) != 0;
}

Bf16Support ReadCpu() {
  Bf16Support s;
  __builtin_cpu_init();
  // avx512f through the compiler's cpu model also checks that the OS saves the zmm state
  // (XGETBV); CPUID's AVX512_BF16 bit on top of that.
  s.avx512_bf16 = __builtin_cpu_supports("avx512f") && CpuidBit(1, 0, 5);
  s.amx_bf16 = CpuidBit(0, 3, 22);
  s.amx_granted = amx::Granted();
  return s;
}

}  // namespace

std::string Bf16Support::Missing() const {
  if (native()) return "";
  if (disabled)
    return std::string("AVX512_BF16 and AMX-BF16 (forced off by ") + kDisableBf16Env + "=1)";
  return "AVX512_BF16 and AMX-BF16 (the CPU has neither)";
}

std::string Bf16Support::Describe() const {
  if (!native()) return "bf16 not native: missing " + Missing();
  std::string isa = avx512_bf16 ? "AVX512_BF16" : "";
  if (amx_bf16)
    isa += (isa.empty() ? "AMX-BF16" : ", AMX-BF16") +
           std::string(amx_granted ? "" : " (not granted)");
  return "bf16 native (" + isa + ")";
}

Bf16Support DetectBf16() {
  static const Bf16Support cpu = ReadCpu();
  Bf16Support s = cpu;
  const char* off = std::getenv(kDisableBf16Env);
  s.disabled = off != nullptr && std::strcmp(off, "1") == 0;
  return s;
}

void ConvertRowToBf16(uint16_t* dst, const float* src, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), Bf16x8(_mm256_loadu_ps(src + i)));
  }
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

void ConvertToBf16(WorkerPool& pool, uint16_t* dst, const float* src, std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t lo, std::size_t hi, int) {
    ConvertRowToBf16(dst + lo, src + lo, hi - lo);
  });
}

}  // namespace cputrain::kernels
