// optim/optimizer: the optimizer as a component, chosen by name (optim.name; the task commands'
// --optim): AdamW (torch.optim.AdamW), Adafactor (transformers.optimization.Adafactor) and SGD
// (torch.optim.SGD, momentum and Nesterov).
//
// An optimizer owns its state as slots: named float vectors (AdamW's m and v, SGD's
// momentum_buffer, Adafactor's exp_avg, exp_avg_sq_row, exp_avg_sq_col and exp_avg_sq). Under
// ZeRO-1 each replica group updates the shard [lo, hi) of the flat buffer it owns and keeps the
// slots of that shard alone: Slots(lo, hi) says how many floats each holds there and which pieces
// of the whole model's vector they are (state.bin stores the whole vectors, so any group count
// resumes any other's). A slot that follows the parameters elementwise is [lo, hi) itself;
// Adafactor's factored moments of a matrix are kept whole by every shard the matrix reaches into
// (they are small: rows + columns floats), each shard computing the same values.
//
// Per tensor statistics (Adafactor's row and column means, its RMS clipping and parameter scale)
// need every shard's part of the tensor: Update sums them across the groups through
// Shard::sum_across_shards (a fixed-order allreduce), so every group takes the same decisions.
//
// Thread safety: an Optimizer is immutable once made. Update runs on every group's driver at once,
// each with its own shard and buffers; every group calls it for every step (sum_across_shards
// is a collective).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/function_ref.h"
#include "model/transformer.h"
#include "optim/optim_config.h"
#include "runtime/worker_pool.h"

namespace cputrain::optim {

// The shard's buffer [local, local + len) is the whole model's vector [full, full + len).
struct SlotPiece {
  std::size_t full = 0, local = 0, len = 0;
};

// One slot of an optimizer's state for a shard.
struct Slot {
  std::string name;               // transformers' / torch's state name ("exp_avg_sq_row")
  std::size_t full = 0;           // floats of the whole model's vector (state.bin)
  std::size_t local = 0;          // floats this shard keeps
  std::vector<SlotPiece> pieces;  // in increasing `full` order; they cover [0, local)
};

// What one step's update is given, whatever the optimizer.
struct StepArgs {
  double lr = 0;           // the schedule's learning rate of this step
  int t = 1;               // 1-based count of updates applied (a skipped step is none)
  float grad_scale = 1.f;  // the clip coefficient, applied to every gradient first
};

// One group's shard, as Update sees it.
struct Shard {
  WorkerPool* pool = nullptr;
  float* params = nullptr;  // the replica's flat buffer: [lo, hi) is updated in place
  // The summed gradients of [lo, hi). Adafactor keeps its update there (the gradients of the
  // shard are not read again before the next step writes them).
  float* grads = nullptr;
  std::size_t lo = 0, hi = 0;
  std::span<float* const> slots;  // Slots(lo, hi)'s buffers, in order; zero before the first update
  uint16_t* params_bf16 = nullptr;  // train.precision bf16: the bf16 rounding of each update
  float* scratch = nullptr;         // ReduceFloats() floats
  // Sums x[0, n) over the groups' shards in place (every group gets the same sum, added in group
  // order). Every group calls it the same number of times with the same n; with one group it
  // does nothing.
  FunctionRef<void(float*, std::size_t)> sum_across_shards;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual const char* name() const = 0;  // optim.name
  // Its settings, for the log: "adafactor (relative step, parameter scale, no first moment)".
  virtual std::string Describe() const = 0;
  // Its state for the shard [lo, hi), slot by slot.
  virtual std::vector<Slot> Slots(std::size_t lo, std::size_t hi) const = 0;
  // Floats of Shard::scratch (the cross-shard statistics), the same on every shard.
  virtual std::size_t ReduceFloats() const { return 0; }
  // The learning rate a step runs at, for metrics: the schedule's, or Adafactor's relative step.
  virtual double StepLr(double schedule_lr, int /*t*/) const { return schedule_lr; }
  // Updates params[lo, hi) from grads[lo, hi) and the slots.
  virtual void Update(const Shard& s, const StepArgs& a) const = 0;
};

// optim.name's optimizer over `layout`'s flat buffer (its tensors as transformers holds them:
// model/family.h's HfViews). Throws InputError for a name OptimizerNames() does not list.
std::unique_ptr<Optimizer> MakeOptimizer(const OptimConfig& c, const model::ParamLayout& layout);
// The optimizer whose state state.bin files before version 4 hold (slots m and v: train/
// train_state.h).
inline constexpr const char* kVersion3StateOptimizer = "adamw";
// "adamw", "adafactor", "sgd".
const std::vector<std::string>& OptimizerNames();

}  // namespace cputrain::optim
