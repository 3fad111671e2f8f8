#include "optim/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "common/error.h"
#include "kernels/bf16.h"
#include "optim/optim.h"
#include "optim/optimizers.h"

namespace cputrain::optim {
namespace {

// A slot that follows the parameters elementwise: [lo, hi) of a vector as long as the buffer.
Slot ElementwiseSlot(const char* name, std::size_t total, std::size_t lo, std::size_t hi) {
  return {name, total, hi - lo, {{lo, 0, hi - lo}}};
}

// torch.optim.AdamW (optim.h's AdamWUpdate): m and v.
class AdamW final : public Optimizer {
 public:
  AdamW(const OptimConfig& c, const model::ParamLayout& layout) : c_(c), layout_(layout) {}
  const char* name() const override { return "adamw"; }
  std::string Describe() const override {
    return fmt::format("adamw (betas {:g}, {:g}, eps {:g}, weight decay {:g})", c_.beta1, c_.beta2,
                       c_.eps, c_.weight_decay);
  }
  std::vector<Slot> Slots(std::size_t lo, std::size_t hi) const override {
    return {ElementwiseSlot("m", layout_.total(), lo, hi),
            ElementwiseSlot("v", layout_.total(), lo, hi)};
  }
  void Update(const Shard& s, const StepArgs& a) const override {
    const AdamWStep step{a.lr, c_.beta1, c_.beta2, c_.eps, c_.weight_decay, a.t, a.grad_scale};
    AdamWUpdate(*s.pool, layout_, s.params, s.grads, s.slots[0], s.slots[1], s.lo, s.hi, step,
                s.params_bf16);
  }

 private:
  const OptimConfig c_;
  const model::ParamLayout layout_;  // a copy: it needs no caller to outlive it
};

// torch.optim.SGD's single-tensor step, per element, its float operations in its order:
//   g = g * grad_scale;  g = g + wd * p  (decayed tensors);
//   momentum: buf = t == 1 ? g : buf * momentum + (1 - dampening) * g;
//             g = nesterov ? g + momentum * buf : buf;
//   p = p + (-lr) * g
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimConfig& c, const model::ParamLayout& layout) : c_(c), layout_(layout) {}
  const char* name() const override { return "sgd"; }
  std::string Describe() const override {
    if (c_.momentum == 0)
      return fmt::format("sgd (no momentum, weight decay {:g})", c_.weight_decay);
    return fmt::format("sgd (momentum {:g}{}, dampening {:g}, weight decay {:g})", c_.momentum,
                       c_.nesterov ? ", Nesterov" : "", c_.dampening, c_.weight_decay);
  }
  std::vector<Slot> Slots(std::size_t lo, std::size_t hi) const override {
    if (c_.momentum == 0) return {};
    return {ElementwiseSlot("momentum_buffer", layout_.total(), lo, hi)};
  }
  void Update(const Shard& s, const StepArgs& a) const override;

 private:
  const OptimConfig c_;
  const model::ParamLayout layout_;  // a copy: it needs no caller to outlive it
};

void Sgd::Update(const Shard& s, const StepArgs& a) const {
  if (s.lo >= s.hi) return;
  const float neg_lr = static_cast<float>(-a.lr), wd = static_cast<float>(c_.weight_decay),
              mom = static_cast<float>(c_.momentum), keep = static_cast<float>(1.0 - c_.dampening),
              scale = a.grad_scale;
  const bool first = a.t == 1, nesterov = c_.nesterov;
  float* buf = c_.momentum != 0 ? s.slots[0] : nullptr;
  s.pool->ParallelFor(s.hi - s.lo, [&](std::size_t b, std::size_t e, int) {
    const std::size_t begin = s.lo + b, end = s.lo + e;
    for (const auto& seg : layout_.segments()) {
      const std::size_t from = std::max(seg.begin, begin), to = std::min(seg.end, end);
      const bool decay = seg.decay && wd != 0.f;
      for (std::size_t i = from; i < to; ++i) {
        float g = s.grads[i] * scale;
        if (decay) g = g + wd * s.params[i];
        if (buf) {
          float& m = buf[i - s.lo];
          m = first ? g : m * mom + keep * g;
          g = nesterov ? g + mom * m : m;
        }
        s.params[i] = s.params[i] + neg_lr * g;
        if (s.params_bf16) s.params_bf16[i] = kernels::FloatToBf16(s.params[i]);
      }
    }
  });
}

}  // namespace

const std::vector<std::string>& OptimizerNames() {
  static const std::vector<std::string> names(std::begin(kOptimizerNames),
                                              std::end(kOptimizerNames));
  return names;
}

std::unique_ptr<Optimizer> MakeOptimizer(const OptimConfig& c, const model::ParamLayout& layout) {
  if (c.name == "adamw") return std::make_unique<AdamW>(c, layout);
  if (c.name == "sgd") return std::make_unique<Sgd>(c, layout);
  if (c.name == "adafactor") return MakeAdafactor(c, layout);
  throw InputError(fmt::format("optim.name is '{}': the optimizers are {}", c.name,
                               fmt::join(OptimizerNames(), ", ")),
                   "set optim.name to one of them (the task commands: --optim adamw_torch, "
                   "adafactor or sgd)");
}

}  // namespace cputrain::optim
