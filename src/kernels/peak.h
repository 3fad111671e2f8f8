// kernels/peak.h: loops that run one product instruction at its peak rate, the yardsticks of
// "% of peak" (bench/peak.h measures them over a pool) and of train.precision: bf16's check at
// start that bf16 products are faster than fp32 ones on this CPU (Bf16RateNote).
//
// Each loop runs independent accumulator chains (enough to cover the instruction's latency on
// its pipes) on values that converge (x = 0.999, y = 0.001), so no denormal or overflow slows it:
//   kFma256     12 chains of 256-bit VFMADD (8 lanes x 2 flops)
//   kFma512     24 chains of 512-bit VFMADD (16 lanes x 2 flops); needs AVX-512F
//   kVdpbf16ps  24 chains of VDPBF16PS (16 lanes x 4 flops: two products and two adds, the count
//               PyTorch and oneDNN use for a bf16 GEMM's 2 M N K); needs AVX512_BF16
//   kAmx        4 independent TDPBF16PS on resident tiles (16 x 16 x 32 pairs: 16384 flops
//               each); needs amx::Granted()
#pragma once

#include <cstdint>
#include <string>

#include "kernels/bf16.h"

namespace cputrain::kernels {

enum class PeakLoop { kFma256, kFma512, kVdpbf16ps, kAmx };
// "avx2-fma", "avx512f", "avx512-bf16", "amx-bf16"
const char* PeakLoopName(PeakLoop loop);
// Whether the loop runs on this CPU (and, for AMX, in this process).
bool PeakLoopRuns(PeakLoop loop);
// Flops of one iteration.
double PeakLoopFlops(PeakLoop loop);
// `iters` iterations on the calling thread; returns a value of the accumulators (keep it, or the
// compiler may drop the loop). Call only where PeakLoopRuns(loop).
float RunPeakLoop(PeakLoop loop, uint64_t iters);
// The calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID: a descheduled thread's clock
// stops, so another process on the box does not lower a rate measured over it).
double ThreadCpuSeconds();
// GFLOP/s of the loop on the calling thread over its own CPU time: ~`seconds` a run (calibrated
// by a short probe), best of `reps`. 0 where the loop does not run.
double MeasurePeakLoop(PeakLoop loop, double seconds, int reps);

// train.precision: bf16's check: where the active kernel's instruction (VDPBF16PS; AMX is never
// slower) measured below the fp32 FMA loop on this core, the warning that says so with both
// rates; else "". The rates in GFLOP/s per core.
std::string Bf16SlowerNote(Bf16Kernel active, double bf16_gflops, double fp32_gflops);
// Measures both on the calling thread (~0.1 s) when the active kernel is vdpbf16ps or onednn
// without AMX, and returns Bf16SlowerNote's verdict; "" for the others.
std::string Bf16RateNote(Bf16Kernel active);

}  // namespace cputrain::kernels
