#include "optim/optim.h"

#include <algorithm>
#include <cmath>

namespace cputrain::optim {

double LearningRate(const OptimConfig& c, int step, int steps) {
  if (c.schedule == Schedule::kConstant) return c.lr;
  if (step < c.warmup_steps) return c.lr * (step + 1) / c.warmup_steps;
  const double progress =
      static_cast<double>(step - c.warmup_steps) / static_cast<double>(steps - c.warmup_steps);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

void AdamWUpdate(WorkerPool& pool, const model::ParamLayout& layout, float* params,
                 const float* grads, float* m, float* v, std::size_t lo, std::size_t hi,
                 const AdamWStep& s) {
  if (lo >= hi) return;
  // Scalars as torch forms them: Python doubles, rounded to float where they meet a tensor.
  const double bc1 = 1.0 - std::pow(s.beta1, s.t);
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(s.beta2, s.t));
  const float step_size = static_cast<float>(-(s.lr / bc1));
  const float decay_keep = static_cast<float>(1.0 - s.lr * s.weight_decay);
  const float b1 = static_cast<float>(s.beta1), one_minus_b1 = static_cast<float>(1.0 - s.beta1);
  const float b2 = static_cast<float>(s.beta2), one_minus_b2 = static_cast<float>(1.0 - s.beta2);
  const float bc2f = static_cast<float>(bc2_sqrt), eps = static_cast<float>(s.eps);
  const float scale = s.grad_scale;
  pool.ParallelFor(hi - lo, [&](std::size_t b, std::size_t e, int) {
    // Walk the decay segments that intersect this thread's part [lo+b, lo+e).
    std::size_t i = lo + b;
    const std::size_t end = lo + e;
    for (const auto& seg : layout.segments()) {
      if (seg.end <= i) continue;
      if (seg.begin >= end) break;
      const std::size_t stop = std::min(seg.end, end);
      const bool decay = seg.decay && s.weight_decay != 0.0;
      for (; i < stop; ++i) {
        const float g = grads[i] * scale;
        float p = params[i];
        if (decay) p = p * decay_keep;
        float& mi = m[i - lo];
        float& vi = v[i - lo];
        mi = mi * b1 + g * one_minus_b1;
        vi = vi * b2 + g * g * one_minus_b2;
        const float denom = std::sqrt(vi) / bc2f + eps;
        params[i] = p + step_size * (mi / denom);
      }
    }
  });
}

double SumOfSquares(WorkerPool& pool, const float* x, std::size_t lo, std::size_t hi) {
  // One slot per worker, kept between calls so a training step does not allocate. The caller's
  // thread-local vector is handed to the workers by pointer: named inside the lambda, a
  // thread_local would be each worker's own (empty) one.
  thread_local std::vector<double> tl_partial;
  tl_partial.assign(pool.size(), 0.0);
  double* partial = tl_partial.data();
  pool.ParallelFor(hi > lo ? hi - lo : 0, [&](std::size_t b, std::size_t e, int tid) {
    double s = 0;
    for (std::size_t i = lo + b; i < lo + e; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[tid] = s;
  });
  double total = 0;
  for (double p : tl_partial) total += p;
  return total;
}

float ClipCoefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  const float coef = static_cast<float>(max_norm) / (static_cast<float>(total_norm) + 1e-6f);
  return std::min(coef, 1.0f);
}

}  // namespace cputrain::optim
