// The optimizer's own settings (the `optim:` section of the config, docs/config.md), apart from
// the whole Config so that the optimizer depends on nothing else (no hwloc, no YAML).
#pragma once

namespace cputrain {

// kLinear: Hugging Face's get_linear_schedule_with_warmup (the Trainer's default).
enum class Schedule { kConstant, kCosine, kLinear };

struct OptimConfig {
  double lr = 3e-4;
  double min_lr = 3e-5;
  Schedule schedule = Schedule::kCosine;
  int warmup_steps = 10;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 = no clipping
};

}  // namespace cputrain
