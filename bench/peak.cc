#include "bench/peak.h"

#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "bench/bench.h"
#include "kernels/bf16.h"
#include "kernels/peak.h"

namespace cputrain::bench {
namespace {

std::atomic<float> g_sink{0};

kernels::PeakLoop LoopOf(FmaWidth w) {
  switch (w) {
    case FmaWidth::k256:
      return kernels::PeakLoop::kFma256;
    case FmaWidth::k512:
      return kernels::PeakLoop::kFma512;
    case FmaWidth::kBf16:
      return kernels::PeakLoop::kVdpbf16ps;
    case FmaWidth::kAmx:
      return kernels::PeakLoop::kAmx;
  }
  return kernels::PeakLoop::kFma256;
}

double FlopsPerIter(FmaWidth w) { return kernels::PeakLoopFlops(LoopOf(w)); }

// One run on every thread of the pool at once: the sum of the threads' rates, each over its own
// CPU time (CLOCK_THREAD_CPUTIME_ID). The CPU clock stops while a thread is descheduled, so
// another process on the box lowers no thread's rate: the peak stays the cores' peak even when
// the wall clock is disturbed (the figures measured against it are wall-clock rates).
double RunOnce(WorkerPool& pool, FmaWidth w, uint64_t iters) {
  std::vector<double> secs(static_cast<std::size_t>(pool.size()));
  pool.ForEachThread([&](int t) {
    const double t0 = kernels::ThreadCpuSeconds();
    const float r = kernels::RunPeakLoop(LoopOf(w), iters);
    secs[static_cast<std::size_t>(t)] = kernels::ThreadCpuSeconds() - t0;
    g_sink.store(r, std::memory_order_relaxed);
  });
  double rate = 0;
  for (double s : secs) rate += FlopsPerIter(w) * static_cast<double>(iters) / std::max(s, 1e-9);
  return rate / 1e9;
}

}  // namespace

const char* FmaWidthName(FmaWidth w) { return kernels::PeakLoopName(LoopOf(w)); }

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
    g_sink.store(kernels::RunPeakLoop(kernels::PeakLoop::kFma256, iters),
                 std::memory_order_relaxed);
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
  p.amx = kernels::PeakLoopRuns(kernels::PeakLoop::kAmx);
  const double secs = quick ? 0.02 : 0.1;
  const int reps = quick ? 2 : 5;
  {
    WorkerPool one({pool.cpus()[0]}, binder, "peak1");
    p.core_256 = MeasureFmaGflops(one, FmaWidth::k256, secs, reps);
    if (p.avx512) p.core_512 = MeasureFmaGflops(one, FmaWidth::k512, secs, reps);
    if (p.bf16) p.core_bf16 = MeasureFmaGflops(one, FmaWidth::kBf16, secs, reps);
    if (p.amx) p.core_amx = MeasureFmaGflops(one, FmaWidth::kAmx, secs, reps);
  }
  if (pool.size() == 1) {
    p.group_256 = p.core_256;
    p.group_512 = p.core_512;
    p.group_bf16 = p.core_bf16;
    p.group_amx = p.core_amx;
  } else {
    p.group_256 = MeasureFmaGflops(pool, FmaWidth::k256, secs, reps);
    if (p.avx512) p.group_512 = MeasureFmaGflops(pool, FmaWidth::k512, secs, reps);
    if (p.bf16) p.group_bf16 = MeasureFmaGflops(pool, FmaWidth::kBf16, secs, reps);
    if (p.amx) p.group_amx = MeasureFmaGflops(pool, FmaWidth::kAmx, secs, reps);
  }
  return p;
}

}  // namespace cputrain::bench
