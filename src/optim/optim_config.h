// The optimizer's own settings (the `optim:` section of the config, docs/config.md), apart from
// the whole Config so that the optimizer depends on nothing else (no hwloc, no YAML).
#pragma once

#include <string>

namespace cputrain {

// kLinear: Hugging Face's get_linear_schedule_with_warmup (the Trainer's default).
enum class Schedule { kConstant, kCosine, kLinear };

// transformers.optimization.Adafactor's settings, its defaults (optim/optimizer.h).
struct AdafactorConfig {
  bool scale_parameter = true;  // lr times max(eps2, RMS of the tensor)
  bool relative_step = true;    // lr = min(1e-2, 1/sqrt(t)): the schedule's lr is not used
  bool warmup_init = false;     // relative step min(1e-6 t, 1/sqrt(t))
  double decay_rate = -0.8;     // second-moment decay 1 - t^decay_rate
  double clip_threshold = 1.0;  // the update's RMS is clipped to it, per tensor
  double beta1 = 0;             // first moment (0: none, transformers' None)
  double eps1 = 1e-30;          // added to the squared gradient
  double eps2 = 1e-3;           // the least parameter scale
};

// optim.name's values (optim/optimizer.h makes each).
inline constexpr const char* kOptimizerNames[] = {"adamw", "adafactor", "sgd"};

struct OptimConfig {
  std::string name = kOptimizerNames[0];
  double lr = 3e-4;
  double min_lr = 3e-5;
  Schedule schedule = Schedule::kCosine;
  int warmup_steps = 10;
  double beta1 = 0.9;  // AdamW
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 = no clipping
  // SGD (torch.optim.SGD): momentum 0 keeps no state.
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  AdafactorConfig adafactor;
};

}  // namespace cputrain
