// The measured fp32 FMA peak: the yardstick for "% of peak" in the gemm suite and for MFU in the
// train suite. Nominal peaks (cores x GHz x flop/cycle) are guesses on a VM whose clock we cannot
// read (docs/machine-notes.md: /proc/cpuinfo shows the TSC, not the clock), so we measure instead.
//
// Method: each thread runs one of kernels/peak.h's loops: independent FMA chains, acc_i = acc_i *
// x + y, on 256-bit registers (12 chains: enough to cover a 4-cycle FMA latency on 2 FMA pipes,
// with registers left for x and y), and, when the CPU has AVX-512F (checked at run time with
// __builtin_cpu_supports), on 512-bit registers (24 chains), compiled for that ISA with
// __attribute__((target("avx512f"))) since the baseline build is x86-64-v3. flops = chains x
// lanes x 2 per iteration. The BF16 peak (when kernels::DetectBf16 finds AVX512_BF16) runs the
// same 24 chains of VDPBF16PS, acc += x0*y0 + x1*y1 on bf16 pairs, 4 flops per fp32 lane: the
// yardstick for bf16 products (PyTorch and oneDNN also count a bf16 GEMM as 2 M N K). The AMX
// peak (where the CPU has AMX and Linux grants it) runs 4 independent TDPBF16PS on resident tiles,
// 16384 flops each. The values converge to 1 (x = 0.999, y = 0.001), so no denormal or overflow
// slows the loop. A measurement is the best of `reps` runs (a peak is a best case). Each thread's
// rate is taken over its own CPU time, not the wall clock, so that a busy shared box (other
// processes taking turns on our cores) does not lower the peak; all threads run at once, so an
// all-core clock that is lower than the one-core clock is seen.
#pragma once

#include <string>
#include <vector>

#include "runtime/worker_pool.h"

namespace cputrain::bench {

enum class FmaWidth { k256, k512, kBf16, kAmx };
// "avx2-fma" / "avx512f" / "avx512-bf16" / "amx-bf16"
const char* FmaWidthName(FmaWidth w);

// True if this CPU can run the 512-bit loop.
bool HasAvx512();

// GFLOP/s of all the pool's threads running the loop at once: the sum of the threads' rates
// (flops over the thread's CPU time), best of `reps`. seconds_per_rep: about how long one run
// lasts (calibrated).
double MeasureFmaGflops(WorkerPool& pool, FmaWidth width, double seconds_per_rep, int reps);

struct PeakResult {
  double core_256 = 0, core_512 = 0;     // one thread (the pool's first CPU)
  double group_256 = 0, group_512 = 0;   // all the pool's threads at once
  double core_bf16 = 0, group_bf16 = 0;  // VDPBF16PS, when bf16 (0 otherwise)
  double core_amx = 0, group_amx = 0;    // TDPBF16PS, when amx (0 otherwise)
  int threads = 0;
  bool avx512 = false;
  bool bf16 = false;  // AVX512_BF16: the bf16 figures were measured
  bool amx = false;   // AMX granted here: the AMX figures were measured
  // The better of the two widths: the peak a kernel could reach on these cores.
  double core() const { return core_512 > core_256 ? core_512 : core_256; }
  // The group's peak: the all-threads measurement, or threads x the one-core figure if that is
  // larger. On a quiet machine the two agree (or the all-core clock is lower, which the first
  // shows); on a busy one the all-threads run is the one disturbed (a vCPU taken away by the
  // host still counts as CPU time), and taking the larger keeps "% of peak" from being
  // inflated by a low peak.
  double group() const {
    const double measured = group_512 > group_256 ? group_512 : group_256;
    return measured > threads * core() ? measured : threads * core();
  }
  std::string best_isa() const;
  // The group's bf16 product peak, by the same rule as group().
  double group_bf16_peak() const {
    return group_bf16 > threads * core_bf16 ? group_bf16 : threads * core_bf16;
  }
  double group_amx_peak() const {
    return group_amx > threads * core_amx ? group_amx : threads * core_amx;
  }
};

// Each pool thread's 256-bit FMA rate over the WALL clock, all threads at once, for about
// `seconds`: a quick check of how fast each core runs right now. On a shared VM a core can run
// at half speed for tens of seconds (the host puts another guest on its SMT sibling) while no
// process inside the VM is busy; CPU-time accounting cannot see that, this check does.
std::vector<double> CoreRates(WorkerPool& pool, double seconds);

// Per-core and whole-pool peaks on the pool's CPUs (the one-thread figure on a one-worker pool
// made from the pool's first CPU, with the same binder). quick: shorter runs.
PeakResult MeasurePeak(WorkerPool& pool, topo::Binder* binder, bool quick);

}  // namespace cputrain::bench
