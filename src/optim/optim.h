// optim/: AdamW exactly as torch.optim.AdamW (PyTorch 1.13, single-tensor path), global-norm
// gradient clipping as torch.nn.utils.clip_grad_norm_, and the learning-rate schedules.
//
// Everything works on a range [lo, hi) of the flat parameter buffer, so that under ZeRO-1 each
// replica group updates only the shard it owns, with moments allocated for that shard alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/transformer.h"
#include "optim/optim_config.h"
#include "runtime/worker_pool.h"

namespace cputrain::optim {

// lr(s) for 0-based step s of `steps` (docs/config.md): constant; linear warmup then cosine
// decay from lr to min_lr; or Hugging Face's linear warmup from 0 and linear decay to 0.
double LearningRate(const OptimConfig& c, int step, int steps);

struct AdamWStep {
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int t = 1;                // 1-based update count, for bias correction
  float grad_scale = 1.0f;  // clip coefficient applied to every gradient first
};

// Updates params[lo, hi) from grads[lo, hi). m and v hold the moments of this range: m[i - lo].
// Weight decay applies where the layout's segments say so. Per element, the float operations
// are torch's, in torch's order:
//   g = g * grad_scale;  p = p * (1 - lr*wd);  m = m*b1 + g*(1-b1);  v = v*b2 + g*g*(1-b2);
//   p = p + (-lr/(1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
// params_bf16 (train.precision: bf16; null otherwise): also writes each updated parameter's bf16
// rounding to params_bf16[i] (kernels::FloatToBf16's), in the same pass.
void AdamWUpdate(WorkerPool& pool, const model::ParamLayout& layout, float* params,
                 const float* grads, float* m, float* v, std::size_t lo, std::size_t hi,
                 const AdamWStep& step, uint16_t* params_bf16 = nullptr);

// sum(x[i]^2) over [lo, hi) in double, summed in a fixed order (per-thread partials added in
// thread order), for the global gradient norm.
double SumOfSquares(WorkerPool& pool, const float* x, std::size_t lo, std::size_t hi);

// torch.nn.utils.clip_grad_norm_'s coefficient: min(1, max_norm / (norm + 1e-6)) in float;
// 1 when max_norm is 0 (clipping off).
float ClipCoefficient(double total_norm, double max_norm);

}  // namespace cputrain::optim
