// train/kernel_setup: the kernels a run's products run on, chosen once its groups are built
// (kernels/calibrate.h): kept where the config or the environment named one
// (train.fp32_kernel / train.bf16_kernel, CPUTRAIN_FP32_KERNEL / CPUTRAIN_BF16_KERNEL); taken from
// the checkpoint a run resumes where it was written on this machine (the same kernels: the same
// numerics as before the stop; on another machine a warning says the kernels changed); else from
// the calibration cache, else measured on group 0's pinned workers. CPUTRAIN_RECALIBRATE=1 (the
// commands' --recalibrate) measures again whatever the cache holds.
//
// Thread safety: called by the thread that sets up a run, before its workers train.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "kernels/calibrate.h"
#include "model/products.h"
#include "runtime/worker_pool.h"

namespace cputrain::train {

inline constexpr const char* kRecalibrateEnv = "CPUTRAIN_RECALIBRATE";

struct KernelSetup {
  std::optional<kernels::KernelChoice> fp32, bf16;  // unset: forced, or nothing to choose
  // {"machine": MachineKey(), "fp32": ..., "bf16": ...}: what a checkpoint records (state.bin's
  // meta "kernels").
  nlohmann::json ToJson() const;
};

// Chooses (above) and sets the kernels of `run`'s classes, measuring on `pool`; `planned_flops`:
// the products of the planned run, per group (for the budget); `resumed`: the checkpoint's
// "kernels" (null: a fresh start). Logs (where `announce`) the choice per class, and what the
// libraries run narrower than the CPU (kernels::LibraryDiagnosis); topo prints them itself.
KernelSetup SetUpKernels(WorkerPool& pool, const model::ProductRun& run, double planned_flops,
                         const nlohmann::json& resumed, bool announce = true);

}  // namespace cputrain::train
