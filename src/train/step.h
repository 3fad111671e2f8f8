// train/step: one training step and one evaluation pass over the replica groups, on every
// group's driver at once:
//   1. forward and backward over the group's rows, k times with gradient accumulation (k
//      micro-batches: the first writes the gradient buffer, the others add into it, each
//      scaled by 1/(k*B*T)); on the last micro-batch only, gradients sync bucket by bucket
//      while backward runs (GradSync: reduce-scatter between groups, then each owned part
//      across processes through comm::Distributed), as DDP's no_sync;
//   2. the group owning shard g of the flat buffer (ZeRO-1) has the summed gradient of its
//      shard; it computes the shard's sum of squares, the groups combine them in group order
//      (global norm, clipping coefficient);
//   3. the optimizer (optim/optimizer.h) updates the shard, with its state allocated for that
//      shard only, on the group's node (statistics of a tensor two shards share are summed
//      across the groups);
//   4. the shards are allgathered into every group's replica before the next forward (not
//      needed when the groups share one replica);
//   5. with train.precision: bf16, the replicas' bf16 weight copies are refreshed from the
//      updated fp32 weights: each group's own shard by the optimizer itself (same pass), and, with
//      a replica per group, the other shards after the allgather.
// The loss is the mean over the global batch (all k micro-batches): each group's sum over its
// micro-batches in order, group sums added in group order, then across processes in rank order, so
// with a fixed plan every sum has a fixed order and two runs give bit-identical results.
//
// Thread safety: Step and Evaluate are called from the main thread, one at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/comm.h"
#include "comm/distributed.h"
#include "common/function_ref.h"
#include "optim/optim.h"
#include "optim/optimizer.h"
#include "train/grad_sync.h"
#include "train/replica_group.h"

namespace cputrain::train {

struct StepResult {
  double loss = 0;       // mean over the global batch, before this step's update
  double grad_norm = 0;  // global norm before clipping
  bool skipped = false;  // the norm was not finite and skip_nonfinite held: no update
  StepTimings timings;   // group 0's
};

class Stepper {
 public:
  // B: the global micro-batch (rows over all processes and groups), T: tokens per row.
  // bucket_floats: gradient bucket size. dist: the other processes, or null. accum_steps: k
  // micro-batches per step (gradient accumulation), >= 1.
  Stepper(ReplicaGroups& groups, int B, int T, std::size_t bucket_floats, comm::Distributed* dist,
          int accum_steps = 1);
  ~Stepper();
  Stepper(const Stepper&) = delete;
  Stepper& operator=(const Stepper&) = delete;

  // Trains one step; `step` counts this Stepper's steps from 0 (the sync protocol numbers
  // them so). `load(group, j)` fills a group's act->inputs/targets with its rows of
  // micro-batch j in [0, k) (on its driver). `update` carries the step's learning rate and
  // update count (its grad_scale is replaced by the clip coefficient of `grad_clip`).
  // skip_nonfinite: a non-finite global gradient norm skips the update (no parameter or
  // optimizer state changes) on every group and process alike — the norm is global, so they all
  // decide the same.
  // loss_count > 0: the loss is the summed position losses over loss_count instead of the mean
  // over every position (RowSource::LossCount: labels a task ignores).
  StepResult Step(uint64_t step, FunctionRef<void(ReplicaGroup&, int)> load, optim::StepArgs update,
                  double grad_clip, bool skip_nonfinite = false, double loss_count = 0);

  // One forward pass over this process's groups' rows, no update: adds each group's summed
  // loss to *sum, in group order (the caller sums across processes and divides by B*T).
  void AddForwardLoss(FunctionRef<void(ReplicaGroup&)> load, double* sum);

 private:
  void StepOnGroup(ReplicaGroup& grp, uint64_t step, FunctionRef<void(ReplicaGroup&, int)> load,
                   optim::StepArgs update, double grad_clip, bool skip_nonfinite);
  // Forward and backward over the k micro-batches; the last one's backward feeds the sync.
  void AccumulateGradients(ReplicaGroup& grp, uint64_t step,
                           FunctionRef<void(ReplicaGroup&, int)> load, double* comm_ms);
  // What the step's summed loss is divided by: loss_count_, else B*T*k.
  double LossDivisor() const {
    return loss_count_ > 0 ? loss_count_ : static_cast<double>(B_) * LossUnitsPerRow() * accum_;
  }
  void Abort(const std::string& reason);
  // Losses per row the mean is over: each position's next-token loss (T) for a language model,
  // one per sequence for a task head (question answering's (start + end) / 2).
  int LossUnitsPerRow() const { return groups_.layout().shape().head == model::Head::kLm ? T_ : 1; }
  // bf16: the replicas' bf16 weight copies from the fp32 weights, before the first step or
  // evaluation (the weights were set before the Stepper existed: init, load, resume); from then
  // on each step refreshes them after its update (StepOnGroup).
  void RefreshBf16Once();

  ReplicaGroups& groups_;
  const int B_, T_;
  comm::Distributed* dist_;
  const int accum_;
  double loss_count_ = 0;                     // this step's (Step's loss_count)
  std::unique_ptr<GradSync> sync_;            // with more than one group or process
  std::unique_ptr<comm::Communicator> comm_;  // with more than one group
  bool bf16_fresh_ = false;
};

}  // namespace cputrain::train
