#include "bench/peak.h"

#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "bench/bench.h"
#include "kernels/bf16.h"

namespace cputrain::bench {
namespace {

constexpr int kChains256 = 12;  // 16 ymm registers: 12 accumulators + x + y
constexpr int kChains512 = 24;  // 32 zmm registers: 24 accumulators + x + y

// Read through a volatile so the compiler cannot fold the loop's arithmetic.
volatile float g_x = 0.999f, g_y = 0.001f;
std::atomic<float> g_sink{0};

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

// VDPBF16PS: per lane, acc += x0*y0 + x1*y1 with the products of a bf16 pair, accumulated in
// fp32: 2 multiply-adds = 4 flops per lane (the count PyTorch's and oneDNN's GFLOP/s use for a
// bf16 GEMM's 2 M N K). Needs AVX512_BF16: only called when kernels::DetectBf16 says so.
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

double FlopsPerIter(FmaWidth w) {
  switch (w) {
    case FmaWidth::k256:
      return kChains256 * 8.0 * 2.0;
    case FmaWidth::k512:
      return kChains512 * 16.0 * 2.0;
    case FmaWidth::kBf16:
      return kChains512 * 16.0 * 4.0;
  }
  return 0;
}

float Loop(FmaWidth w, uint64_t iters) {
  switch (w) {
    case FmaWidth::k256:
      return FmaLoop256(iters);
    case FmaWidth::k512:
      return FmaLoop512(iters);
    case FmaWidth::kBf16:
      return DpbfLoop512(iters);
  }
  return 0;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One run on every thread of the pool at once: the sum of the threads' rates, each over its own
// CPU time (CLOCK_THREAD_CPUTIME_ID). The CPU clock stops while a thread is descheduled, so
// another process on the box lowers no thread's rate: the peak stays the cores' peak even when
// the wall clock is disturbed (the figures measured against it are wall-clock rates).
double RunOnce(WorkerPool& pool, FmaWidth w, uint64_t iters) {
  std::vector<double> secs(static_cast<std::size_t>(pool.size()));
  pool.ForEachThread([&](int t) {
    const double t0 = ThreadCpuSeconds();
    const float r = Loop(w, iters);
    secs[static_cast<std::size_t>(t)] = ThreadCpuSeconds() - t0;
    g_sink.store(r, std::memory_order_relaxed);
  });
  double rate = 0;
  for (double s : secs) rate += FlopsPerIter(w) * static_cast<double>(iters) / std::max(s, 1e-9);
  return rate / 1e9;
}

}  // namespace

const char* FmaWidthName(FmaWidth w) {
  switch (w) {
    case FmaWidth::k256:
      return "avx2-fma";
    case FmaWidth::k512:
      return "avx512f";
    case FmaWidth::kBf16:
      return "avx512-bf16";
  }
  return "?";
}

bool HasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

double MeasureFmaGflops(WorkerPool& pool, FmaWidth width, double seconds_per_rep, int reps) {
  // Calibrate: a short run tells the rate, then size the runs to seconds_per_rep.
  const uint64_t probe = 1 << 16;
  const double rate = RunOnce(pool, width, probe);  // GFLOP/s of the probe (warms up too)
  const double per_thread_flops = rate * 1e9 / pool.size() * seconds_per_rep;
  const uint64_t iters =
      std::max<uint64_t>(probe, static_cast<uint64_t>(per_thread_flops / FlopsPerIter(width)));
  double best = 0;
  for (int r = 0; r < reps; ++r) best = std::max(best, RunOnce(pool, width, iters));
  return best;
}

std::vector<double> CoreRates(WorkerPool& pool, double seconds) {
  // ~`seconds` of the 256-bit loop at the peak's rate of ~117 GFLOP/s per core; the exact
  // length does not matter, the rate is over each thread's wall time.
  const uint64_t iters = std::max<uint64_t>(
      1 << 14, static_cast<uint64_t>(seconds * 100e9 / FlopsPerIter(FmaWidth::k256)));
  std::vector<double> rates(static_cast<std::size_t>(pool.size()));
  pool.ForEachThread([&](int t) {
    const double t0 = NowSeconds();
    g_sink.store(FmaLoop256(iters), std::memory_order_relaxed);
    rates[static_cast<std::size_t>(t)] =
        FlopsPerIter(FmaWidth::k256) * static_cast<double>(iters) / (NowSeconds() - t0) / 1e9;
  });
  return rates;
}

std::string PeakResult::best_isa() const {
  return FmaWidthName(core_512 > core_256 ? FmaWidth::k512 : FmaWidth::k256);
}

PeakResult MeasurePeak(WorkerPool& pool, topo::Binder* binder, bool quick) {
  PeakResult p;
  p.threads = pool.size();
  p.avx512 = HasAvx512();
  p.bf16 = kernels::DetectBf16().avx512_bf16;
  const double secs = quick ? 0.02 : 0.1;
  const int reps = quick ? 2 : 5;
  {
    WorkerPool one({pool.cpus()[0]}, binder, "peak1");
    p.core_256 = MeasureFmaGflops(one, FmaWidth::k256, secs, reps);
    if (p.avx512) p.core_512 = MeasureFmaGflops(one, FmaWidth::k512, secs, reps);
    if (p.bf16) p.core_bf16 = MeasureFmaGflops(one, FmaWidth::kBf16, secs, reps);
  }
  if (pool.size() == 1) {
    p.group_256 = p.core_256;
    p.group_512 = p.core_512;
    p.group_bf16 = p.core_bf16;
  } else {
    p.group_256 = MeasureFmaGflops(pool, FmaWidth::k256, secs, reps);
    if (p.avx512) p.group_512 = MeasureFmaGflops(pool, FmaWidth::k512, secs, reps);
    if (p.bf16) p.group_bf16 = MeasureFmaGflops(pool, FmaWidth::kBf16, secs, reps);
  }
  return p;
}

}  // namespace cputrain::bench
