#include "train/step.h"

#include <chrono>
#include <cmath>

#include "kernels/bf16.h"

namespace cputrain::train {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

Stepper::Stepper(ReplicaGroups& groups, int B, int T, std::size_t bucket_floats,
                 comm::Distributed* dist, int accum_steps)
    : groups_(groups), B_(B), T_(T), dist_(dist), accum_(accum_steps) {
  const int G = groups.size();
  if (G == 1 && dist == nullptr) return;
  std::vector<WorkerPool*> pools, comm_pools;
  std::vector<float*> grads;
  bool all_comm = true;
  for (ReplicaGroup& grp : groups.all()) {
    pools.push_back(grp.pool.get());
    grads.push_back(grp.grads.data());
    all_comm &= grp.comm_pool != nullptr;
    if (grp.comm_pool) comm_pools.push_back(grp.comm_pool.get());
  }
  if (!all_comm) comm_pools.clear();
  sync_ =
      std::make_unique<GradSync>(groups.layout(), pools, comm_pools, grads, bucket_floats, dist);
  if (G > 1) {
    std::vector<int> threads;
    for (ReplicaGroup& grp : groups.all()) threads.push_back(grp.pool->size());
    comm_ = std::make_unique<comm::Communicator>(threads);
  }
}

Stepper::~Stepper() = default;

void Stepper::Abort(const std::string& reason) {
  if (sync_) sync_->Abort(reason);
  if (comm_) comm_->Abort(reason);
}

void Stepper::RefreshBf16Once() {
  if (bf16_fresh_) return;
  if (groups_[0].bf16()) groups_.RefreshBf16Weights();
  bf16_fresh_ = true;
}

StepResult Stepper::Step(uint64_t step, FunctionRef<void(ReplicaGroup&, int)> load,
                         optim::StepArgs update, double grad_clip, bool skip_nonfinite,
                         double loss_count) {
  RefreshBf16Once();
  loss_count_ = loss_count;
  groups_.OnAll(
      [&](ReplicaGroup& grp) { StepOnGroup(grp, step, load, update, grad_clip, skip_nonfinite); },
      [&](const std::string& why) { Abort(why); });
  double loss_sum = 0;
  for (const ReplicaGroup& grp : groups_.all()) loss_sum += grp.loss_sum;
  if (dist_) loss_sum = dist_->SumAcrossRanks(loss_sum);
  const double norm = groups_[0].grad_norm;
  return {loss_sum / LossDivisor(), norm, skip_nonfinite && !std::isfinite(norm),
          groups_[0].timings};
}

void Stepper::AccumulateGradients(ReplicaGroup& grp, uint64_t step,
                                  FunctionRef<void(ReplicaGroup&, int)> load, double* comm_ms) {
  const int g = grp.index;
  const model::ParamLayout& layout = groups_.model_layout();
  WorkerPool& pool = *grp.pool;
  // d(mean loss)/d(position loss); with k = 1 the same float as before accumulation existed.
  const float dloss = loss_count_ > 0
                          ? static_cast<float>(1.0 / loss_count_)
                          : 1.0f / (static_cast<float>(B_) * LossUnitsPerRow() * accum_);
  grp.loss_sum = 0;
  grp.timings.forward_ms = grp.timings.backward_ms = 0;
  for (int j = 0; j < accum_; ++j) {
    const bool last = j == accum_ - 1;
    load(grp, j);
    const int T = grp.positions > 0 ? grp.positions : T_;  // dynamic padding (train/rows.h)
    auto t = Clock::now();
    grp.loss_sum += model::Forward(pool, layout, grp.model_weights(), *grp.act, grp.rows, T, true,
                                   grp.bf16(), nullptr, grp.lora());
    grp.timings.forward_ms += MsSince(t);
    // backward; inline bucket reductions happen inside the last one and count as communication
    double sync_ms = 0;
    t = Clock::now();
    if (last && sync_) sync_->BeginStep(g, step);
    model::Backward(
        pool, layout, grp.model_weights(), grp.grads.data(), *grp.act, grp.rows, T, dloss,
        [&](std::size_t from) {
          if (!last || !sync_) return;  // no_sync on every micro-batch but the last
          const auto c = Clock::now();
          sync_->OnBackwardReady(g, step, from);
          sync_ms += MsSince(c);
        },
        /*accumulate=*/j > 0, grp.bf16(), grp.lora());
    grp.timings.backward_ms += MsSince(t) - sync_ms;
    *comm_ms += sync_ms;
  }
}

void Stepper::StepOnGroup(ReplicaGroup& grp, uint64_t step,
                          FunctionRef<void(ReplicaGroup&, int)> load, optim::StepArgs update,
                          double grad_clip, bool skip_nonfinite) {
  const int g = grp.index;
  const model::ParamLayout& layout = groups_.layout();
  WorkerPool& pool = *grp.pool;
  // 1. forward and backward over the micro-batches
  double comm_ms = 0;
  AccumulateGradients(grp, step, load, &comm_ms);

  auto t = Clock::now();
  // 2. global gradient norm: each owner's shard, combined in group order
  if (sync_) sync_->FinishStep(g, step);
  double sumsq = optim::SumOfSquares(pool, grp.grads.data(), grp.owned.lo, grp.owned.hi);
  if (comm_) {
    grp.scalars[0] = static_cast<float>(sumsq);
    pool.ForEachThread(
        [&](int th) { comm_->Allreduce(g, th, grp.scalars.data(), grp.scalars.data(), 1); });
    sumsq = grp.scalars[0];
  }
  grp.grad_norm = std::sqrt(sumsq);
  comm_ms += MsSince(t);

  // 3. The optimizer on the owned shard, unless the norm is not finite and such steps are
  // skipped (the norm is global: every group skips alike, so the cross-shard sums match up).
  t = Clock::now();
  update.grad_scale = optim::ClipCoefficient(grp.grad_norm, grad_clip);
  // bf16: the update also refreshes the bf16 copy of the shard it updates (in the same pass). A
  // shared replica's copy is shared too: each group writes its own shard of it (disjoint writes,
  // read only from the next step on). Own replicas get the other shards with the allgather below.
  if (!skip_nonfinite || std::isfinite(grp.grad_norm)) {
    auto sum = [&](float* x, std::size_t n) {
      if (comm_) pool.ForEachThread([&](int th) { comm_->Allreduce(g, th, x, x, n); });
    };
    const optim::Shard shard{
        &pool,          grp.weights,      grp.grads.data(),         grp.owned.lo, grp.owned.hi,
        grp.state_ptrs, grp.weights_bf16, grp.optim_scratch.data(), sum};
    groups_.optimizer().Update(shard, update);
  }
  grp.timings.optimizer_ms = MsSince(t);

  // 4. Every group pulls the other shards into its replica before the next forward. With one
  // shared replica the shards are already in place: OnAll returns only after every group's
  // update, so they all happen before any group's next forward. And no group updates while
  // another still reads the weights in backward: the sum-of-squares allreduce above is a
  // barrier after every group's backward.
  if (comm_ && !groups_.shared_replica()) {
    t = Clock::now();
    pool.ForEachThread([&](int th) {
      comm_->Allgather(g, th, grp.weights + grp.owned.lo, grp.weights, layout.total());
    });
    comm_ms += MsSince(t);
    if (grp.weights_bf16) {  // the shards the other groups updated (no copy with LoRA)
      t = Clock::now();
      kernels::ConvertToBf16(pool, grp.weights_bf16, grp.weights, grp.owned.lo);
      kernels::ConvertToBf16(pool, grp.weights_bf16 + grp.owned.hi, grp.weights + grp.owned.hi,
                             layout.total() - grp.owned.hi);
      grp.timings.optimizer_ms += MsSince(t);
    }
  }
  grp.timings.comm_ms = comm_ms;
}

void Stepper::AddForwardLoss(FunctionRef<void(ReplicaGroup&)> load, double* sum) {
  RefreshBf16Once();
  groups_.OnAll(
      [&](ReplicaGroup& grp) {
        load(grp);
        grp.loss_sum =
            model::Forward(*grp.pool, groups_.model_layout(), grp.model_weights(), *grp.act,
                           grp.rows, T_, true, grp.bf16(), nullptr, grp.lora());
      },
      [&](const std::string& why) { Abort(why); });
  for (const ReplicaGroup& grp : groups_.all()) *sum += grp.loss_sum;
}

}  // namespace cputrain::train
